#include "core/npy.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "core/atomic_file.h"
#include "core/input_file.h"

namespace teeny {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr uint64_t kHeaderLimit = 1 << 20;  // NumPy writes a few hundred bytes

Error npy_error(const std::string& path, const std::string& message) {
  return Error(fmt::format("{}: {}", path, message));
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// Values are strings, True/False, or tuples of integers; that is all NumPy writes.
struct HeaderValue {
  enum class Kind { kString, kBool, kTuple } kind = Kind::kString;
  std::string text;
  bool flag = false;
  std::vector<int64_t> ints;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : text_(text), path_(path) {}

  std::map<std::string, HeaderValue> parse_dict() {
    std::map<std::string, HeaderValue> dict;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      std::string key = parse_string();
      expect(':');
      dict[key] = parse_value();
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
    }
    ++pos_;
    return dict;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw npy_error(path_,
                    fmt::format("malformed header at character {}: {} in \"{}\"", pos_ + 1, what, excerpt(text_, 200)));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  char peek() { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string parse_string() {
    skip_space();
    char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string value = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return value;
  }
  HeaderValue parse_value() {
    skip_space();
    HeaderValue value;
    char c = peek();
    if (c == '\'' || c == '"') {
      value.kind = HeaderValue::Kind::kString;
      value.text = parse_string();
    } else if (text_.compare(pos_, 4, "True") == 0 || text_.compare(pos_, 5, "False") == 0) {
      value.kind = HeaderValue::Kind::kBool;
      value.flag = text_[pos_] == 'T';
      pos_ += value.flag ? 4 : 5;
    } else if (c == '(') {
      value.kind = HeaderValue::Kind::kTuple;
      ++pos_;
      while (true) {
        skip_space();
        if (peek() == ')') break;
        value.ints.push_back(parse_extent());
        skip_space();
        if (peek() == ',')
          ++pos_;
        else if (peek() != ')')
          fail("expected ',' or ')' in the shape");
      }
      ++pos_;
    } else {
      fail("expected a string, True, False or a tuple");
    }
    return value;
  }

  int64_t parse_extent() {
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a non-negative integer in the shape");
    int64_t value = 0;
    for (; std::isdigit(static_cast<unsigned char>(peek())); ++pos_) {
      const int digit = peek() - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) fail("shape extent does not fit in 64 bits");
      value = value * 10 + digit;
    }
    return value;
  }

  const std::string& text_;
  const std::string& path_;
  size_t pos_ = 0;
};

struct Descr {
  DType dtype;
  size_t stored_size;  // bytes per element in the file
  bool is_int64 = false;
  bool is_float64 = false;
};

std::optional<Descr> parse_descr(const std::string& descr) {
  if (descr == "<f4") return Descr{DType::kF32, 4};
  if (descr == "<f2") return Descr{DType::kF16, 2};
  if (descr == "<i4") return Descr{DType::kI32, 4};
  if (descr == "<f8") return Descr{DType::kF32, 8, false, true};
  if (descr == "<i8") return Descr{DType::kI32, 8, true, false};
  return std::nullopt;
}

const char* npy_descr(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "<f4";
    case DType::kF16:
      return "<f2";
    case DType::kI32:
      return "<i4";
    case DType::kBF16:
      return "<f4";
  }
  return "<f4";
}

}  // namespace

DType npy_storage_dtype(DType dtype) { return dtype == DType::kBF16 ? DType::kF32 : dtype; }

HostTensor read_npy(const std::string& path) {
  const InputFile file(path, ".npy file");
  const std::string prefix = file.read(0, std::min<uint64_t>(file.size(), 12));
  if (prefix.size() < kMagicSize + 4 || prefix.compare(0, kMagicSize, kMagic, kMagicSize) != 0) {
    throw npy_error(path, "not a .npy file (it does not start with \\x93NUMPY)");
  }
  const int major = static_cast<unsigned char>(prefix[6]);
  uint64_t header_length = 0, header_start = 0;
  if (major == 1) {
    header_length = static_cast<unsigned char>(prefix[8]) | (uint64_t{static_cast<unsigned char>(prefix[9])} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (prefix.size() < 12) throw npy_error(path, "truncated header");
    for (int i = 0; i < 4; ++i) header_length |= uint64_t{static_cast<unsigned char>(prefix[8 + i])} << (8 * i);
    header_start = 12;
  } else {
    throw npy_error(path, fmt::format("unsupported .npy format version {} (1, 2 and 3 are read)", major));
  }
  if (header_length > kHeaderLimit) {
    throw npy_error(path, fmt::format("header length {} is over the {} MiB limit", header_length, kHeaderLimit >> 20));
  }
  if (header_start + header_length > file.size()) throw npy_error(path, "truncated header");
  std::string header = file.read(header_start, header_length);
  header.erase(header.find_last_not_of(" \n\r\t") + 1);  // NumPy's padding
  auto dict = HeaderParser(header, path).parse_dict();

  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (!dict.count(key)) throw npy_error(path, fmt::format("header has no '{}'", key));
  }
  const HeaderValue& descr_value = dict["descr"];
  if (descr_value.kind != HeaderValue::Kind::kString) {
    throw npy_error(path, "header 'descr' is not a string (structured arrays are not supported)");
  }
  auto descr = parse_descr(descr_value.text);
  if (!descr) {
    throw npy_error(path, fmt::format("unsupported dtype '{}' (supported: <f4, <f2, <f8, <i4, <i8; "
                                      "little-endian)",
                                      descr_value.text));
  }
  if (dict["fortran_order"].kind != HeaderValue::Kind::kBool) {
    throw npy_error(path, "header 'fortran_order' is not True or False");
  }
  if (dict["fortran_order"].flag) {
    throw npy_error(path, "Fortran-order arrays are not supported (save with np.ascontiguousarray)");
  }
  if (dict["shape"].kind != HeaderValue::Kind::kTuple) {
    throw npy_error(path, "header 'shape' is not a tuple");
  }

  HostTensor tensor;
  tensor.dtype = descr->dtype;
  tensor.shape = dict["shape"].ints;
  // The data's size from the header, checked against the file's before anything is allocated.
  uint64_t expected = descr->stored_size;
  for (int64_t extent : tensor.shape) {
    if (extent != 0 && expected > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(extent)) {
      throw npy_error(path, fmt::format("shape ({}) of '{}' needs more than 2^64 bytes", fmt::join(tensor.shape, ", "),
                                        descr_value.text));
    }
    expected *= static_cast<uint64_t>(extent);
  }
  const uint64_t data_start = header_start + header_length;
  if (file.size() - data_start != expected) {
    throw npy_error(path, fmt::format("data is {} bytes, but shape ({}) of '{}' needs {}", file.size() - data_start,
                                      fmt::join(tensor.shape, ", "), descr_value.text, expected));
  }
  const std::string bytes = file.read(data_start, expected);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t numel = expected / descr->stored_size;
  tensor.data.resize(numel);
  for (size_t i = 0; i < numel; ++i) {
    if (descr->is_float64) {
      double value;
      std::memcpy(&value, data + i * 8, 8);
      tensor.data[i] = static_cast<float>(value);
    } else if (descr->is_int64) {
      int64_t value;
      std::memcpy(&value, data + i * 8, 8);
      if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
        throw npy_error(path, fmt::format("element {} = {} does not fit in i32", i, value));
      }
      tensor.data[i] = static_cast<double>(value);
    } else {
      tensor.data[i] = read_element(data, descr->dtype, i);
    }
  }
  return tensor;
}

void write_npy(const std::string& path, const HostTensor& tensor) {
  if (static_cast<int64_t>(tensor.data.size()) != tensor.numel()) {
    throw Error(
        fmt::format("writing {}: {} values for shape [{}]", path, tensor.data.size(), fmt::join(tensor.shape, ", ")));
  }
  const DType stored = npy_storage_dtype(tensor.dtype);
  std::string shape;
  for (int64_t extent : tensor.shape) shape += fmt::format("{}, ", extent);
  // Python tuple syntax: (), (3,), (2, 3).
  if (tensor.shape.size() == 1) shape.pop_back();
  if (tensor.shape.size() > 1) shape.resize(shape.size() - 2);
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", npy_descr(stored), shape);
  // Magic, version and length, then the header padded with spaces to a multiple of 64 bytes
  // and ended by a newline, as NumPy does. Version 2 only when the header needs 4 length bytes.
  const bool v2 = header.size() + 11 > 65535;
  const size_t prefix = kMagicSize + 2 + (v2 ? 4 : 2);
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');

  std::string bytes(kMagic, kMagicSize);
  bytes.push_back(static_cast<char>(v2 ? 2 : 1));
  bytes.push_back('\0');
  const size_t length = header.size();
  for (int i = 0; i < (v2 ? 4 : 2); ++i) bytes.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  bytes += header;
  std::vector<uint8_t> data;
  data.reserve(tensor.data.size() * dtype_size(stored));
  for (double value : tensor.data) append_element(data, stored, value);
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
  write_file_atomically(path, bytes);
}

}  // namespace teeny
