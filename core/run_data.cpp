#include "core/run_data.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/npy.h"

namespace teeny {

namespace {

// Random ids of an i32 input that no consumer bounds.
constexpr int64_t kDefaultIdBound = 8;

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t extent : shape) numel *= extent;
  return numel;
}

// SplitMix64: a tiny generator with a fully specified output, so random data is the same on
// every platform and standard library (std:: distributions are not).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t stream_seed(uint64_t seed, const std::string& name) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a of the tensor's name
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ull;
  uint64_t state = seed ^ hash;
  return splitmix64(state);
}

double uniform01(uint64_t& state) { return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53; }

HostTensor zeros(DType dtype, const std::vector<int64_t>& shape) {
  return HostTensor{dtype, shape, std::vector<double>(numel_of(shape), 0.0)};
}

HostTensor load_input(const BoundBundle& bound, const BoundTensor& tensor, const std::string& path) {
  HostTensor values = read_npy(path);
  const std::string flag = fmt::format("--input {}={}", tensor.name, path);
  if (values.shape != tensor.shape) {
    throw Error(fmt::format("{}: the file's shape {} does not match input '{}' {} (with {})", flag,
                            shape_text(values.shape), tensor.name, shape_text(tensor.shape),
                            bindings_text(bound.bindings)));
  }
  if (is_float(values.dtype) != is_float(tensor.dtype)) {
    throw Error(fmt::format("{}: the file holds {} values, but input '{}' is {}", flag, dtype_name(values.dtype),
                            tensor.name, dtype_name(tensor.dtype)));
  }
  for (double& value : values.data) value = round_to_dtype(value, tensor.dtype);
  values.dtype = tensor.dtype;
  return values;
}

void check_input_files_exist(const BoundBundle& bound, const std::map<std::string, std::string>& files) {
  const std::vector<std::string>& inputs = bound.bundle->inputs;
  for (const auto& [name, path] : files) {
    if (std::find(inputs.begin(), inputs.end(), name) != inputs.end()) continue;
    std::vector<std::string> described;
    for (const std::string& input : inputs) {
      const BoundTensor& t = bound.tensor(input);
      described.push_back(fmt::format("{} {} {}", input, shape_text(t.shape), dtype_name(t.dtype)));
    }
    throw Error(
        fmt::format("--input {}={}: the bundle has no input '{}'{}", name, path, name, did_you_mean(name, inputs)))
        .note(fmt::format("the bundle's inputs: {}", fmt::join(described, ", ")));
  }
}

HostTensor host_init_values(const BoundParam& param, const Bundle& bundle) {
  HostTensor values = zeros(param.dtype, param.shape);
  for (size_t i = 0; i < values.data.size(); ++i) {
    values.data[i] = read_element(bundle.param_bytes.data() + param.host_offset, param.dtype, i);
  }
  return values;
}

std::string filled_note(const std::vector<std::string>& filled, const DataOptions& options) {
  return fmt::format("{} trained parameter(s) not loaded from weights are {}: {}", filled.size(),
                     options.fill == ParamFill::kRandom
                         ? fmt::format("random (--init random, seed {})", options.seed)
                         : std::string("zero (use --weights FILE.safetensors, or --init random)"),
                     fmt::join(filled, ", "));
}

}  // namespace

std::vector<uint8_t> pack_tensor(const BoundTensor& tensor, const HostTensor& values) {
  if (static_cast<int64_t>(values.data.size()) != tensor.numel()) {
    throw Error(fmt::format("tensor '{}' needs {} values, got {}", tensor.name, tensor.numel(), values.data.size()));
  }
  const int64_t last = tensor.shape.empty() ? 1 : tensor.shape.back();
  const size_t element = dtype_size(tensor.dtype);
  std::vector<uint8_t> bytes;
  bytes.reserve(tensor.bytes);
  for (int64_t row = 0; row < tensor.rows; ++row) {
    for (int64_t col = 0; col < last; ++col) append_element(bytes, tensor.dtype, values.data[row * last + col]);
    bytes.resize(bytes.size() + (tensor.row_stride - last) * element, 0);  // padding
  }
  return bytes;
}

HostTensor unpack_tensor(const BoundTensor& tensor, const uint8_t* device_bytes) {
  HostTensor values = zeros(tensor.dtype, tensor.shape);
  const int64_t last = tensor.shape.empty() ? 1 : tensor.shape.back();
  for (int64_t row = 0; row < tensor.rows; ++row) {
    for (int64_t col = 0; col < last; ++col) {
      values.data[row * last + col] = read_element(device_bytes, tensor.dtype, row * tensor.row_stride + col);
    }
  }
  return values;
}

HostTensor random_input(const BoundTensor& tensor, uint64_t seed) {
  HostTensor values = zeros(tensor.dtype, tensor.shape);
  uint64_t state = stream_seed(seed, tensor.name);
  if (is_float(tensor.dtype)) {
    for (double& value : values.data) value = round_to_dtype(uniform01(state) * 2.0 - 1.0, tensor.dtype);
    return values;
  }
  const int64_t bound = tensor.id_bound > 0 ? tensor.id_bound : kDefaultIdBound;
  for (double& value : values.data) value = std::floor(uniform01(state) * static_cast<double>(bound));
  return values;
}

HostTensor random_param(const BoundParam& param, uint64_t seed) {
  HostTensor values = zeros(param.dtype, param.shape);
  uint64_t state = stream_seed(seed, param.name);
  double low = -1.0, high = 1.0;
  if (param.hints.random_range) {
    low = (*param.hints.random_range)[0];
    high = (*param.hints.random_range)[1];
  } else if (!param.shape.empty()) {
    high = 1.0 / std::sqrt(static_cast<double>(values.data.size() / param.shape[0]));
    low = -high;
  }
  for (double& value : values.data) {
    const double raw = low + (high - low) * uniform01(state);
    value = is_float(param.dtype) ? round_to_dtype(raw, param.dtype) : std::floor(raw);
  }
  return values;
}

RunData prepare_data(const BoundBundle& bound, const DataOptions& options) {
  const Bundle& bundle = *bound.bundle;
  RunData data;
  check_input_files_exist(bound, options.input_files);
  for (const std::string& name : bundle.inputs) {
    const BoundTensor& tensor = bound.tensor(name);
    auto file = options.input_files.find(name);
    data.inputs[name] = file != options.input_files.end() ? load_input(bound, tensor, file->second)
                                                          : random_input(tensor, options.seed);
  }

  LoadedWeights weights;
  if (!options.weights_path.empty()) weights = load_weights(options.weights_path, bound.param_shapes());
  data.notes = weights.notes;
  std::vector<std::string> filled;
  for (const BoundParam& param : bound.params) {
    HostTensor values;
    switch (param.init) {
      case ParamInit::kHost:
        values = host_init_values(param, bundle);
        break;
      case ParamInit::kZero:
        values = zeros(param.dtype, param.shape);
        break;
      case ParamInit::kTrained:
        if (auto it = weights.tensors.find(param.name); it != weights.tensors.end()) {
          values = std::move(it->second);
        } else {
          filled.push_back(param.name);
          values =
              options.fill == ParamFill::kRandom ? random_param(param, options.seed) : zeros(param.dtype, param.shape);
        }
        break;
    }
    data.params[param.name] = std::move(values);
  }
  if (!filled.empty()) data.notes.push_back(filled_note(filled, options));
  return data;
}

}  // namespace teeny
