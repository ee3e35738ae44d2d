// safetensors files: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data. Read dtypes: F32, F16, BF16, I32, and I64 (as i32, range-checked).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/bundle.h"
#include "core/op.h"

namespace teeny {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as in the file: "F32", "BF16", ...
  std::vector<int64_t> shape;
  HostTensor tensor;  // values in their stored precision; dtype i32 for I32/I64
};

// Every tensor in the file, sorted by name. Throws Error naming the file and the problem.
std::vector<SafetensorsEntry> read_safetensors(const std::string& path);

// A file's tensors (as read_safetensors) and its "__metadata__". The format makes metadata a map of
// strings; another value is kept as its JSON text, and a "__metadata__" that is not an object
// reads as none, so a file read_safetensors accepts is never refused for its metadata.
struct SafetensorsFile {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};
SafetensorsFile read_safetensors_file(const std::string& path);

// Writes tensors (F32/F16/BF16/I32 by their dtype), atomically; "__metadata__" only when
// `metadata` has entries.
void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A param as the run will hold it: the bundle's declaration with its shape bound.
struct ParamShape {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  ParamInit init = ParamInit::kTrained;
  std::vector<std::string> unused_state{};  // names a weights file may hold beside it (skipped)
};

struct LoadedWeights {
  std::map<std::string, HostTensor> tensors;  // by param name, values rounded to its dtype
  std::vector<std::string> notes;             // e.g. dtype conversions made
};

// Matches a weights file to the bundle's trained params by name. Every trained param must be
// present with its exact shape; float tensors convert to the param's float dtype (rounded to
// nearest even); integer tensors only load into i32 params. Missing, extra (except the params'
// unused_state) and mismatched tensors are errors listing what was expected.
LoadedWeights load_weights(const std::string& path, const std::vector<ParamShape>& params);

}  // namespace teeny
