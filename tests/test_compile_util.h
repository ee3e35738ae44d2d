// Helpers shared by the compile and bundle tests: a test-only op
// whose lowering can be made wrong in one chosen way.
#pragma once

#include <string>

#include "core/compile.h"
#include "core/graph.h"
#include "core/registry.h"
#include "tests/file_test_util.h"

namespace teeny::testing {

// The one way a test op's lowering is wrong.
enum class Fault {
  kNone,
  kSwappedNames,       // launch passes z before x
  kWrongType,          // launch passes `count` as i32, the kernel takes long long
  kMissingArg,         // launch omits `alpha`
  kExtraArg,           // launch adds `int extra`
  kBlockOverMaxntid,   // block 256, kernel has __launch_bounds__(128)
  kWrongInitBytes,     // 12 init bytes for a [4] f32 param
  kSymbolicHostParam,  // host init bytes for a [B] param
  kEntryRenamed,       // a macro in the header renames the generated entry: no such PTX entry
  kParamTypeChanged,   // a macro in the header makes `float alpha` a double: PTX param size 8
  kTemplateMismatch,   // kernel and launch take `int extra`, which the template does not
  kSyntaxError,        // NVRTC rejects the header
  kWrongDtype,         // launch declares x as f16, the tensor is f32
  kUnknownSlot,        // launch names a param slot the op does not have
  // t.tensor_map's faults:
  kMapOfUnknown,        // the map is `of` "xx", no argument of the launch
  kMapOfScalar,         // the map is `of` the i32 "n"
  kMapUnalignedStride,  // the map's row stride is 5 f32 (20 bytes, not a multiple of 16)
  kMapUnderaligned,     // the kernel's tn_tensor_map lacks __align__(64)
  // t.scratch's faults:
  kScratchUnknown,      // the launches pass scratch buffer "partial"; the lowering has "partials"
  kScratchWrongDtype,   // the buffer is bf16, the launches pass it as f32
  kScratchTwice,        // "partials" is declared twice
  kScratchBadName,      // the buffer is named "2partials"
  kScratchDeviceSized,  // the buffer has SMS*4 elements
  kScratchEmpty,        // the buffer has 0 elements
};

// Registers the test kernel headers, t.good (no fault), t.<fault> for every fault, t.variant (attr k
// changes the template argument, not the kernel name), t.view (no kernel), t.padded (rows padded to 8), and
// t.tensor_map: kernel t_map_kernel(const float* x, const __grid_constant__ tn_tensor_map x_map,
// float* y, int n), x_map a view of x: cols 4, rows B, row stride 4, box [4, 8], swizzle 32
// (t.map_* for its faults), and t.scratch: two launches of t_scratch_kernel(const float* x, float*
// partials, float* y, int n, int phase) sharing the scratch buffer "partials" (f32, 2n elements):
// phase 0 writes partials[2i] = x[i] and partials[2i+1] = 1, phase 1 writes y[i] = 2 partials[2i]
// + partials[2i+1] (t.scratch_* for its faults).
Registry test_registry();

// A graph with inputs x, z: f32 [B, 4], dim B in [1, 1024] default 8, and `nodes` (YAML list
// items, e.g. "- {name: t1, op: t.good, inputs: [x, z]}"), outputs = the last node.
Graph test_graph(const Registry& registry, const std::string& nodes, const std::string& output);

// Options for tests: cache in `cache_dir`.
CompileOptions test_options(const std::string& cache_dir);

}  // namespace teeny::testing
