// Helpers for writing OpDef::conformance_cases: small graph specs and the standard sweeps of
// awkward shapes (tests/test_gpu_conformance.cpp runs them on the GPU).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/op.h"

namespace teeny::ops {

struct CaseInput {
  std::string name;
  DType dtype = DType::kF32;
  std::string shape;  // YAML list, e.g. "[B, W]"
};

struct CaseNode {
  CaseNode(std::string name, std::string op, std::vector<std::string> inputs,
           nlohmann::json attrs = nlohmann::json::object(), std::string dtype = "")
      : name(std::move(name)),
        op(std::move(op)),
        inputs(std::move(inputs)),
        attrs(std::move(attrs)),
        dtype(std::move(dtype)) {}
  std::string name, op;
  std::vector<std::string> inputs;
  nlohmann::json attrs;
  std::string dtype;  // the node's optional `dtype:`; empty: none
};

// A graph spec declaring `dims` (each in [1, 1048576], default 4), `inputs`, `nodes`, with the
// last node as the output.
std::string case_graph(const std::vector<std::string>& dims, const std::vector<CaseInput>& inputs,
                       const std::vector<CaseNode>& nodes);

// (B, W) bindings over widths 1, 3, 17, 1000, 4097 with batch 1 and large batches.
std::vector<Bindings> awkward_rows();

// A row-wise op (no attrs) in one dtype: "rows [B, W]" over awkward_rows(), then "rows [B, w]"
// for each constant width w (a constant width picks the op's kernel plan) at B = 1 and 129.
std::vector<ConformanceCase> row_cases(const std::string& op, DType dtype, const std::vector<int>& widths);

}  // namespace teeny::ops
