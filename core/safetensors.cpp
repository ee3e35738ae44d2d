#include "core/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/input_file.h"

namespace teeny {

namespace {

Error file_error(const std::string& path, const std::string& message) {
  return Error(fmt::format("{}: {}", path, message));
}

struct StoredDType {
  DType dtype;
  size_t size;
  bool is_int64 = false;
};

std::optional<StoredDType> stored_dtype(const std::string& name) {
  if (name == "F32") return StoredDType{DType::kF32, 4};
  if (name == "F16") return StoredDType{DType::kF16, 2};
  if (name == "BF16") return StoredDType{DType::kBF16, 2};
  if (name == "I32") return StoredDType{DType::kI32, 4};
  if (name == "I64") return StoredDType{DType::kI32, 8, true};
  return std::nullopt;
}

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
  }
  return "F32";
}

std::string describe(const ParamShape& param) {
  return fmt::format("{} {} {}", param.name, shape_text(param.shape), dtype_name(param.dtype));
}

// At most ten of `items`, then how many more: a file of a million stray tensors makes one line.
std::string some_of(const std::vector<std::string>& items, const char* separator) {
  constexpr size_t kShown = 10;
  const std::vector<std::string> shown(items.begin(), items.begin() + std::min(items.size(), kShown));
  std::string text = fmt::format("{}", fmt::join(shown, separator));
  if (items.size() > kShown) text += fmt::format("{}and {} more", separator, items.size() - kShown);
  return text;
}

std::map<std::string, std::string> metadata_strings(const nlohmann::json& metadata) {
  std::map<std::string, std::string> strings;
  if (!metadata.is_object()) return strings;
  for (const auto& [key, value] : metadata.items())
    strings[key] = value.is_string() ? value.get<std::string>() : value.dump();
  return strings;
}

}  // namespace

std::vector<SafetensorsEntry> read_safetensors(const std::string& path) { return read_safetensors_file(path).entries; }

SafetensorsFile read_safetensors_file(const std::string& path) {
  const InputFile file(path, "safetensors file");
  if (file.size() < 8) {
    throw file_error(path, fmt::format("not a safetensors file ({} bytes; the header length alone "
                                       "is 8)",
                                       file.size()));
  }
  const std::string length_bytes = file.read(0, 8);
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) {
    header_length |= static_cast<uint64_t>(static_cast<unsigned char>(length_bytes[i])) << (8 * i);
  }
  if (header_length > file.size() - 8) {
    throw file_error(
        path, fmt::format("header length {} exceeds the file's {} remaining bytes", header_length, file.size() - 8));
  }
  if (header_length > kTextFileLimit) {
    throw file_error(path,
                     fmt::format("header length {} is over the {} MiB limit", header_length, kTextFileLimit >> 20));
  }
  const nlohmann::json header = parse_json_text(file.read(8, header_length), path + ": header");
  if (!header.is_object()) throw file_error(path, "header is not a JSON object");

  const uint64_t data_start = 8 + header_length;
  const uint64_t data_size = file.size() - data_start;
  SafetensorsFile contents;
  std::vector<SafetensorsEntry>& entries = contents.entries;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const nlohmann::json& info = item.value();
    if (name == "__metadata__") {
      contents.metadata = metadata_strings(info);
      continue;
    }
    auto bad = [&](const std::string& what) {
      return file_error(path, fmt::format("tensor '{}': {}", excerpt(name), what));
    };
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets")) {
      throw bad("needs \"dtype\", \"shape\" and \"data_offsets\"");
    }
    if (!info["dtype"].is_string()) throw bad("\"dtype\" is not a string");
    SafetensorsEntry entry;
    entry.name = name;
    entry.dtype = info["dtype"].get<std::string>();
    auto stored = stored_dtype(entry.dtype);
    if (!stored) {
      throw bad(fmt::format("unsupported dtype {} (supported: F32, F16, BF16, I32, I64)", excerpt(entry.dtype)));
    }
    if (!info["shape"].is_array()) throw bad("\"shape\" is not a list");
    uint64_t numel = 1;
    for (const auto& extent : info["shape"]) {
      if (!extent.is_number_unsigned()) throw bad("\"shape\" has an entry that is not a size");
      const uint64_t value = extent.get<uint64_t>();
      if (value > uint64_t{std::numeric_limits<int64_t>::max()} ||
          (value != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / value)) {
        throw bad("shape is too large");
      }
      numel *= value;
      entry.shape.push_back(static_cast<int64_t>(value));
    }
    const auto& offsets = info["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      throw bad("\"data_offsets\" is not [begin, end]");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      throw bad(fmt::format("data_offsets [{}, {}] are outside the {}-byte data section", begin, end, data_size));
    }
    if (end - begin != numel * stored->size) {
      throw bad(fmt::format("data_offsets [{}, {}] hold {} bytes, but {} {} needs {}", begin, end, end - begin,
                            entry.dtype, shape_text(entry.shape), numel * stored->size));
    }
    const std::string bytes = file.read(data_start + begin, end - begin);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    entry.tensor.dtype = stored->dtype;
    entry.tensor.shape = entry.shape;
    entry.tensor.data.resize(numel);
    for (uint64_t i = 0; i < numel; ++i) {
      if (stored->is_int64) {
        int64_t value;
        std::memcpy(&value, data + i * 8, 8);
        if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
          throw bad(fmt::format("element {} = {} does not fit in i32", i, value));
        }
        entry.tensor.data[i] = static_cast<double>(value);
      } else {
        entry.tensor.data[i] = read_element(data, stored->dtype, i);
      }
    }
    entries.push_back(std::move(entry));
  }
  return contents;
}

void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<uint8_t> data;
  for (const auto& [name, tensor] : tensors) {
    if (static_cast<int64_t>(tensor.data.size()) != tensor.numel()) {
      throw Error(fmt::format("writing {}: tensor '{}' has {} values for shape {}", path, name, tensor.data.size(),
                              shape_text(tensor.shape)));
    }
    const size_t begin = data.size();
    for (double value : tensor.data) append_element(data, tensor.dtype, value);
    header[name] = {
        {"dtype", safetensors_dtype(tensor.dtype)}, {"shape", tensor.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format pads the header with spaces
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((text.size() >> (8 * i)) & 0xff));
  bytes += text;
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
  write_file_atomically(path, bytes);
}

LoadedWeights load_weights(const std::string& path, const std::vector<ParamShape>& params) {
  std::vector<SafetensorsEntry> entries = read_safetensors(path);
  std::map<std::string, const ParamShape*> trained, computed;
  std::vector<std::string> trained_names;
  std::set<std::string> unused;
  for (const ParamShape& param : params) {
    unused.insert(param.unused_state.begin(), param.unused_state.end());
    if (param.init == ParamInit::kTrained) {
      trained[param.name] = &param;
      trained_names.push_back(param.name);
    } else {
      computed[param.name] = &param;
    }
  }
  auto expected_note = [&] {
    std::vector<std::string> lines;
    for (const ParamShape& param : params) {
      if (param.init == ParamInit::kTrained) lines.push_back(describe(param));
    }
    return lines.empty() ? std::string("the bundle has no trained parameters")
                         : fmt::format("the bundle's trained parameters: {}", fmt::join(lines, ", "));
  };

  LoadedWeights loaded;
  std::vector<std::string> extra, mismatched;
  std::set<std::string> seen;
  size_t converted = 0;
  for (SafetensorsEntry& entry : entries) {
    auto it = trained.find(entry.name);
    if (it == trained.end()) {
      if (unused.count(entry.name)) continue;
      if (computed.count(entry.name)) {
        extra.push_back(fmt::format("'{}' (computed by teeny, not trained)", entry.name));
      } else {
        extra.push_back(fmt::format("'{}'{}", excerpt(entry.name), did_you_mean(entry.name, trained_names)));
      }
      continue;
    }
    const ParamShape& param = *it->second;
    seen.insert(param.name);
    if (entry.shape != param.shape) {
      mismatched.push_back(fmt::format("'{}' is {} {}, expected {}", entry.name, entry.dtype,
                                       excerpt(shape_text(entry.shape)), describe(param)));
      continue;
    }
    const bool file_is_float = is_float(entry.tensor.dtype);
    if (file_is_float != is_float(param.dtype)) {
      mismatched.push_back(fmt::format("'{}' is {} {}, expected {}", entry.name, entry.dtype,
                                       excerpt(shape_text(entry.shape)), describe(param)));
      continue;
    }
    if (entry.tensor.dtype != param.dtype) {
      ++converted;
      for (double& value : entry.tensor.data) value = round_to_dtype(value, param.dtype);
      entry.tensor.dtype = param.dtype;
    }
    loaded.tensors[param.name] = std::move(entry.tensor);
  }
  std::vector<std::string> missing;
  for (const ParamShape& param : params) {
    if (param.init == ParamInit::kTrained && !seen.count(param.name)) missing.push_back(describe(param));
  }
  if (!missing.empty() || !extra.empty() || !mismatched.empty()) {
    std::vector<std::string> problems;
    if (!missing.empty()) problems.push_back(fmt::format("missing {}", fmt::join(missing, ", ")));
    if (!mismatched.empty()) problems.push_back(fmt::format("mismatched {}", some_of(mismatched, "; ")));
    if (!extra.empty()) problems.push_back(fmt::format("not in the bundle {}", some_of(extra, ", ")));
    throw Error(fmt::format("weights {} do not match the bundle: {}", path, fmt::join(problems, "; ")))
        .note(expected_note());
  }
  if (converted > 0) {
    loaded.notes.push_back(fmt::format("converted {} tensor(s) from {} to the parameters' dtypes", converted, path));
  }
  return loaded;
}

}  // namespace teeny
