// Memory-bound ops (elementwise, softmax, norms, reductions, embedding, data movement): host
// references against hand-computed values, shape rules and their errors (exact text).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "core/compile.h"
#include "core/driver.h"
#include "core/executor.h"
#include "core/graph.h"
#include "core/nvrtc.h"
#include "core/registry.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "tests/gpu_test_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using namespace op_testing;

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-7) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// ---- elementwise ---------------------------------------------------------------------------

TEST(MemoryBoundReference, Relu) {
  auto y = reference("relu", {}, {{{5}, {-2.0, -0.0, 0.0, 0.5, 3.0}}});
  expect_near(y.data, {0.0, 0.0, 0.0, 0.5, 3.0});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{5}));
}

TEST(MemoryBoundReference, SiluSigmoidTanh) {
  // sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4; silu(x) = x sigmoid(x);
  // tanh(ln 2) = (2 - 1/2) / (2 + 1/2) = 0.6.
  const double l3 = std::log(3.0), l2 = std::log(2.0);
  expect_near(reference("sigmoid", {}, {{{3}, {0.0, l3, -l3}}}).data, {0.5, 0.75, 0.25});
  expect_near(reference("silu", {}, {{{3}, {0.0, l3, -l3}}}).data, {0.0, 0.75 * l3, -0.25 * l3});
  expect_near(reference("tanh", {}, {{{3}, {0.0, l2, -l2}}}).data, {0.0, 0.6, -0.6});
}

TEST(MemoryBoundReference, Gelu) {
  // erf form: x * Phi(x); Phi(1) = 0.8413447460685429 (normal table).
  expect_near(reference("gelu", {{"approximate", "none"}}, {{{3}, {0.0, 1.0, -1.0}}}).data,
              {0.0, 0.8413447460685429, -(1 - 0.8413447460685429)}, 1e-12);
  // tanh form at 1: 0.5 * (1 + tanh(sqrt(2/pi) * 1.044715)).
  const double t = std::tanh(0.7978845608028654 * 1.044715);
  expect_near(reference("gelu", {{"approximate", "tanh"}}, {{{2}, {1.0, -1.0}}}).data, {0.5 * (1 + t), -0.5 * (1 - t)},
              1e-12);
}

TEST(MemoryBoundReference, Scale) {
  expect_near(reference("scale", {{"value", -2.5}}, {{{3}, {1.0, -2.0, 0.0}}}).data, {-2.5, 5.0, 0.0});
}

TEST(MemoryBoundReference, BinaryBroadcasting) {
  const HostIn a{{2, 3}, {1, 2, 3, 4, 5, 6}};
  expect_near(reference("add", {}, {a, {{3}, {10, 20, 30}}}).data, {11, 22, 33, 14, 25, 36});
  expect_near(reference("add", {}, {a, {{2, 1}, {100, 200}}}).data, {101, 102, 103, 204, 205, 206});
  // Outer product shapes: [2, 1] op [1, 3] -> [2, 3].
  const HostIn col{{2, 1}, {1, 2}}, row{{1, 3}, {1, 2, 4}};
  expect_near(reference("sub", {}, {col, row}).data, {0, -1, -3, 1, 0, -2});
  expect_near(reference("mul", {}, {col, row}).data, {1, 2, 4, 2, 4, 8});
  expect_near(reference("div", {}, {col, row}).data, {1, 0.5, 0.25, 2, 1, 0.5});
  EXPECT_EQ(reference("div", {}, {col, row}).shape, (std::vector<int64_t>{2, 3}));
}

TEST(MemoryBoundShape, BinaryBroadcastsSymbolicDims) {
  const Expr B = Expr::dim("B"), S = Expr::dim("S");
  EXPECT_EQ(context("add", {}, {tensor(DType::kF32, {B, 1, 8}), tensor(DType::kF32, {S, 1})}).output.shape,
            (Shape{B, S, 8}));
  EXPECT_EQ(context("mul", {}, {tensor(DType::kBF16, {8}), tensor(DType::kBF16, {B, 8})}).output.dtype, DType::kBF16);
  std::string key;
  EXPECT_EQ(infer_error("add", {}, {tensor(DType::kF32, {B, 8}), tensor(DType::kF32, {B, 7})}, &key),
            "shapes [B, 8] and [B, 7] do not broadcast: dim 1 is 8 vs 7");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("add", {}, {tensor(DType::kF32, {B}), tensor(DType::kF32, {S})}),
            "shapes [B] and [S] do not broadcast: dim 0 is B vs S");
  EXPECT_EQ(infer_error("sub", {}, {tensor(DType::kF32, {4}), tensor(DType::kBF16, {4})}),
            "input 1 is bf16 but input 0 is f32; sub needs one dtype");
}

TEST(MemoryBoundShape, UnaryRejectsI32) {
  EXPECT_EQ(infer_error("relu", {}, {tensor(DType::kI32, {4})}),
            "relu does not support i32 inputs (supported: f32, bf16, f16)");
}

TEST(MemoryBoundShape, RequestedDtypeMustBeTheInputs) {
  OpContext ctx;
  ctx.node = "n";
  ctx.inputs = {tensor(DType::kBF16, {4})};
  ctx.requested_dtype = DType::kF32;
  try {
    op("relu").infer(ctx);
    FAIL() << "no error";
  } catch (const OpError& e) {
    EXPECT_EQ(e.key, "dtype");
    EXPECT_EQ(e.message(),
              "op 'relu' produces its inputs' dtype, bf16; it cannot produce f32 (there are no implicit conversions)");
  }
}

// ---- softmax -------------------------------------------------------------------------------

TEST(MemoryBoundReference, SoftmaxLastAxis) {
  // exp([1,2,3] - 3) = [e^-2, e^-1, 1], sum 1.5032147244080551
  auto y = reference("softmax", {{"axis", -1}}, {{{2, 3}, {1, 2, 3, 0, 0, 0}}});
  expect_near(y.data, {0.09003057317038046, 0.24472847105479764, 0.6652409557748219, 1.0 / 3, 1.0 / 3, 1.0 / 3});
}

TEST(MemoryBoundReference, SoftmaxFirstAxis) {
  // Columns [1, 1] and [0, ln 3]: softmax -> [0.5, 0.5] and [0.25, 0.75].
  auto y = reference("softmax", {{"axis", 0}}, {{{2, 2}, {1, 0, 1, std::log(3.0)}}});
  expect_near(y.data, {0.5, 0.25, 0.5, 0.75});
}

TEST(MemoryBoundReference, SoftmaxIsStableForLargeValues) {
  // [1000, 1000 + ln 3] must not overflow: [1/4, 3/4].
  expect_near(reference("softmax", {{"axis", -1}}, {{{2}, {1000.0, 1000.0 + std::log(3.0)}}}).data, {0.25, 0.75},
              1e-12);
}

TEST(MemoryBoundReference, LogSoftmax) {
  // x - max - log(sum) with log(1.5032147244080551) = 0.40760596444437554
  auto y = reference("log_softmax", {{"axis", -1}}, {{{3}, {1, 2, 3}}});
  expect_near(y.data, {-2.4076059644443806, -1.4076059644443806, -0.40760596444437554});
}

TEST(MemoryBoundShape, SoftmaxAxisOutOfRange) {
  std::string key;
  EXPECT_EQ(infer_error("softmax", {{"axis", 2}}, {tensor(DType::kF32, {Expr::dim("B"), 10})}, &key),
            "axis 2 is out of range for a rank-2 input (valid: -2..1)");
  EXPECT_EQ(key, "attrs.axis");
}

// ---- norms ---------------------------------------------------------------------------------

TEST(MemoryBoundReference, LayerNorm) {
  // [1, 2, 3, 4]: mean 2.5, biased variance 1.25; eps 0 -> (x - 2.5) / sqrt(1.25).
  const double s = 1.0 / std::sqrt(1.25);
  auto plain = reference("layernorm", {{"eps", 0.0}, {"affine", false}}, {{{1, 4}, {1, 2, 3, 4}}});
  expect_near(plain.data, {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s});
  auto affine =
      reference("layernorm", {{"eps", 0.0}, {"affine", true}}, {{{1, 4}, {1, 2, 3, 4}}}, {{1, 2, 1, 2}, {0, 0, 1, 1}});
  expect_near(affine.data, {-1.5 * s, -1.0 * s, 0.5 * s + 1, 3.0 * s + 1});
  // eps enters under the root: a constant row [5, 5] with eps 0.25 gives 0 / sqrt(0.25) = 0,
  // and [0, 2] (var 1) with eps 3 gives [-1, 1] / 2.
  expect_near(reference("layernorm", {{"eps", 3.0}, {"affine", false}}, {{{2, 2}, {5, 5, 0, 2}}}).data,
              {0, 0, -0.5, 0.5});
}

TEST(MemoryBoundReference, RmsNorm) {
  // [3, 4]: mean square 12.5; y = x / sqrt(12.5 + eps) * w with eps 0, w = [1, 0.5].
  const double r = std::sqrt(12.5);
  expect_near(reference("rmsnorm", {{"eps", 0.0}}, {{{1, 2}, {3, 4}}}, {{1, 0.5}}).data, {3 / r, 2 / r});
}

TEST(MemoryBoundShape, NormParams) {
  const Expr B = Expr::dim("B");
  const OpContext ln = context("layernorm", {{"eps", 1e-5}, {"affine", true}}, {tensor(DType::kBF16, {B, 768})});
  const std::vector<ParamSpec> p = op("layernorm").params(ln);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].slot, "weight");
  EXPECT_EQ(p[1].slot, "bias");
  EXPECT_EQ(p[0].shape, (Shape{768}));
  EXPECT_EQ(p[1].dtype, DType::kBF16);
  EXPECT_TRUE(op("layernorm")
                  .params(context("layernorm", {{"eps", 1e-5}, {"affine", false}}, {tensor(DType::kF32, {B, 8})}))
                  .empty());
  const std::vector<ParamSpec> r =
      op("rmsnorm").params(context("rmsnorm", {{"eps", 1e-6}}, {tensor(DType::kF32, {B, 64})}));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].slot, "weight");
  EXPECT_EQ(r[0].shape, (Shape{64}));
  EXPECT_EQ(infer_error("rmsnorm", {{"eps", 1e-6}}, {tensor(DType::kF32, {})}), "rmsnorm needs an input of rank >= 1");
}

// ---- reductions ----------------------------------------------------------------------------

TEST(MemoryBoundReference, Reductions) {
  const HostIn x{{2, 3}, {1, 2, 3, 4, 5, -6}};
  expect_near(reference("reduce_sum", {{"axis", -1}, {"keepdim", false}}, {x}).data, {6, 3});
  expect_near(reference("reduce_sum", {{"axis", 0}, {"keepdim", false}}, {x}).data, {5, 7, -3});
  expect_near(reference("reduce_mean", {{"axis", 1}, {"keepdim", false}}, {x}).data, {2, 1});
  auto m = reference("reduce_max", {{"axis", 0}, {"keepdim", true}}, {x});
  expect_near(m.data, {4, 5, 3});
  EXPECT_EQ(m.shape, (std::vector<int64_t>{1, 3}));
  // Middle axis of [2, 2, 2]: pairs (0,1,2,3 | 4,5,6,7) -> sums over axis 1.
  expect_near(reference("reduce_sum", {{"axis", 1}, {"keepdim", false}}, {{{2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}}}).data,
              {2, 4, 10, 12});
}

TEST(MemoryBoundShape, ReductionShapes) {
  const Expr B = Expr::dim("B");
  EXPECT_EQ(context("reduce_mean", {{"axis", -1}, {"keepdim", false}}, {tensor(DType::kF32, {B, 5})}).output.shape,
            (Shape{B}));
  EXPECT_EQ(context("reduce_max", {{"axis", 0}, {"keepdim", true}}, {tensor(DType::kF32, {B, 5})}).output.shape,
            (Shape{1, 5}));
  EXPECT_EQ(context("reduce_sum", {{"axis", 0}, {"keepdim", false}}, {tensor(DType::kF32, {7})}).output.shape,
            (Shape{}));
}

// ---- embedding -----------------------------------------------------------------------------

TEST(MemoryBoundReference, EmbeddingOutOfRangeIdsGiveZeroRows) {
  auto y = reference("embedding", {{"num_embeddings", 3}, {"dim", 2}}, {{{2, 2}, {2, -1, 0, 3}, DType::kI32}},
                     {{1, 2, 3, 4, 5, 6}});
  expect_near(y.data, {5, 6, 0, 0, 1, 2, 0, 0});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 2, 2}));
}

TEST(MemoryBoundShape, Embedding) {
  const Expr B = Expr::dim("B");
  const OpContext ctx =
      context("embedding", {{"num_embeddings", 50257}, {"dim", 768}}, {tensor(DType::kI32, {B, Expr::dim("S")})});
  EXPECT_EQ(ctx.output.shape, (Shape{B, Expr::dim("S"), 768}));
  const std::vector<ParamSpec> p = op("embedding").params(ctx);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].shape, (Shape{50257, 768}));
  EXPECT_EQ(infer_error("embedding", {{"num_embeddings", 5}, {"dim", 2}}, {tensor(DType::kF32, {B})}),
            "embedding ids must be i32, got f32");
}

// ---- views ---------------------------------------------------------------------------------

TEST(MemoryBoundShape, Flatten) {
  const Expr B = Expr::dim("B");
  const TensorType x = tensor(DType::kF32, {B, 3, 4, 5});
  EXPECT_EQ(context("flatten", {{"start_dim", 1}, {"end_dim", -1}}, {x}).output.shape, (Shape{B, 60}));
  EXPECT_EQ(context("flatten", {{"start_dim", 0}, {"end_dim", 1}}, {x}).output.shape, (Shape{B * 3, 4, 5}));
  std::string key;
  EXPECT_EQ(infer_error("flatten", {{"start_dim", 2}, {"end_dim", 1}}, {x}, &key),
            "flatten: start_dim (2) comes after end_dim (1)");
  EXPECT_EQ(key, "attrs.start_dim");
  EXPECT_FALSE(op("flatten").lower) << "a view has no kernel";
  // Padded rows: leading dims may merge (the stride is kept), the last dim may not change.
  TensorType padded = tensor(DType::kF32, {B, 3, 17});
  padded.row_stride = Expr(20);
  const TensorType merged = context("flatten", {{"start_dim", 0}, {"end_dim", 1}}, {padded}).output;
  EXPECT_EQ(merged.shape, (Shape{B * 3, 17}));
  EXPECT_EQ(merged.row_stride, Expr(20));
  EXPECT_EQ(infer_error("flatten", {{"start_dim", 1}, {"end_dim", -1}}, {padded}),
            "flatten cannot view a tensor with padded rows (row stride 20, last dim 17) as [B, 51]: "
            "a view may not change the last dim");
}

TEST(MemoryBoundShape, Reshape) {
  const Expr B = Expr::dim("B");
  const TensorType x = tensor(DType::kF32, {B, 784});
  EXPECT_EQ(context("reshape", {{"shape", {"B", 28, 28}}}, {x}).output.shape, (Shape{B, 28, 28}));
  EXPECT_EQ(context("reshape", {{"shape", {-1, 28}}}, {x}).output.shape.back(), Expr(28));
  EXPECT_EQ(context("reshape", {{"shape", {"B*2", 392}}}, {x}).output.shape, (Shape{B * 2, 392}));
  std::string key;
  EXPECT_EQ(infer_error("reshape", {{"shape", {"B", 27, 28}}}, {x}, &key),
            "reshape: [B, 27, 28] does not have the element count of the input [B, 784]");
  EXPECT_EQ(key, "attrs.shape");
  EXPECT_EQ(infer_error("reshape", {{"shape", {-1, -1}}}, {x}), "reshape: only one entry of `shape` may be -1");
  EXPECT_EQ(infer_error("reshape", {{"shape", {0, 784}}}, {x}),
            "reshape: entry 0 of `shape` is 0; sizes must be positive (or one -1)");
  // The element count is checked for every binding, not just structurally.
  EXPECT_EQ(infer_error("reshape", {{"shape", {784, "B"}}}, {tensor(DType::kF32, {Expr::dim("S"), 784})}),
            "reshape: [784, B] does not have the element count of the input [S, 784]");
}

TEST(MemoryBoundReference, ViewsKeepTheData) {
  auto y = reference("reshape", {{"shape", {3, 2}}}, {{{2, 3}, {1, 2, 3, 4, 5, 6}}});
  expect_near(y.data, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{3, 2}));
}

// ---- transpose -----------------------------------------------------------------------------

TEST(MemoryBoundReference, Transpose) {
  expect_near(reference("transpose", {{"perm", {1, 0}}}, {{{2, 3}, {1, 2, 3, 4, 5, 6}}}).data, {1, 4, 2, 5, 3, 6});
  // [2, 1, 3] with perm [2, 0, 1] -> [3, 2, 1]: out[k][i][0] = x[i][0][k].
  auto y = reference("transpose", {{"perm", {2, 0, 1}}}, {{{2, 1, 3}, {1, 2, 3, 4, 5, 6}}});
  expect_near(y.data, {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{3, 2, 1}));
}

TEST(MemoryBoundShape, TransposeErrors) {
  const TensorType x = tensor(DType::kF32, {Expr::dim("B"), 3, 4});
  EXPECT_EQ(context("transpose", {{"perm", {0, -1, 1}}}, {x}).output.shape, (Shape{Expr::dim("B"), 4, 3}));
  std::string key;
  EXPECT_EQ(infer_error("transpose", {{"perm", {1, 0}}}, {x}, &key),
            "transpose: perm has 2 entries but the input has rank 3");
  EXPECT_EQ(key, "attrs.perm");
  EXPECT_EQ(infer_error("transpose", {{"perm", {0, 1, 1}}}, {x}), "transpose: perm repeats axis 1");
  EXPECT_EQ(infer_error("transpose", {{"perm", {0, 1, 3}}}, {x}),
            "axis 3 is out of range for a rank-3 input (valid: -3..2)");
}

// ---- concat --------------------------------------------------------------------------------

TEST(MemoryBoundReference, Concat) {
  expect_near(reference("concat", {{"axis", 1}}, {{{2, 1}, {1, 2}}, {{2, 2}, {3, 4, 5, 6}}}).data, {1, 3, 4, 2, 5, 6});
  expect_near(reference("concat", {{"axis", 0}}, {{{2}, {1, 2}}, {{1}, {3}}, {{2}, {4, 5}}}).data, {1, 2, 3, 4, 5});
}

TEST(MemoryBoundShape, Concat) {
  const Expr B = Expr::dim("B");
  const OpContext ctx =
      context("concat", {{"axis", 1}}, {tensor(DType::kF32, {B, 3}), tensor(DType::kF32, {B, Expr::dim("S")})});
  EXPECT_EQ(ctx.output.shape, (Shape{B, Expr::dim("S") + 3}));
  EXPECT_EQ(op("concat").lower(ctx).launches.size(), 2u) << "one launch per input";
  std::string key;
  EXPECT_EQ(infer_error("concat", {{"axis", 1}}, {tensor(DType::kF32, {B, 3}), tensor(DType::kF32, {4, 3})}, &key),
            "concat: input 1 has shape [4, 3] but input 0 has [B, 3]; all dims but axis 1 must match");
  EXPECT_EQ(key, "inputs.1");
}

// ---- lowering and NVRTC --------------------------------------------------------------------

struct LowerCase {
  std::string op;
  nlohmann::json attrs;
  std::vector<TensorType> inputs;
};

std::vector<LowerCase> lowering_cases() {
  const Expr B = Expr::dim("B"), S = Expr::dim("S");
  TensorType padded = tensor(DType::kF32, {B, 17});
  padded.row_stride = Expr(20);
  std::vector<LowerCase> cases;
  for (DType dt : float_dtypes()) {
    const TensorType rows = tensor(dt, {B, 4096});
    for (const char* name : {"relu", "silu", "sigmoid", "tanh"}) cases.push_back({name, {}, {rows}});
    cases.push_back({"gelu", {{"approximate", "none"}}, {rows}});
    cases.push_back({"gelu", {{"approximate", "tanh"}}, {rows}});
    cases.push_back({"scale", {{"value", 0.5}}, {rows}});
    for (const char* name : {"add", "sub", "mul", "div"}) {
      cases.push_back({name, {}, {rows, rows}});
      cases.push_back({name, {}, {tensor(dt, {B, 1, S}), tensor(dt, {3, 1})}});
    }
    for (const char* name : {"softmax", "log_softmax"}) {
      cases.push_back({name, {{"axis", -1}}, {rows}});
      cases.push_back({name, {{"axis", -1}}, {tensor(dt, {B, 17})}});
      cases.push_back({name, {{"axis", -1}}, {tensor(dt, {B, S})}});
      cases.push_back({name, {{"axis", 0}}, {tensor(dt, {B, S})}});
    }
    cases.push_back({"layernorm", {{"eps", 1e-5}, {"affine", true}}, {rows}});
    cases.push_back({"layernorm", {{"eps", 1e-5}, {"affine", false}}, {tensor(dt, {B, S})}});
    cases.push_back({"rmsnorm", {{"eps", 1e-6}}, {tensor(dt, {B, 17})}});
    for (const char* name : {"reduce_sum", "reduce_mean", "reduce_max"}) {
      cases.push_back({name, {{"axis", -1}, {"keepdim", false}}, {rows}});
      cases.push_back({name, {{"axis", 0}, {"keepdim", true}}, {rows}});
    }
    cases.push_back({"transpose", {{"perm", {1, 0}}}, {rows}});
    cases.push_back({"transpose", {{"perm", {0, 2, 1, 3}}}, {tensor(dt, {B, S, 12, 64})}});
    cases.push_back({"transpose", {{"perm", {2, 0, 1}}}, {tensor(dt, {B, S, 3})}});
    cases.push_back({"concat", {{"axis", 1}}, {rows, tensor(dt, {B, 3})}});
  }
  cases.push_back({"embedding", {{"num_embeddings", 100}, {"dim", 64}}, {tensor(DType::kI32, {B, S})}});
  cases.push_back({"softmax", {{"axis", -1}}, {padded}});
  cases.push_back({"layernorm", {{"eps", 1e-5}, {"affine", true}}, {padded}});
  return cases;
}

TEST(MemoryBoundLowering, LaunchesPassTheirKernelsParams) {
  for (const LowerCase& c : lowering_cases()) {
    SCOPED_TRACE(c.op + " " + c.attrs.dump());
    const OpContext ctx = context(c.op, c.attrs, c.inputs);
    const Lowering lowering = op(c.op).lower(ctx);
    ASSERT_FALSE(lowering.launches.empty());
    for (const Launch& launch : lowering.launches) {
      const KernelSource& kernel = lowering.kernels.at(launch.kernel);
      ASSERT_EQ(kernel.params.size(), launch.args.size());
      for (size_t i = 0; i < kernel.params.size(); ++i) {
        EXPECT_EQ(kernel.params[i].name, launch.args[i].name) << "argument " << i;
        EXPECT_EQ(arg_c_type(kernel.params[i]), arg_c_type(launch.args[i])) << "argument " << i;
      }
      // The kernel's __launch_bounds__ is the launch's block.
      EXPECT_EQ(kernel.max_threads, launch.block[0] * launch.block[1] * launch.block[2]);
    }
  }
}

TEST(MemoryBoundLowering, PaddedInputStrideIsPassed) {
  TensorType padded = tensor(DType::kF32, {Expr::dim("B"), 17});
  padded.row_stride = Expr(20);
  const Lowering lowering = op("softmax").lower(context("softmax", {{"axis", -1}}, {padded}));
  const std::vector<KernelArg>& args = lowering.launches.at(0).args;
  const auto stride = std::find_if(args.begin(), args.end(), [](const KernelArg& a) { return a.name == "x_stride"; });
  ASSERT_NE(stride, args.end());
  EXPECT_EQ(stride->value, Expr(20));
}

TEST(MemoryBoundLowering, BinaryCollapsesBroadcastDims) {
  const Expr B = Expr::dim("B"), S = Expr::dim("S");
  auto kernel_name = [](std::vector<TensorType> inputs) {
    return op("add").lower(context("add", {}, std::move(inputs))).kernels.at(0).name;
  };
  // Same shapes: one flat dim. Row vector: b broadcasts over B. [B, 1, 8] + [S, 1]: the
  // output [B, S, 8] keeps three dims (a broadcasts over S, b over B and 8).
  EXPECT_EQ(kernel_name({tensor(DType::kF32, {B, S, 8}), tensor(DType::kF32, {B, S, 8})}), "add_f32_f");
  EXPECT_EQ(kernel_name({tensor(DType::kF32, {B, 17}), tensor(DType::kF32, {17})}), "add_f32_bf");
  EXPECT_EQ(kernel_name({tensor(DType::kBF16, {B, 1, 8}), tensor(DType::kBF16, {S, 1})}), "add_bf16_bab");
  // A padded row stride stops the merge of the last two dims.
  TensorType padded = tensor(DType::kF32, {B, 17});
  padded.row_stride = Expr(20);
  EXPECT_EQ(kernel_name({padded, tensor(DType::kF32, {B, 17})}), "add_f32_ff");
}

TEST(MemoryBoundLowering, ConcatLaunchesShareOneKernelWithTheirOffsets) {
  const Expr B = Expr::dim("B");
  const Lowering lowering = op("concat").lower(
      context("concat", {{"axis", 1}},
              {tensor(DType::kF32, {B, 3, 4}), tensor(DType::kF32, {B, 5, 4}), tensor(DType::kF32, {B, 1, 4})}));
  ASSERT_EQ(lowering.kernels.size(), 1u);
  ASSERT_EQ(lowering.launches.size(), 3u);
  const int64_t offsets[] = {0, 12, 32};  // column offsets in elements: (0, 3, 8) * inner 4
  for (size_t i = 0; i < 3; ++i) {
    const Launch& launch = lowering.launches[i];
    EXPECT_EQ(launch.kernel, 0);
    EXPECT_EQ(launch.args.at(0).input_index, static_cast<int>(i));
    EXPECT_EQ(launch.args.back().name, "col_offset");
    EXPECT_EQ(launch.args.back().value, Expr(offsets[i]));
    EXPECT_EQ(launch.args.at(6).value, Expr(36)) << "out_cols = 9 * 4";
  }
}

TEST(MemoryBoundLowering, RowPlans) {
  // A warp per short row (4 rows per block), a block per long row, registers for up to 16
  // elements per thread, and the symbolic default.
  const ops::RowPlan narrow = ops::plan_rows(Expr(17), DType::kF32);
  EXPECT_EQ(narrow.threads, 32);
  EXPECT_EQ(narrow.rows_per_block, 4);
  EXPECT_EQ(narrow.items, 1);
  const ops::RowPlan wide = ops::plan_rows(Expr(4096), DType::kF32);
  EXPECT_EQ(wide.threads, 256);
  EXPECT_EQ(wide.items, 4);
  EXPECT_EQ(wide.threads * wide.items * 4, 4096) << "a 4096-wide f32 row is read once";
  const ops::RowPlan half = ops::plan_rows(Expr(4096), DType::kBF16);
  EXPECT_EQ(half.threads * half.items * 8, 4096);
  // Rows up to 1024 elements keep one warp, with up to 32 elements a lane: GPT-2's 768.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const ops::RowPlan gpt = ops::plan_rows(Expr(768), dtype);
    const int width = dtype == DType::kF32 ? 4 : 8;
    EXPECT_EQ(gpt.threads, 32) << dtype_name(dtype);
    EXPECT_EQ(gpt.rows_per_block, 4) << dtype_name(dtype);
    EXPECT_EQ(gpt.items * width, 24) << dtype_name(dtype);
  }
  // One more element: a block of 128, 16 elements a lane at most.
  const ops::RowPlan over = ops::plan_rows(Expr(1025), DType::kF32);
  EXPECT_EQ(over.threads, 128);
  EXPECT_EQ(over.rows_per_block, 1);
  EXPECT_EQ(over.items, 3);
  const ops::RowPlan symbolic = ops::plan_rows(Expr::dim("D"), DType::kF32);
  EXPECT_EQ(symbolic.threads, 256);
  EXPECT_EQ(symbolic.rows_per_block, 1);
}

TEST(MemoryBoundLowering, EveryKernelCompilesWithNvrtcForSm90) {
  std::vector<KernelSource> kernels;
  std::set<std::string> seen;
  for (const LowerCase& c : lowering_cases()) {
    const Lowering lowering = op(c.op).lower(context(c.op, c.attrs, c.inputs));
    for (const KernelSource& k : lowering.kernels) {
      if (!seen.insert(kernel_translation_unit(k, k.name)).second) continue;
      kernels.push_back(k);
    }
  }
  NvrtcConfig config;
  config.arch = "sm_90";
  config.use_cache = false;
  const std::vector<CompiledKernel> compiled = op_testing::nvrtc_compile(kernels, config);
  ASSERT_EQ(compiled.size(), kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_NE(compiled[i].ptx.find(".visible .entry " + kernels[i].name + "_entry_point"), std::string::npos)
        << kernels[i].name;
  }
}

// GELU's tanh form takes one tanh.approx in bf16 kernels (its error is under bf16 rounding)
// and the exp/divide form in f32 and f16 ones, both as the elementwise op and as the epilogue
// of a fused linear (which must compute what the unfused pair does).
TEST(MemoryBoundLowering, GeluTanhTakesTanhApproxOnlyForBf16) {
  NvrtcConfig config;
  config.arch = "sm_90";
  config.use_cache = false;
  for (DType dtype : float_dtypes()) {
    std::vector<KernelSource> kernels;
    for (const Lowering& lowering :
         {op("gelu").lower(context("gelu", {{"approximate", "tanh"}}, {tensor(dtype, {Expr::dim("B"), Expr(1000)})})),
          op("fused.linear")
              .lower(context("fused.linear", {{"out_features", 96}, {"bias", true}, {"activation", "gelu_tanh"}},
                             {tensor(dtype, {Expr::dim("B"), Expr(64)})}))}) {
      kernels.push_back(lowering.kernels.at(0));
    }
    for (const CompiledKernel& compiled : op_testing::nvrtc_compile(kernels, config)) {
      const bool approx = compiled.ptx.find("tanh.approx.f32") != std::string::npos;
      const bool exp_form = compiled.ptx.find("ex2.approx") != std::string::npos;
      EXPECT_EQ(approx, dtype == DType::kBF16) << dtype_name(dtype);
      EXPECT_EQ(exp_form, dtype != DType::kBF16) << dtype_name(dtype);
    }
  }
}

// ---- GPU: the out-of-range rule of embedding (random ids never leave [0, num)) -------------

TEST(GpuMemoryBound, EmbeddingOutOfRangeIdsGiveZeroRows) {
  // Compiled and prepared before looking for a device, so a CPU machine checks that much.
  const Graph graph = parse_graph(R"(name: emb
inputs:
  ids: {dtype: i32, shape: [2, 3]}
nodes:
  - {name: y, op: embedding, inputs: [ids], attrs: {num_embeddings: 4, dim: 17}}
outputs: [y]
)",
                                  "emb.yaml", registry());
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("teeny_memory_bound_emb_" + std::to_string(getpid()));
  CompileOptions options;
  options.cache_dir = cache.string();
  const Bundle bundle = compile_graph(graph, registry(), options);
  std::filesystem::remove_all(cache);
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "emb");
  DataOptions data_options;
  data_options.fill = ParamFill::kRandom;
  const RunData data = prepare_data(bound, data_options);
  TEENY_GPU_OR_SKIP(device);
  bind_launches(bound, device->facts());
  GpuExecutor executor(device, bound);
  executor.upload(data);
  const std::vector<double> ids = {3, -1, 4, 0, 2147483647, -2147483647.0 - 1};
  executor.set_input("ids", HostTensor{DType::kI32, {2, 3}, ids});
  executor.run(1, false);
  executor.synchronize("embedding out-of-range test");
  const HostTensor y = executor.read("y");
  const std::vector<double>& weight = data.params.at("y.weight").data;
  ASSERT_EQ(y.data.size(), 6u * 17u);
  for (size_t r = 0; r < ids.size(); ++r) {
    const bool valid = ids[r] >= 0 && ids[r] < 4;
    for (size_t c = 0; c < 17; ++c) {
      const double want = valid ? weight[static_cast<size_t>(ids[r]) * 17 + c] : 0.0;
      EXPECT_EQ(y.data[r * 17 + c], want) << "row " << r << " (id " << ids[r] << "), column " << c;
    }
  }
}

}  // namespace
}  // namespace teeny
