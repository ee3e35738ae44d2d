// `teeny run --check`: every node's GPU output against the host reference computed from the
// GPU's *own* inputs to that node, so an error is pinned to the node that made it instead of
// spreading to everything after it.
//
// Tolerances (an element passes when |gpu - ref| <= atol + rtol * |ref|, NaN only matching
// NaN), sized for f32 accumulation on the GPU against double on the host, plus one rounding
// of the output to its dtype on each side:
//   f32:  atol 1e-4, rtol 1e-3
//   f16:  atol 1e-3, rtol 5e-3   (a few ulps; f16 ulp is 2^-10 relative)
//   bf16: atol 1e-2, rtol 1.6e-2 (2 ulps; bf16 ulp is 2^-7 relative)
//   i32:  exact
// The reported relative error divides by max(|ref|, atol) (1 for i32), so elements near zero
// do not dominate it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/executor.h"
#include "core/registry.h"

namespace teeny {

struct Tolerance {
  double atol = 0, rtol = 0;
};
Tolerance tolerance_for(DType dtype);

struct Comparison {
  int64_t count = 0, mismatches = 0;
  double max_abs = 0, max_rel = 0;
  int64_t worst_index = -1;  // the element with the largest excess over the tolerance
  double worst_got = 0, worst_expected = 0;
  bool ok() const { return mismatches == 0; }
};
// Shapes must agree (throws Error otherwise).
Comparison compare_values(const HostTensor& got, const HostTensor& expected, Tolerance tolerance);

struct NodeCheck {
  std::string node, op;
  std::string param;  // an update node's check: the param it wrote (one check per param)
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  Comparison result;
};

struct CheckReport {
  std::vector<NodeCheck> nodes;  // in execution order
  int first_failure = -1;        // index into nodes
  // The graph outputs of the full run (e.g. a CUDA-graph replay) against the node-by-node
  // run: they must agree, or the full run differs from what was checked.
  std::vector<NodeCheck> outputs;
  bool ok() const;
};

// Runs the bound bundle node by node on `executor` from its current inputs and params,
// synchronising after each node, and compares each output with its reference; an update node's
// (a training step's) every param it writes with the reference update of the params as they were
// before it. `full_run_outputs` are the graph outputs read after a normal run (may be empty).
CheckReport check_against_reference(GpuExecutor& executor, const Registry& registry,
                                    const std::map<std::string, HostTensor>& full_run_outputs);

}  // namespace teeny
