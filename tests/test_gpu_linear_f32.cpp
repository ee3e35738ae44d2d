// f32 linear on sm_90 runs on tensor cores as 3xTF32 (ops/kernels/gemm_wgmma.cuh): a
// precision test the conformance tolerances (f32 atol 1e-4, rtol 1e-3) are too loose for,
// since plain TF32 (10-bit mantissa products) passes those at small K.
//
// Each output's error is measured against the f64 sum and scaled by sum_k |x_k w_k|, the
// natural bound of a dot product's rounding error. 3xTF32 drops each product's low-by-low term
// and rounds the low parts to TF32, at most 2 * 2^-22 (4.8e-7) of sum |x w| before the f32 sums
// (the worst of these 1.1M outputs measured 1.0e-6 on an H100); plain TF32 errs by up to 2^-11
// per product (near 1e-5 here). The test requires < 2e-6.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "core/compile.h"
#include "core/driver.h"
#include "core/executor.h"
#include "core/graph.h"
#include "tests/gpu_test_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::registry;

TEST(GpuLinearF32, TensorCorePathKeepsF32Accuracy) {
  TEENY_GPU_OR_SKIP(device);
  // Ragged in M and N, and 72 tiles of 128x128: a batch large enough for tensor cores
  // (kTf32MinTilesLinear).
  constexpr int64_t kRows = 1100, kIn = 4096, kOut = 1000;
  const std::string spec = fmt::format(
      "name: f32_gemm\ndims: {{B: {{min: 1, max: 4096, default: {}}}}}\n"
      "inputs: {{x: {{dtype: f32, shape: [B, {}]}}}}\n"
      "nodes:\n  - {{name: y, op: linear, inputs: [x], attrs: {{out_features: {}}}}}\noutputs: [y]\n",
      kRows, kIn, kOut);
  const Graph graph = parse_graph(spec, "f32_gemm.yaml", registry());
  const Bundle bundle = compile_graph(graph, registry(), CompileOptions{});

  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "f32_gemm");
  DataOptions options;
  options.seed = 5;
  options.fill = ParamFill::kRandom;
  const RunData data = prepare_data(bound, options);
  bind_launches(bound, device->facts());
  // The zeroing for split-K, then the GEMM (the small-M variant is left out).
  ASSERT_EQ(bound.launches.size(), 2u);
  const std::string& gemm = bundle.kernels.at(bound.launches[1].kernel).name;
  ASSERT_NE(gemm.find("_wgmma"), std::string::npos) << gemm;
  GpuExecutor executor(device, bound);
  executor.upload(data);
  executor.run(1, false);
  executor.synchronize("f32 linear");
  const HostTensor y = executor.read("y");
  ASSERT_EQ(y.data.size(), static_cast<size_t>(kRows * kOut));

  const std::vector<double>& x = data.inputs.at("x").data;
  const std::vector<double>& w = data.params.at("y.weight").data;
  const std::vector<double>& b = data.params.at("y.bias").data;
  double worst = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < kOut; ++o) {
      double sum = b[o], magnitude = std::abs(b[o]);
      for (int64_t k = 0; k < kIn; ++k) {
        sum += x[r * kIn + k] * w[o * kIn + k];
        magnitude += std::abs(x[r * kIn + k] * w[o * kIn + k]);
      }
      worst = std::max(worst, std::abs(y.data[r * kOut + o] - sum) / magnitude);
    }
  }
  std::printf("f32 linear [%lld, %lld] -> %lld: worst |error| / sum |x w| = %.3g\n", (long long)kRows, (long long)kIn,
              (long long)kOut, worst);
  EXPECT_LT(worst, 2e-6);
}

}  // namespace
}  // namespace teeny
