// Fuzz target: the .npy reader (core/npy.h), as `teeny run --input NAME=FILE.npy` uses it.
// Input: the bytes of a .npy file. A tensor read_npy accepts is written back with write_npy and
// must read back equal (NaN as NaN).
// teeny::Error is the expected outcome for a bad file; any other exception, a broken round trip,
// a crash, leak or sanitizer report is a finding.
//   build-clang/fuzz/fuzz_npy fuzz/corpus/npy
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/npy.h"
#include "fuzz/fuzz_util.h"

namespace {

bool same_values(const teeny::HostTensor& a, const teeny::HostTensor& b) {
  if (a.shape != b.shape || a.data.size() != b.data.size()) return false;
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (!(a.data[i] == b.data[i] || (std::isnan(a.data[i]) && std::isnan(b.data[i])))) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static teeny::fuzz::InputFile file;
  static const teeny::fuzz::ScratchDir scratch("teeny-fuzz-npy");  // write_npy needs a real directory
  static const std::string written = scratch.file("written.npy");
  teeny::HostTensor tensor;
  try {
    tensor = teeny::read_npy(file.write(data, size));
  } catch (const teeny::Error&) {
    return 0;
  }
  try {
    teeny::write_npy(written, tensor);
    teeny::HostTensor again = teeny::read_npy(written);
    if (!same_values(tensor, again)) teeny::fuzz::property_failed("a tensor read from .npy does not read back equal");
  } catch (const teeny::Error& e) {
    teeny::fuzz::property_failed("a tensor read from .npy cannot be written and read back: " + e.message());
  }
  return 0;
}
