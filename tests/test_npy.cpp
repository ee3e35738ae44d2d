// .npy reader and writer: exact bytes written, values round-tripped, malformed files rejected
// with exact messages.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/npy.h"
#include "tests/file_test_util.h"

namespace teeny {
namespace {

using testing::slurp;
using testing::spit;

class NpyTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.str(name); }
  // A version-1 file with `header` padded like NumPy's, followed by `data`.
  std::string npy_v1(std::string header, const std::string& data) const {
    const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
    header.append(total - 10 - header.size() - 1, ' ');
    header.push_back('\n');
    std::string bytes("\x93NUMPY\x01\x00", 8);
    bytes.push_back(static_cast<char>(header.size() & 0xff));
    bytes.push_back(static_cast<char>(header.size() >> 8));
    return bytes + header + data;
  }
  std::string message_of(const std::string& file) const {
    try {
      read_npy(file);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::kInvalidInput);
      return error.message();
    }
    ADD_FAILURE() << "no error reading " << file;
    return "";
  }
  testing::ScratchDir dir_;
};

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string bytes;
  for (T value : values) bytes.append(reinterpret_cast<const char*>(&value), sizeof(T));
  return bytes;
}

TEST_F(NpyTest, WritesNumpyV1LayoutExactly) {
  write_npy(path("a.npy"), HostTensor{DType::kF32, {2, 3}, {1, 2, 3, 4, 5, -6.5}});
  const std::string bytes = slurp(path("a.npy"));
  // As np.save writes it: 10 bytes of magic, version and length, the header padded with
  // spaces so the data starts at a multiple of 64 (here 128), a newline last.
  ASSERT_EQ(bytes.size(), 128u + 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8), 118);
  const std::string expected_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_EQ(bytes.substr(10, expected_header.size()), expected_header);
  EXPECT_EQ(bytes.find_first_not_of(' ', 10 + expected_header.size()), 127u);
  EXPECT_EQ(bytes[127], '\n');
  EXPECT_EQ(bytes.substr(128), raw<float>({1, 2, 3, 4, 5, -6.5f}));
}

TEST_F(NpyTest, OneDimensionalAndScalarShapes) {
  write_npy(path("v.npy"), HostTensor{DType::kI32, {3}, {7, -8, 9}});
  EXPECT_NE(slurp(path("v.npy")).find("'shape': (3,), }"), std::string::npos);
  write_npy(path("s.npy"), HostTensor{DType::kF32, {}, {2.5}});
  EXPECT_NE(slurp(path("s.npy")).find("'shape': (), }"), std::string::npos);
  HostTensor scalar = read_npy(path("s.npy"));
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.data, std::vector<double>({2.5}));
}

TEST_F(NpyTest, RoundTripsEveryDtype) {
  // 0.1 is not exact in f16; the file holds the rounded value, which reads back exactly.
  for (DType dtype : {DType::kF32, DType::kF16, DType::kI32}) {
    HostTensor tensor{dtype, {2, 2}, {1, -2, dtype == DType::kI32 ? 5 : 0.5, 1024}};
    write_npy(path("t.npy"), tensor);
    HostTensor back = read_npy(path("t.npy"));
    EXPECT_EQ(back.dtype, dtype) << dtype_name(dtype);
    EXPECT_EQ(back.shape, tensor.shape);
    EXPECT_EQ(back.data, tensor.data);
  }
  HostTensor half{DType::kF16, {1}, {0.1}};
  write_npy(path("h.npy"), half);
  EXPECT_EQ(read_npy(path("h.npy")).data[0], f16_bits_to_float(float_to_f16_bits(0.1f)));
}

TEST_F(NpyTest, Bf16IsWrittenAsF32Exactly) {
  const double value = bf16_bits_to_float(float_to_bf16_bits(3.14159f));
  write_npy(path("b.npy"), HostTensor{DType::kBF16, {2}, {value, -1}});
  EXPECT_NE(slurp(path("b.npy")).find("'descr': '<f4'"), std::string::npos);
  HostTensor back = read_npy(path("b.npy"));
  EXPECT_EQ(back.dtype, DType::kF32);
  EXPECT_EQ(back.data, std::vector<double>({value, -1}));
  EXPECT_EQ(npy_storage_dtype(DType::kBF16), DType::kF32);
}

TEST_F(NpyTest, ReadsF64AndI64AsF32AndI32) {
  spit(path("d.npy"), npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", raw<double>({0.1, -3})));
  HostTensor d = read_npy(path("d.npy"));
  EXPECT_EQ(d.dtype, DType::kF32);
  EXPECT_EQ(d.data, std::vector<double>({static_cast<float>(0.1), -3}));
  spit(path("l.npy"), npy_v1("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), }", raw<int64_t>({5, -7})));
  HostTensor l = read_npy(path("l.npy"));
  EXPECT_EQ(l.dtype, DType::kI32);
  EXPECT_EQ(l.shape, std::vector<int64_t>({1, 2}));
  EXPECT_EQ(l.data, std::vector<double>({5, -7}));
}

TEST_F(NpyTest, ReadsVersion2Headers) {
  std::string header = "{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (2,)}\n";
  std::string bytes("\x93NUMPY\x02\x00", 8);
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  spit(path("v2.npy"), bytes + header + raw<int32_t>({3, 4}));
  HostTensor tensor = read_npy(path("v2.npy"));
  EXPECT_EQ(tensor.dtype, DType::kI32);
  EXPECT_EQ(tensor.data, std::vector<double>({3, 4}));
}

TEST_F(NpyTest, MalformedFilesHaveExactMessages) {
  const std::string f = path("bad.npy");
  spit(f, "PK\x03\x04 this is a zip");
  EXPECT_EQ(message_of(f), f + ": not a .npy file (it does not start with \\x93NUMPY)");

  spit(f, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw<float>({1, 2})));
  EXPECT_EQ(message_of(f), f + ": data is 8 bytes, but shape (2, 3) of '<f4' needs 24");

  spit(f, npy_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", raw<float>({1})));
  EXPECT_EQ(message_of(f), f + ": unsupported dtype '>f4' (supported: <f4, <f2, <f8, <i4, <i8; "
                               "little-endian)");

  spit(f, npy_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", raw<float>({1})));
  EXPECT_EQ(message_of(f), f + ": Fortran-order arrays are not supported (save with "
                               "np.ascontiguousarray)");

  spit(f, npy_v1("{'descr': '<f4', 'shape': (1,), }", raw<float>({1})));
  EXPECT_EQ(message_of(f), f + ": header has no 'fortran_order'");

  spit(f, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1; }", raw<float>({1})));
  EXPECT_EQ(message_of(f), f + ": malformed header at character 53: expected ',' or ')' in the "
                               "shape in \"{'descr': '<f4', 'fortran_order': False, 'shape': (1; }\"");

  spit(f, npy_v1("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", raw<int64_t>({int64_t{1} << 40})));
  EXPECT_EQ(message_of(f), f + ": element 0 = 1099511627776 does not fit in i32");

  std::string truncated("\x93NUMPY\x01\x00\xff\x00{'descr'", 18);
  spit(f, truncated);
  EXPECT_EQ(message_of(f), f + ": truncated header");

  std::string v9("\x93NUMPY\x09\x00\x00\x00", 10);
  spit(f, v9);
  EXPECT_EQ(message_of(f), f + ": unsupported .npy format version 9 (1, 2 and 3 are read)");

  EXPECT_EQ(message_of(path("missing.npy")),
            "cannot read .npy file '" + path("missing.npy") + "': No such file or directory");
}

// Headers that claim sizes no file has: refused from the header and the file's size, before
// anything of that size is allocated or read.
TEST_F(NpyTest, HostileHeadersAreRefusedBeforeReadingData) {
  const std::string f = path("x.npy");
  spit(f, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (12345678901234567890123, 2), }", ""));
  EXPECT_EQ(message_of(f), f + ": malformed header at character 71: shape extent does not fit in 64 bits in "
                               "\"{'descr': '<f4', 'fortran_order': False, 'shape': (12345678901234567890123, 2), }\"");

  spit(f, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000, 4000000000, 4), }", ""));
  EXPECT_EQ(message_of(f), f + ": shape (4000000000, 4000000000, 4) of '<f4' needs more than 2^64 bytes");

  spit(f, npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000), }", raw<double>({1, 2})));
  EXPECT_EQ(message_of(f), f + ": data is 16 bytes, but shape (1000000000, 1000) of '<f8' needs 8000000000000");

  std::string v2("\x93NUMPY\x02\x00\x00\x00\x00\x7f", 12);  // a 2 GiB header
  spit(f, v2 + "{}");
  EXPECT_EQ(message_of(f), f + ": header length 2130706432 is over the 1 MiB limit");

  const std::string long_header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1, " + std::string(5000, 'x') + "}";
  spit(f, npy_v1(long_header, ""));
  EXPECT_EQ(message_of(f),
            f + ": malformed header at character 55: expected a non-negative integer in the shape in \"" +
                long_header.substr(0, 197) + "...\"");
}

TEST_F(NpyTest, OnlyRegularFilesAreRead) {
  EXPECT_EQ(message_of(dir_.str()), "cannot read .npy file '" + dir_.str() + "': is a directory");
  EXPECT_EQ(message_of("/dev/zero"), "cannot read .npy file '/dev/zero': not a regular file");
}

TEST_F(NpyTest, FailedWriteLeavesNothingBehind) {
  const std::string target = path("no_such_dir/out.npy");
  try {
    write_npy(target, HostTensor{DType::kF32, {1}, {1}});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "cannot write " + target + ": No such file or directory");
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path()));
}

}  // namespace
}  // namespace teeny
