// Fuzz target: the bundle manifest loader (core/bundle.h) and what run and inspect do with a
// loaded bundle before the GPU (core/binding.h, core/inspect.h).
// Input: a manifest.json. read_bundle on a directory holding it (it has no kernels or params.bin,
// so a manifest that loads then fails on a missing file); and, since no input can match the
// checksums, bundle_from_json (read_bundle's validation of a manifest) directly, then binding the
// dims at their defaults, the launches for an H200, and inspecting it.
// teeny::Error is the expected outcome for a bad manifest; any other exception, a crash, leak or
// sanitizer report is a finding.
//   build-clang/fuzz/fuzz_bundle fuzz/corpus/bundle
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/binding.h"
#include "core/bundle.h"
#include "core/error.h"
#include "core/inspect.h"
#include "fuzz/fuzz_util.h"

namespace {

const teeny::DeviceFacts kH200{132, 227 * 1024, 50 << 20};

void read_as_bundle(const uint8_t* data, size_t size) {
  static const teeny::fuzz::ScratchDir dir("teeny-fuzz-bundle");
  std::ofstream(dir.file("manifest.json"), std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    teeny::read_bundle(dir.path());
  } catch (const teeny::Error&) {
  }
}

void load_and_bind(const uint8_t* data, size_t size) {
  nlohmann::json manifest = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded()) return;
  try {
    teeny::Bundle bundle = teeny::bundle_from_json(manifest);
    teeny::Bindings dims = teeny::bundle_bindings(bundle, {});
    teeny::BoundBundle bound = teeny::bind_bundle(bundle, dims, "fuzz");
    teeny::bind_launches(bound, kH200);
    teeny::inspect_bundle(bundle, dims, {"H200", teeny::device_bindings(kH200)});
  } catch (const teeny::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  read_as_bundle(data, size);
  load_and_bind(data, size);
  return 0;
}
