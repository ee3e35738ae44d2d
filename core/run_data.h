// The host data of a run: inputs (random or .npy), params (weights, the bundle's init bytes, zero
// or random), and packing tensors to and from their device layout.
//
// Conventions (documented for users in docs/cli.md, "teeny run"):
//   * random inputs (--seed N): floats uniform in [-1, 1); i32 inputs uniform integers in
//     [0, n) with n the tensor's id bound (the smallest that its consumers declare, e.g. an
//     embedding's num_embeddings; see InputSpec::id_bound_attr and id_bound_input), or 8 without
//     one. Each tensor has its own stream, seeded from N and the tensor's name (SplitMix64), so
//     values do not depend on the order of tensors.
//   * trained params not loaded from --weights are zero (--init zero, the default) or random
//     (--init random): uniform in the param's declared range (ParamHints::random_range), else
//     in ±1/sqrt(fan_in) with fan_in = numel / shape[0] (PyTorch's default for linear and conv
//     weights).
//   * kZero params are zero; kHost params get the bundle's init bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/binding.h"

namespace teeny {

// Contiguous host values <-> the device layout of `tensor` (rows padded to row_stride with
// zeros, elements in the tensor's dtype).
std::vector<uint8_t> pack_tensor(const BoundTensor& tensor, const HostTensor& values);
HostTensor unpack_tensor(const BoundTensor& tensor, const uint8_t* device_bytes);

enum class ParamFill { kZero, kRandom };

struct DataOptions {
  uint64_t seed = 0;
  std::map<std::string, std::string> input_files;  // graph input -> .npy path
  std::string weights_path;                        // safetensors; empty: none
  ParamFill fill = ParamFill::kZero;               // trained params not in the weights
};

struct RunData {
  std::map<std::string, HostTensor> inputs;  // every graph input
  std::map<std::string, HostTensor> params;  // every param
  std::vector<std::string> notes;            // for stderr: "4 trained parameters are zero: ..."
};

// Inputs (random or from .npy, shape- and dtype-checked) and params (weights, bundle init
// bytes, zero or random). Throws Error for unknown input names, bad files, mismatches.
RunData prepare_data(const BoundBundle& bound, const DataOptions& options);
// One random input or param as documented above (exposed for tests).
HostTensor random_input(const BoundTensor& tensor, uint64_t seed);
HostTensor random_param(const BoundParam& param, uint64_t seed);

}  // namespace teeny
