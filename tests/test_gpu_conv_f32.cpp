// f32 convolutions run on tensor cores as 3xTF32 (ops/kernels/conv2d_mma.cuh): a precision test
// the conformance tolerances (f32 atol 1e-4, rtol 1e-3) are too loose for, as for f32 `linear`
// (test_gpu_linear_f32.cpp, whose reasoning carries over: 3xTF32 errs by at most 2 * 2^-22 of
// sum |x w| before the f32 sums; plain TF32 by up to 2^-11 per product).
//
// Each output's error against the f64 sum, scaled by sum_k |x_k w_k| over its window, must stay
// under 1e-6, over a reduction of 2304 (256 channels x 3 x 3) with padded borders.
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

TEST(GpuConvF32, TensorCorePathKeepsF32Accuracy) {
  TEENY_GPU_OR_SKIP(device);
  constexpr int64_t kBatch = 4, kIn = 256, kOut = 64, kSize = 14;
  const std::string spec = fmt::format(
      "name: f32_conv\ninputs: {{x: {{dtype: f32, shape: [{0}, {1}, {3}, {3}]}}}}\n"
      "nodes:\n  - {{name: y, op: conv2d, inputs: [x], attrs: {{out_channels: {2}, kernel_size: 3, padding: 1}}}}\n"
      "outputs: [y]\n",
      kBatch, kIn, kOut, kSize);
  const Graph graph = parse_graph(spec, "f32_conv.yaml", registry());
  CompileOptions compile_options;
  compile_options.variants["y"] = "mma";
  const Bundle bundle = compile_graph(graph, registry(), compile_options);
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "f32_conv");
  DataOptions options;
  options.seed = 7;
  options.fill = ParamFill::kRandom;
  const RunData data = prepare_data(bound, options);
  bind_launches(bound, device->facts());
  ASSERT_EQ(bound.launches.size(), 1u);
  const std::string& kernel = bundle.kernels.at(bound.launches[0].kernel).name;
  ASSERT_NE(kernel.find("_mma_"), std::string::npos) << kernel;
  GpuExecutor executor(device, bound);
  executor.upload(data);
  executor.run(1, false);
  executor.synchronize("f32 conv");
  const HostTensor y = executor.read("y");
  ASSERT_EQ(y.data.size(), static_cast<size_t>(kBatch * kOut * kSize * kSize));

  const std::vector<double>& x = data.inputs.at("x").data;
  const std::vector<double>& w = data.params.at("y.weight").data;
  const std::vector<double>& b = data.params.at("y.bias").data;
  double worst = 0;
  for (int64_t n = 0; n < kBatch; ++n)
    for (int64_t o = 0; o < kOut; ++o)
      for (int64_t oh = 0; oh < kSize; ++oh)
        for (int64_t ow = 0; ow < kSize; ++ow) {
          double sum = b[o], magnitude = std::abs(b[o]);
          for (int64_t c = 0; c < kIn; ++c)
            for (int64_t kh = 0; kh < 3; ++kh)
              for (int64_t kw = 0; kw < 3; ++kw) {
                const int64_t ih = oh + kh - 1, iw = ow + kw - 1;
                if (ih < 0 || ih >= kSize || iw < 0 || iw >= kSize) continue;
                const double term = x[((n * kIn + c) * kSize + ih) * kSize + iw] * w[((o * kIn + c) * 3 + kh) * 3 + kw];
                sum += term;
                magnitude += std::abs(term);
              }
          const double got = y.data[((n * kOut + o) * kSize + oh) * kSize + ow];
          worst = std::max(worst, std::abs(got - sum) / magnitude);
        }
  std::printf("f32 conv 3x3 %lld -> %lld at %lldx%lld, B=%lld: worst |error| / sum |x w| = %.3g\n", (long long)kIn,
              (long long)kOut, (long long)kSize, (long long)kSize, (long long)kBatch, worst);
  EXPECT_LT(worst, 1e-6);
}

}  // namespace
}  // namespace teeny
