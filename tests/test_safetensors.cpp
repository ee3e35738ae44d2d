// safetensors reader/writer and weight matching against a bundle's params: exact bytes,
// round trips, malformed files and mismatches with exact messages.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/safetensors.h"
#include "tests/file_test_util.h"

namespace teeny {
namespace {

using testing::slurp;

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.str(name); }
  // A file with a raw JSON header and data section.
  void spit(const std::string& file, const std::string& header, const std::string& data) const {
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
    testing::spit(file, bytes + header + data);
  }
  std::string read_error(const std::string& file) const {
    try {
      read_safetensors(file);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::kInvalidInput);
      return error.message();
    }
    ADD_FAILURE() << "no error";
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

TEST_F(SafetensorsTest, WriterProducesTheFormatExactly) {
  write_safetensors(path("w.safetensors"), {{"a.weight", HostTensor{DType::kF32, {2}, {1.5, -2}}},
                                            {"b.ids", HostTensor{DType::kI32, {1}, {7}}}});
  const std::string bytes = slurp(path("w.safetensors"));
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  EXPECT_EQ(header_length % 8, 0u);
  const std::string header = bytes.substr(8, header_length);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"a.weight":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},)"
            R"("b.ids":{"data_offsets":[8,12],"dtype":"I32","shape":[1]}})");
  EXPECT_EQ(bytes.substr(8 + header_length), raw<float>({1.5f, -2.0f}) + raw<int32_t>({7}));
}

TEST_F(SafetensorsTest, RoundTripsF32F16Bf16I32) {
  const double bf = bf16_bits_to_float(float_to_bf16_bits(0.3f));
  const double half = f16_bits_to_float(float_to_f16_bits(0.3f));
  std::map<std::string, HostTensor> tensors{
      {"f32", HostTensor{DType::kF32, {2, 2}, {1, 2, 3, 0.25}}},
      {"f16", HostTensor{DType::kF16, {1}, {half}}},
      {"bf16", HostTensor{DType::kBF16, {3}, {bf, -bf, 0}}},
      {"i32", HostTensor{DType::kI32, {2}, {-5, 123456}}},
  };
  write_safetensors(path("r.safetensors"), tensors);
  std::vector<SafetensorsEntry> entries = read_safetensors(path("r.safetensors"));
  ASSERT_EQ(entries.size(), 4u);
  for (const SafetensorsEntry& entry : entries) {
    const HostTensor& expected = tensors.at(entry.name);
    EXPECT_EQ(entry.tensor.dtype, expected.dtype) << entry.name;
    EXPECT_EQ(entry.shape, expected.shape) << entry.name;
    EXPECT_EQ(entry.tensor.data, expected.data) << entry.name;
  }
  EXPECT_EQ(entries[0].name, "bf16");
  EXPECT_EQ(entries[0].dtype, "BF16");
}

TEST_F(SafetensorsTest, ReadsI64AsI32AndIgnoresMetadata) {
  spit(path("i.safetensors"),
       R"({"__metadata__":{"format":"pt"},"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})",
       raw<int64_t>({3, -4}));
  std::vector<SafetensorsEntry> entries = read_safetensors(path("i.safetensors"));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].tensor.dtype, DType::kI32);
  EXPECT_EQ(entries[0].tensor.data, std::vector<double>({3, -4}));
}

TEST_F(SafetensorsTest, MetadataIsWrittenAndReadAsStrings) {
  const std::string f = path("m.safetensors");
  write_safetensors(f, {{"w", HostTensor{DType::kF32, {1}, {2}}}}, {{"format", "teeny-checkpoint"}, {"step", "7"}});
  const std::string bytes = slurp(f);
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  const std::string header = bytes.substr(8, header_length);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"__metadata__":{"format":"teeny-checkpoint","step":"7"},)"
            R"("w":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}})");
  const SafetensorsFile file = read_safetensors_file(f);
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "teeny-checkpoint"}, {"step", "7"}}));
  ASSERT_EQ(file.entries.size(), 1u);
  EXPECT_EQ(file.entries[0].tensor.data, std::vector<double>{2});
}

// Metadata that is not a map of strings, as other writers may make it, never refuses the file.
TEST_F(SafetensorsTest, OtherMetadataReadsAsJsonTextOrNone) {
  const std::string f = path("m.safetensors");
  spit(f, R"({"__metadata__":{"step":7,"tags":["a"]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       raw<float>({1}));
  EXPECT_EQ(read_safetensors_file(f).metadata,
            (std::map<std::string, std::string>{{"step", "7"}, {"tags", R"(["a"])"}}));
  spit(f, R"({"__metadata__":5,"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", raw<float>({1}));
  const SafetensorsFile file = read_safetensors_file(f);
  EXPECT_TRUE(file.metadata.empty());
  EXPECT_EQ(file.entries.size(), 1u);
}

TEST_F(SafetensorsTest, MalformedFilesHaveExactMessages) {
  const std::string f = path("bad.safetensors");
  testing::spit(f, "abc");
  EXPECT_EQ(read_error(f), f + ": not a safetensors file (3 bytes; the header length alone is 8)");

  testing::spit(f, std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10));
  EXPECT_EQ(read_error(f), f + ": header length 255 exceeds the file's 2 remaining bytes");

  spit(f, "{not json", "");
  EXPECT_EQ(read_error(f).rfind(f + ": header is not valid JSON: ", 0), 0u);

  spit(f, "[1, 2]", "");
  EXPECT_EQ(read_error(f), f + ": header is not a JSON object");

  spit(f, R"({"w":{"dtype":"F32","shape":[2]}})", "");
  EXPECT_EQ(read_error(f), f + ": tensor 'w': needs \"dtype\", \"shape\" and \"data_offsets\"");

  spit(f, R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", raw<double>({1}));
  EXPECT_EQ(read_error(f), f + ": tensor 'w': unsupported dtype F64 (supported: F32, F16, BF16, I32, I64)");

  spit(f, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", raw<float>({1, 2}));
  EXPECT_EQ(read_error(f), f + ": tensor 'w': data_offsets [0, 16] are outside the 8-byte data section");

  spit(f, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", raw<float>({1, 2}));
  EXPECT_EQ(read_error(f), f + ": tensor 'w': data_offsets [0, 8] hold 8 bytes, but F32 [3] needs 12");

  spit(f, R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", raw<float>({1}));
  EXPECT_EQ(read_error(f), f + ": tensor 'w': \"shape\" has an entry that is not a size");

  spit(f, R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", raw<int64_t>({int64_t{1} << 33}));
  EXPECT_EQ(read_error(f), f + ": tensor 'w': element 0 = 8589934592 does not fit in i32");
}

// Files whose header claims what no file holds: refused from the header and the file's size.
TEST_F(SafetensorsTest, HostileFilesAreRefusedBeforeReadingData) {
  const std::string f = path("h.safetensors");
  spit(f, R"({"__metadata__":{"x":1e999}})", "");
  EXPECT_EQ(read_error(f), f + ": header: number overflow parsing '1e999'");

  spit(f, R"({"__metadata__":)" + std::string(100000, '[') + std::string(100000, ']') + "}", "");
  EXPECT_EQ(read_error(f), f + ": header: lists and objects nested more than 64 deep, at line 1, column 80");

  spit(f, R"({"w":{"dtype":"F32","shape":[0, 18446744073709551615],"data_offsets":[0,0]}})", "");
  EXPECT_EQ(read_error(f), f + ": tensor 'w': shape is too large");

  spit(f, R"({"w":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,4000000000000]}})", "");
  EXPECT_EQ(read_error(f), f + ": tensor 'w': data_offsets [0, 4000000000000] are outside the 0-byte data section");

  // A header length over the limit, in a sparse file that is as long as it says.
  const uint64_t length = uint64_t{65} << 20;
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  testing::spit(f, bytes);
  std::filesystem::resize_file(f, 8 + length);
  EXPECT_EQ(read_error(f), f + ": header length 68157440 is over the 64 MiB limit");
}

TEST_F(SafetensorsTest, OnlyRegularFilesAreRead) {
  EXPECT_EQ(read_error(dir_.str()), "cannot read safetensors file '" + dir_.str() + "': is a directory");
  EXPECT_EQ(read_error("/dev/zero"), "cannot read safetensors file '/dev/zero': not a regular file");
}

class LoadWeightsTest : public SafetensorsTest {
 protected:
  std::vector<ParamShape> params{
      {"fc1.weight", DType::kF32, {2, 3}, ParamInit::kTrained},
      {"fc1.bias", DType::kF32, {2}, ParamInit::kTrained},
      {"emb.weight", DType::kBF16, {4, 2}, ParamInit::kTrained},
      {"det.anchor_x", DType::kF32, {5}, ParamInit::kHost},
  };
  std::map<std::string, HostTensor> good() const {
    return {{"fc1.weight", HostTensor{DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}}},
            {"fc1.bias", HostTensor{DType::kF32, {2}, {0.5, -0.5}}},
            {"emb.weight", HostTensor{DType::kBF16, {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}}}};
  }
  std::string load_error(std::map<std::string, HostTensor> tensors) {
    write_safetensors(path("w.safetensors"), tensors);
    try {
      load_weights(path("w.safetensors"), params);
    } catch (const Error& error) {
      EXPECT_EQ(error.notes(), std::vector<std::string>({"the bundle's trained parameters: fc1.weight [2, 3] f32, "
                                                         "fc1.bias [2] f32, emb.weight [4, 2] bf16"}));
      return error.message();
    }
    ADD_FAILURE() << "no error";
    return "";
  }
};

TEST_F(LoadWeightsTest, LoadsByNameAndConvertsFloatDtypes) {
  auto tensors = good();
  tensors["emb.weight"] = HostTensor{DType::kF32, {4, 2}, {0.3, 2, 3, 4, 5, 6, 7, 8}};
  write_safetensors(path("w.safetensors"), tensors);
  LoadedWeights loaded = load_weights(path("w.safetensors"), params);
  ASSERT_EQ(loaded.tensors.size(), 3u);
  EXPECT_EQ(loaded.tensors.at("fc1.weight").data, std::vector<double>({1, 2, 3, 4, 5, 6}));
  const HostTensor& emb = loaded.tensors.at("emb.weight");
  EXPECT_EQ(emb.dtype, DType::kBF16);
  EXPECT_EQ(emb.data[0], bf16_bits_to_float(float_to_bf16_bits(0.3f)));
  EXPECT_EQ(loaded.notes, std::vector<std::string>(
                              {"converted 1 tensor(s) from " + path("w.safetensors") + " to the parameters' dtypes"}));
}

TEST_F(LoadWeightsTest, StateAParamDeclaresUnusedIsSkipped) {
  auto tensors = good();
  tensors["fc1.num_batches_tracked"] = HostTensor{DType::kI32, {}, {10}};  // like PyTorch's BN counter
  EXPECT_EQ(load_error(tensors), "weights " + path("w.safetensors") +
                                     " do not match the bundle: not in the bundle 'fc1.num_batches_tracked'");
  std::vector<ParamShape> declared = params;
  declared[1].unused_state = {"fc1.num_batches_tracked"};
  LoadedWeights loaded = load_weights(path("w.safetensors"), declared);
  EXPECT_EQ(loaded.tensors.size(), 3u);
  EXPECT_EQ(loaded.tensors.count("fc1.num_batches_tracked"), 0u);
}

TEST_F(LoadWeightsTest, MissingExtraAndMismatchedAreListed) {
  const std::string f = path("w.safetensors");
  auto tensors = good();
  tensors.erase("fc1.bias");
  EXPECT_EQ(load_error(tensors), "weights " + f + " do not match the bundle: missing fc1.bias [2] f32");

  tensors = good();
  tensors["fc1.wieght"] = HostTensor{DType::kF32, {1}, {0}};
  tensors["det.anchor_x"] = HostTensor{DType::kF32, {5}, {0, 0, 0, 0, 0}};
  EXPECT_EQ(load_error(tensors), "weights " + f +
                                     " do not match the bundle: not in the bundle 'det.anchor_x' "
                                     "(computed by teeny, not trained), 'fc1.wieght' (did you mean 'fc1.weight'?)");

  tensors = good();
  tensors["fc1.weight"] = HostTensor{DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6}};
  tensors["fc1.bias"] = HostTensor{DType::kI32, {2}, {1, 2}};
  EXPECT_EQ(load_error(tensors), "weights " + f +
                                     " do not match the bundle: mismatched 'fc1.bias' is I32 [2], expected "
                                     "fc1.bias [2] f32; 'fc1.weight' is F32 [3, 2], expected fc1.weight [2, 3] f32");
}

// A file of many stray tensors, or of one with a huge name, still makes a one-line error.
TEST_F(LoadWeightsTest, StrayTensorsAreListedShortly) {
  const std::string f = path("w.safetensors");
  auto tensors = good();
  for (int i = 0; i < 12; ++i) tensors[fmt::format("stray{:02}", i)] = HostTensor{DType::kF32, {1}, {0}};
  EXPECT_EQ(load_error(tensors), "weights " + f +
                                     " do not match the bundle: not in the bundle 'stray00', 'stray01', 'stray02', "
                                     "'stray03', 'stray04', 'stray05', 'stray06', 'stray07', 'stray08', 'stray09', "
                                     "and 2 more");
  tensors = good();
  tensors[std::string(1000000, 'n')] = HostTensor{DType::kF32, {1}, {0}};
  EXPECT_EQ(load_error(tensors),
            "weights " + f + " do not match the bundle: not in the bundle '" + std::string(77, 'n') + "...'");
}

}  // namespace
}  // namespace teeny
