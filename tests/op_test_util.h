// Helpers shared by the per-op CPU tests: the real registry, and an OpContext with its
// output inferred by the op's own shape rule.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/op.h"
#include "core/registry.h"
#include "ops/ops.h"

namespace teeny::op_testing {

inline const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    ops::register_all(reg);
    return reg;
  }();
  return r;
}

inline const OpDef& op(const std::string& name) {
  const OpDef* def = registry().find(name);
  if (!def) throw std::runtime_error("op not registered: " + name);
  return *def;
}

inline TensorType tensor(DType dtype, std::vector<Expr> shape) { return contiguous(dtype, std::move(shape)); }

inline OpContext context(const std::string& name, nlohmann::json attrs, std::vector<TensorType> inputs) {
  OpContext ctx;
  ctx.node = "n";
  ctx.attrs = Attrs(std::move(attrs));
  ctx.inputs = std::move(inputs);
  ctx.output = op(name).infer(ctx);
  return ctx;
}

}  // namespace teeny::op_testing
