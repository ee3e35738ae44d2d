// Fuzz target: the safetensors reader (core/safetensors.h), as `teeny run --weights` uses it.
// Input: the bytes of a .safetensors file. read_safetensors, then load_weights with params that
// match what was read exactly (names, shapes, dtypes), which must load.
// teeny::Error is the expected outcome for a bad file; any other exception, a file that reads but
// does not load, a crash, leak or sanitizer report is a finding.
//   build-clang/fuzz/fuzz_safetensors fuzz/corpus/safetensors
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static teeny::fuzz::InputFile file;
  const std::string& path = file.write(data, size);
  std::vector<teeny::ParamShape> params;
  try {
    for (const teeny::SafetensorsEntry& entry : teeny::read_safetensors(path))
      params.push_back({entry.name, entry.tensor.dtype, entry.shape});
  } catch (const teeny::Error&) {
    return 0;
  }
  try {
    teeny::load_weights(path, params);
  } catch (const teeny::Error& e) {
    teeny::fuzz::property_failed("a file read_safetensors reads does not load as its own params: " + e.message());
  }
  return 0;
}
