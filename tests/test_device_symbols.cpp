// Device symbols (SMS, SMEM_PER_BLOCK, L2_BYTES): reserved names in expressions and specs, the
// same compiled bundle bound for GPUs with 132, 114 and 78 SMs against hand-computed grids,
// `teeny inspect` with and without --device-sms, and the run hints ops declare (id bounds,
// random ranges, unused PyTorch state) carried through compile into the bundle.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/binding.h"
#include "core/compile.h"
#include "core/driver.h"
#include "core/graph.h"
#include "core/run_data.h"
#include "core/safetensors.h"
#include "tests/file_test_util.h"
#include "tests/op_test_util.h"
#include "tests/spec_test_ops.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using testing::ScratchDir;

// GPUs of one arch (sm_90): the H200's 132 SMs, and parts with 114 and 78.
const std::vector<DeviceFacts> kDevices = {
    {132, 227 * 1024, 50 << 20}, {114, 227 * 1024, 50 << 20}, {78, 227 * 1024, 60 << 20}};

std::string eval_error(const Expr& expr, const Bindings& bindings) {
  try {
    expr.eval(bindings);
  } catch (const Error& error) {
    return error.message();
  }
  return "no error";
}

TEST(DeviceSymbols, AreNamesInExpressionsBoundFromTheDevicesFacts) {
  EXPECT_EQ(device_symbols(), (std::vector<std::string>{"SMS", "SMEM_PER_BLOCK", "L2_BYTES"}));
  EXPECT_TRUE(is_device_symbol("SMS"));
  EXPECT_FALSE(is_device_symbol("B"));
  const Expr grid = Expr::parse("min(ceil_div(B*4096, 1024), SMS*8)");
  EXPECT_EQ(grid, min(ceil_div(Expr::dim("B") * 4096, Expr(1024)), device_sms() * 8));
  EXPECT_EQ(grid.dims(), (std::vector<std::string>{"B", "SMS"}));
  EXPECT_EQ(device_bindings(DeviceFacts{78, 1000, 2000}),
            (Bindings{{"SMS", 78}, {"SMEM_PER_BLOCK", 1000}, {"L2_BYTES", 2000}}));
  Bindings bindings = device_bindings(DeviceFacts{78, 1000, 2000});
  bindings["B"] = 1000;
  EXPECT_EQ(grid.eval(bindings), 624);  // min(4000, 624)
  EXPECT_EQ(eval_error(grid, {{"B", 1}}),
            "device symbol 'SMS' is not bound (it is bound on a GPU; inspect takes --device-sms, --device-smem "
            "and --device-l2)");
}

TEST(DeviceSymbols, SpecDimsMayNotTakeTheirNames) {
  const Registry registry = testing::spec_test_registry();
  const std::string spec =
      "name: net\n"
      "dims:\n"
      "  SMS: {min: 1, max: 64, default: 8}\n"
      "inputs:\n"
      "  x: {dtype: f32, shape: [SMS, 16]}\n"
      "nodes:\n"
      "  - {name: act, op: relu, inputs: [x]}\n"
      "outputs: [act]\n";
  try {
    parse_graph(spec, "g.yaml", registry);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.render(),
              "teeny: error: g.yaml:3:3: dim name 'SMS' is a device symbol (SMS, SMEM_PER_BLOCK, L2_BYTES), bound "
              "from the GPU at run time\n"
              "    SMS: {min: 1, max: 64, default: 8}\n"
              "    ^\n");
  }
}

TEST(DeviceSymbols, ParamShapesMayNotUseThem) {
  // Host data (weights, init bytes) cannot depend on the GPU a bundle later runs on.
  Registry registry;
  OpDef def = testing::test_op("t.device_param", {{"x", ""}}, {}, testing::same_as_input);
  def.params = [](const OpContext&) {
    return std::vector<ParamSpec>{{"table", {device_sms()}, DType::kF32, ParamInit::kTrained, {}}};
  };
  registry.add(def);
  const Graph graph = parse_graph(
      "name: net\n"
      "inputs:\n"
      "  x: {dtype: f32, shape: [4]}\n"
      "nodes:\n"
      "  - {name: t1, op: t.device_param, inputs: [x]}\n"
      "outputs: [t1]\n",
      "g.yaml", registry);
  try {
    compile_graph(graph, registry, CompileOptions{});
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(),
              "node 't1': op 't.device_param', param 't1.table' shape 'SMS' uses 'SMS', which is not a dim of the "
              "graph");
  }
}

// ---- one bundle, three GPUs -------------------------------------------------------------------

class OneBundleManyGpus : public ::testing::Test {
 protected:
  Bundle compile(const std::string& spec_path_or_text, bool is_text = false) {
    const Graph graph = is_text ? parse_graph(spec_path_or_text, "g.yaml", op_testing::registry())
                                : load_graph(spec_path_or_text, op_testing::registry());
    CompileOptions options;
    options.cache_dir = cache_.str();
    return compile_graph(graph, op_testing::registry(), options);
  }
  // Every launch's grid, bound for `device` at `binds`.
  static BoundBundle bound_for(const Bundle& bundle, const std::vector<std::string>& binds, const DeviceFacts& device) {
    BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, binds), "b");
    bind_launches(bound, device);
    return bound;
  }
  static int64_t arg_value(const BoundLaunch& launch, const std::string& name) {
    for (const BoundArg& arg : launch.args) {
      if (arg.name == name) return arg.ivalue;
    }
    throw std::runtime_error("no argument " + name);
  }
  ScratchDir cache_;
};

// A launch whose `when` is 0 at the bound dims is left out: linear's small-M and tiled variants.
TEST_F(OneBundleManyGpus, LaunchesRunOnlyWhereTheirConditionHolds) {
  const Bundle bundle = compile(std::string(TEENY_SOURCE_DIR) + "/graphs/mnist_mlp.yaml");
  auto kernels_of_fc1 = [&](int64_t batch) {
    std::vector<std::string> names;
    for (const BoundLaunch& launch : bound_for(bundle, {fmt::format("B={}", batch)}, kDevices[0]).launches) {
      if (launch.node == "fc1") names.push_back(bundle.kernels.at(launch.kernel).name);
    }
    return names;
  };
  EXPECT_EQ(kernels_of_fc1(1), (std::vector<std::string>{"linear_f32_gemv_m1_bias"}));
  EXPECT_EQ(kernels_of_fc1(8), (std::vector<std::string>{"linear_f32_gemv_m8_bias"}));
  EXPECT_EQ(kernels_of_fc1(16), (std::vector<std::string>{"linear_f32_gemv_m16_bias"}));
  // A small batch's GEMM on CUDA cores (under 33 tiles of 3xTF32, 2 a row block of 128), a larger
  // one's on 3xTF32.
  EXPECT_EQ(kernels_of_fc1(17), (std::vector<std::string>{"linear_zero_f32", "linear_f32_nk_bias_64x64x16"}));
  EXPECT_EQ(kernels_of_fc1(8192),
            (std::vector<std::string>{"linear_zero_f32", "linear_f32_nk_bias_128x128x32_wgmma_pp"}));
  const auto when = [&](int index) {
    for (const BundleLaunch& launch : bundle.launches) {
      if (launch.node == "fc1" && launch.index == index) return launch.when.str();
    }
    return std::string("none");
  };
  EXPECT_EQ(when(0), "le(B, 1)");
  EXPECT_EQ(when(1), "le(2, B)*le(B, 4)");
  EXPECT_EQ(when(4), "le(17, B)*le(ceil_div(B, 128)*2, 32)");
  EXPECT_EQ(when(6), "le(17, B)*le(33, ceil_div(B, 128)*2)");
}

TEST_F(OneBundleManyGpus, ElementwiseGridsAreOneWaveOfTheBoundDevice) {
  const Bundle bundle = compile(
      "name: ew\n"
      "dims:\n"
      "  B: {min: 1, max: 4096, default: 1}\n"
      "inputs:\n"
      "  x: {dtype: f32, shape: [B, 4096]}\n"
      "  h: {dtype: bf16, shape: [B, 4096]}\n"
      "nodes:\n"
      "  - {name: a, op: relu, inputs: [x]}\n"
      "  - {name: b, op: silu, inputs: [h]}\n"
      "outputs: [a, b]\n",
      true);
  // No literal SM count: the grids are expressions over SMS.
  for (const BundleLaunch& launch : bundle.launches) {
    EXPECT_NE(launch.grid[0].str().find("SMS"), std::string::npos) << launch.grid[0].str();
  }
  for (const DeviceFacts& device : kDevices) {
    for (const int64_t batch : {1, 64, 1000}) {
      SCOPED_TRACE(fmt::format("{} SMs, B={}", device.sms, batch));
      const BoundBundle bound = bound_for(bundle, {fmt::format("B={}", batch)}, device);
      ASSERT_EQ(bound.launches.size(), 2u);
      // 256 threads of 16-byte vectors (4 f32, 8 bf16) a block, at most 8 blocks on each SM.
      const int64_t elements = batch * 4096;
      EXPECT_EQ(bound.launches[0].grid[0], std::min((elements + 1023) / 1024, 8 * device.sms));
      EXPECT_EQ(bound.launches[1].grid[0], std::min((elements + 2047) / 2048, 8 * device.sms));
    }
  }
}

TEST_F(OneBundleManyGpus, TransformerBlockWgmmaKernelsAreOneBlockAnSmWhenTheyHaveTheWork) {
  const Bundle bundle = compile(std::string(TEENY_SOURCE_DIR) + "/graphs/transformer_block_bf16.yaml");
  int persistent = 0;
  for (const DeviceFacts& device : kDevices) {
    for (const std::vector<std::string>& binds :
         {std::vector<std::string>{"B=1", "S=128"}, std::vector<std::string>{"B=64", "S=512"}}) {
      SCOPED_TRACE(fmt::format("{} SMs, {} {}", device.sms, binds[0], binds[1]));
      const BoundBundle bound = bound_for(bundle, binds, device);
      for (const BoundLaunch& launch : bound.launches) {
        const std::string& kernel = bundle.kernels[launch.kernel].name;
        if (kernel.find("_wgmma") == std::string::npos) continue;
        ++persistent;
        // Persistent GEMMs of 128x128 output tiles and attention of 128-query items: a block per
        // tile or item, at most one on each SM.
        const bool attention = kernel.rfind("sdpa_", 0) == 0;
        if (!attention) {
          ASSERT_NE(kernel.find("_128x128x"), std::string::npos) << kernel;
        }
        const int64_t tiles = attention ? arg_value(launch, "N") * ((arg_value(launch, "Sq") + 127) / 128)
                                        : (arg_value(launch, "M") + 127) / 128 * ((arg_value(launch, "N") + 127) / 128);
        EXPECT_EQ(launch.grid[0], std::min(tiles, device.sms)) << launch.label();
        if (binds[0] == "B=64") {
          EXPECT_EQ(launch.grid[0], device.sms) << launch.label() << ": every SM busy";
        }
      }
    }
  }
  // q, k, v, proj, fc, fc_proj and the attention at two bindings on three GPUs
  EXPECT_EQ(persistent, 3 * 2 * 7);
}

// ---- inspect ----------------------------------------------------------------------------------

TEST_F(OneBundleManyGpus, InspectEvaluatesForTheGivenSmCount) {
  ScratchDir dir;
  write_bundle(compile(std::string(TEENY_SOURCE_DIR) + "/graphs/transformer_block_bf16.yaml"), dir.str("tb.teeny"));
  for (const int sms : {132, 114, 78}) {
    testing::Command table = testing::run_teeny(
        fmt::format("inspect {} --bind B=64 --bind S=512 --device-sms {} --node q", dir.str("tb.teeny"), sms));
    ASSERT_EQ(table.exit_code, 0) << table.err;
    EXPECT_NE(table.out.find(fmt::format("device: SMS={} (--device-* flags)\n", sms)), std::string::npos) << table.out;
    EXPECT_NE(table.out.find(fmt::format("grid [min(ceil_div(B*S, 128)*6, SMS) = {}, 1, 1]", sms)), std::string::npos)
        << table.out;
  }
  testing::Command json =
      testing::run_teeny(fmt::format("inspect {} --device-sms 78 --node q --format json", dir.str("tb.teeny")));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json view = nlohmann::json::parse(json.out);
  EXPECT_EQ(view["device"]["symbols"], (nlohmann::json{{"SMS", 78}}));
  EXPECT_EQ(view["nodes"][0]["launches"][2]["grid"][0],
            (nlohmann::json{{"expr", "min(ceil_div(B*S, 128)*6, SMS)"}, {"value", 6}}));  // B=1, S=128: 6 tiles
}

TEST_F(OneBundleManyGpus, InspectWithoutADeviceKeepsGridsSymbolicAndSaysHow) {
  void* driver = dlopen(cuda::kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (driver) {
    dlclose(driver);
    GTEST_SKIP() << "this machine has a CUDA driver: inspect binds its GPU's facts";
  }
  ScratchDir dir;
  write_bundle(compile(std::string(TEENY_SOURCE_DIR) + "/graphs/transformer_block_bf16.yaml"), dir.str("tb.teeny"));
  testing::Command table = testing::run_teeny(fmt::format("inspect {} --node q", dir.str("tb.teeny")));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("device: none (no GPU found): expressions over SMS stay symbolic; --device-sms N, "
                           "--device-smem BYTES and --device-l2 BYTES evaluate them\n"),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("grid [min(ceil_div(B*S, 128)*6, SMS), 1, 1]"), std::string::npos) << table.out;
  testing::Command json = testing::run_teeny(fmt::format("inspect {} --node q --format json", dir.str("tb.teeny")));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json view = nlohmann::json::parse(json.out);
  EXPECT_EQ(view["device"],
            (nlohmann::json{{"source", nullptr}, {"symbols", nlohmann::json::object()}, {"unbound", {"SMS"}}}));
  EXPECT_EQ(view["nodes"][0]["launches"][2]["grid"][0],
            (nlohmann::json{{"expr", "min(ceil_div(B*S, 128)*6, SMS)"}, {"needs", {"SMS"}}}));
}

// ---- run hints ops declare -----------------------------------------------------------------

TEST_F(OneBundleManyGpus, EmbeddingIdsAreBoundedByTheSmallestTable) {
  const Bundle bundle = compile(
      "name: ids\n"
      "dims:\n"
      "  B: {min: 1, max: 64, default: 32}\n"
      "inputs:\n"
      "  ids: {dtype: i32, shape: [B, 8]}\n"
      "nodes:\n"
      "  - {name: big, op: embedding, inputs: [ids], attrs: {num_embeddings: 50, dim: 4}}\n"
      "  - {name: small, op: embedding, inputs: [ids], attrs: {num_embeddings: 30, dim: 4}}\n"
      "  - {name: sum, op: add, inputs: [big, small]}\n"
      "outputs: [sum]\n",
      true);
  EXPECT_EQ(bundle.tensor("ids").id_bound, 30);
  EXPECT_EQ(bundle.tensor("big").id_bound, 0);
  const BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "ids");
  const HostTensor ids = random_input(bound.tensor("ids"), 4);
  EXPECT_EQ(*std::min_element(ids.data.begin(), ids.data.end()), 0);
  EXPECT_EQ(*std::max_element(ids.data.begin(), ids.data.end()), 29);  // 256 draws reach the top
}

TEST_F(OneBundleManyGpus, BatchNormDeclaresAPositiveVarianceAndSkipsPyTorchsCounter) {
  // Unfused and fused (conv2d -> batchnorm2d -> silu becomes conv2d_bn_silu, whose params keep
  // the batch norm's names).
  const Bundle bundle = compile(
      "name: bn\n"
      "dims:\n"
      "  B: {min: 1, max: 4, default: 1}\n"
      "inputs:\n"
      "  x: {dtype: f32, shape: [B, 4, 8, 8]}\n"
      "nodes:\n"
      "  - {name: bn, op: batchnorm2d, inputs: [x]}\n"
      "  - {name: conv, op: conv2d, inputs: [bn], attrs: {out_channels: 4, kernel_size: 1, bias: false}}\n"
      "  - {name: bn2, op: batchnorm2d, inputs: [conv]}\n"
      "  - {name: act, op: silu, inputs: [bn2]}\n"
      "outputs: [act]\n",
      true);
  for (const std::string node : {"bn", "bn2"}) {
    SCOPED_TRACE(node);
    const auto param = [&](const std::string& slot) -> const BundleParam& {
      auto it = std::find_if(bundle.params.begin(), bundle.params.end(),
                             [&](const BundleParam& p) { return p.name == node + "." + slot; });
      if (it == bundle.params.end()) throw std::runtime_error("no param " + node + "." + slot);
      return *it;
    };
    EXPECT_EQ(param("running_var").hints.random_range, (std::array<double, 2>{0.5, 1.5}));
    EXPECT_EQ(param("running_mean").hints.unused_state, std::vector<std::string>{"num_batches_tracked"});
    EXPECT_FALSE(param("weight").hints.random_range.has_value());
  }
  EXPECT_NE(std::find_if(bundle.nodes.begin(), bundle.nodes.end(),
                         [](const BundleNode& n) { return n.op == "fused.conv2d"; }),
            bundle.nodes.end())
      << "the second batch norm is fused";

  // A PyTorch state_dict carries both counters; they load as nothing.
  ScratchDir dir;
  std::map<std::string, HostTensor> weights;
  const BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "bn");
  for (const BoundParam& p : bound.params) {
    if (p.init == ParamInit::kTrained) weights[p.name] = random_param(p, 1);
  }
  weights["bn.num_batches_tracked"] = HostTensor{DType::kI32, {}, {7}};
  weights["bn2.num_batches_tracked"] = HostTensor{DType::kI32, {}, {7}};
  write_safetensors(dir.str("w.safetensors"), weights);
  DataOptions options;
  options.weights_path = dir.str("w.safetensors");
  const RunData data = prepare_data(bound, options);
  EXPECT_EQ(data.params.count("bn.num_batches_tracked"), 0u);
  EXPECT_EQ(data.params.at("bn2.running_var").data, weights.at("bn2.running_var").data);
  for (double v : data.params.at("bn.running_var").data) {
    EXPECT_GE(v, 0.5);
    EXPECT_LT(v, 1.5);
  }
}

}  // namespace
}  // namespace teeny
