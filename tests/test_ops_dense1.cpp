// dense1 ops (elementwise, softmax, norms, reductions, embedding, data movement): host
// references against hand-computed values, shape rules and their errors (exact text).
#include <gtest/gtest.h>

#include <cmath>

#include "core/registry.h"
#include "ops/ops.h"

namespace teeny {
namespace {

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    ops::register_all(reg);
    return reg;
  }();
  return r;
}

const OpDef& op(const std::string& name) {
  const OpDef* def = registry().find(name);
  if (!def) throw std::runtime_error("op not registered: " + name);
  return *def;
}

TensorType tensor(DType dtype, std::vector<Expr> shape) { return contiguous(dtype, std::move(shape)); }

OpContext context(const std::string& name, nlohmann::json attrs, std::vector<TensorType> inputs) {
  OpContext ctx;
  ctx.node = "n";
  ctx.attrs = Attrs(std::move(attrs));
  ctx.inputs = std::move(inputs);
  ctx.output = op(name).infer(ctx);
  return ctx;
}

struct HostIn {
  std::vector<int64_t> shape;
  std::vector<double> data;
  DType dtype = DType::kF32;
};

// Runs the op's host reference on concrete inputs (shapes taken as constants).
HostTensor reference(const std::string& name, nlohmann::json attrs, std::vector<HostIn> inputs,
                     std::vector<std::vector<double>> params = {}) {
  std::vector<TensorType> types;
  for (const HostIn& in : inputs) {
    std::vector<Expr> shape(in.shape.begin(), in.shape.end());
    types.push_back(tensor(in.dtype, shape));
  }
  const OpContext ctx = context(name, std::move(attrs), types);
  std::vector<HostTensor> host;
  for (const HostIn& in : inputs) host.push_back({in.dtype, in.shape, in.data});
  std::vector<HostTensor> host_params;
  if (op(name).params) {
    const std::vector<ParamSpec> specs = op(name).params(ctx);
    EXPECT_EQ(specs.size(), params.size());
    for (size_t i = 0; i < specs.size() && i < params.size(); ++i)
      host_params.push_back({specs[i].dtype, eval_shape(specs[i].shape, {}), params[i]});
  }
  RefContext ref{ctx, host, host_params, eval_shape(ctx.output.shape, {})};
  return op(name).reference(ref);
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-7) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

std::string infer_error(const std::string& name, nlohmann::json attrs, std::vector<TensorType> inputs,
                        std::string* key = nullptr) {
  OpContext ctx;
  ctx.node = "n";
  ctx.attrs = Attrs(std::move(attrs));
  ctx.inputs = std::move(inputs);
  try {
    op(name).infer(ctx);
  } catch (const OpError& e) {
    if (key) *key = e.key;
    return e.message();
  }
  return "(no error)";
}

// ---- elementwise ---------------------------------------------------------------------------

TEST(Dense1Reference, Relu) {
  auto y = reference("relu", {}, {{{5}, {-2.0, -0.0, 0.0, 0.5, 3.0}}});
  expect_near(y.data, {0.0, 0.0, 0.0, 0.5, 3.0});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{5}));
}

// ---- softmax -------------------------------------------------------------------------------

TEST(Dense1Reference, SoftmaxLastAxis) {
  // exp([1,2,3] - 3) = [e^-2, e^-1, 1], sum 1.5032147244080551
  auto y = reference("softmax", {{"axis", -1}}, {{{2, 3}, {1, 2, 3, 0, 0, 0}}});
  expect_near(y.data, {0.09003057317038046, 0.24472847105479764, 0.6652409557748219,
                       1.0 / 3, 1.0 / 3, 1.0 / 3});
}

TEST(Dense1Reference, SoftmaxFirstAxis) {
  // Columns [1, 1] and [0, ln 3]: softmax -> [0.5, 0.5] and [0.25, 0.75].
  auto y = reference("softmax", {{"axis", 0}}, {{{2, 2}, {1, 0, 1, std::log(3.0)}}});
  expect_near(y.data, {0.5, 0.25, 0.5, 0.75});
}

TEST(Dense1Reference, LogSoftmax) {
  // x - max - log(sum) with log(1.5032147244080551) = 0.40760596444437554
  auto y = reference("log_softmax", {{"axis", -1}}, {{{3}, {1, 2, 3}}});
  expect_near(y.data, {-2.4076059644443806, -1.4076059644443806, -0.40760596444437554});
}

TEST(Dense1Shape, SoftmaxAxisOutOfRange) {
  std::string key;
  EXPECT_EQ(infer_error("softmax", {{"axis", 2}}, {tensor(DType::kF32, {Expr::dim("B"), 10})}, &key),
            "axis 2 is out of range for a rank-2 input (valid: -2..1)");
  EXPECT_EQ(key, "attrs.axis");
}

TEST(Dense1Shape, UnaryRejectsI32) {
  EXPECT_EQ(infer_error("relu", {}, {tensor(DType::kI32, {4})}),
            "relu does not support i32 inputs (supported: f32, bf16, f16)");
}

}  // namespace
}  // namespace teeny
