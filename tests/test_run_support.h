// Shared by the run tests: test-only ops and a tiny hand-built bundle that uses them, so the
// executor, planner and reference tests do not depend on any built-in op.
#pragma once

#include <string>

#include "core/bundle.h"
#include "core/registry.h"

namespace teeny::testing_run {

// test.affine: y = x * weight + bias over the last dim (weight trained, bias host-computed
//   in the bundle); its output rows are padded to a multiple of 4 elements.
// test.add: y = a + b (same shapes).
// test.flat: a view flattening everything into one dim.
Registry test_registry();

// dims B in [1, 64] (default 4); input x f32 [B, 3];
//   h   = test.affine(x)   [B, 3], row stride 4, params h.weight [3] (trained),
//                                    h.bias [3] (host bytes 0.5, 1, 1.5)
//   s   = test.add(h, x)   [B, 3]
//   out = test.flat(s)     [B*3]   (a view of s)
// outputs: [out]. Two kernels with placeholder PTX whose entries take the launches' arguments
// (enough for everything but a GPU).
Bundle tiny_bundle();

}  // namespace teeny::testing_run
