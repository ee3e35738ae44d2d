// Every example graph in graphs/ and every op's conformance graphs compile with the built-in
// ops, pass verification, and give a structurally sound bundle (golden-free checks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "core/bundle.h"
#include "core/compile.h"
#include "core/graph.h"
#include "core/launch_graph.h"
#include "core/ptx.h"
#include "ops/ops.h"
#include "tests/conformance_variants.h"
#include "tests/launch_order_check.h"
#include "tests/op_test_util.h"
#include "tests/test_compile_util.h"

namespace teeny {
namespace {

namespace fs = std::filesystem;
using op_testing::registry;
using testing::ScratchDir;

// The suite's NVRTC cache: TEENY_TEST_NVRTC_CACHE where set (.ci/run points both of its builds'
// test runs at one, so the sanitizer build's reuses the kernels the g++ build's compiled: NVRTC is
// not what it checks, and compiling every op's conformance graphs twice costs minutes), else a
// scratch directory of this process.
CompileOptions suite_options() {
  static ScratchDir cache;
  CompileOptions options;
  const char* shared = std::getenv("TEENY_TEST_NVRTC_CACHE");
  options.cache_dir = shared != nullptr && *shared != '\0' ? shared : cache.str();
  options.jobs = 2;
  return options;
}

// Checks that hold for any correct bundle of `graph`.
void check_structure(const Graph& graph, const Bundle& b) {
  std::set<std::string> dims;
  for (const DimDecl& d : graph.dims) dims.insert(d.name);
  // Launch expressions may also use the device symbols; params may not.
  auto check_expr = [&](const Expr& e, const std::string& what, bool device_symbols_allowed = true) {
    for (const std::string& dim : e.dims()) {
      EXPECT_TRUE(dims.count(dim) || (device_symbols_allowed && is_device_symbol(dim)))
          << what << " uses unknown dim " << dim;
    }
  };
  const Bindings defaults = graph.default_bindings();
  // The default dims on GPUs of the arch with 132, 114 and 78 SMs.
  std::vector<Bindings> on_devices;
  for (const int64_t sms : {132, 114, 78}) {
    on_devices.push_back(defaults);
    for (const auto& symbol : device_bindings(DeviceFacts{sms, 227 * 1024, 50 << 20})) on_devices.back().insert(symbol);
  }

  ASSERT_EQ(b.nodes.size(), graph.nodes.size());
  const auto scratch =
      std::count_if(b.tensors.begin(), b.tensors.end(), [](const BundleTensor& t) { return t.scratch; });
  // An update node (training) writes params in place and has no output tensor.
  const auto updates =
      std::count_if(graph.nodes.begin(), graph.nodes.end(), [](const Node& n) { return n.op->update; });
  ASSERT_EQ(b.tensors.size() - scratch, graph.inputs.size() + graph.nodes.size() - updates);
  for (const std::string& out : graph.outputs) EXPECT_NO_THROW(b.tensor(out));

  std::set<std::string> params;
  for (const BundleParam& p : b.params) {
    EXPECT_TRUE(params.insert(p.name).second) << "duplicate param " << p.name;
    EXPECT_EQ(p.name, p.node + "." + p.slot);
    for (const Expr& e : p.shape) check_expr(e, "param " + p.name, false);
    if (p.init == ParamInit::kHost) {
      EXPECT_LE(p.offset + p.size, b.param_bytes.size()) << p.name;
      EXPECT_EQ(p.size, static_cast<uint64_t>(product(p.shape).eval(defaults)) * dtype_size(p.dtype)) << p.name;
    }
  }

  std::vector<std::vector<PtxEntry>> entries;
  for (const BundleKernel& k : b.kernels) {
    entries.push_back(parse_ptx_entries(k.ptx, k.name));
    EXPECT_NE(find_visible_entry(entries.back(), k.entry), nullptr) << k.entry;
    EXPECT_EQ(k.entry, k.name + "_entry_point");
    // Named relative to the project, so a bundle does not depend on where teeny was built.
    EXPECT_EQ(k.source_file.rfind("ops/", 0), 0u) << k.source_file;
  }

  size_t node_pos = 0;
  for (const BundleLaunch& l : b.launches) {
    SCOPED_TRACE(fmt::format("node {} launch {}", l.node, l.index));
    // Launches follow node order.
    while (node_pos < b.nodes.size() && b.nodes[node_pos].name != l.node) ++node_pos;
    ASSERT_LT(node_pos, b.nodes.size()) << "launch out of node order";
    const PtxEntry& entry = *find_visible_entry(entries[l.kernel], b.kernels[l.kernel].entry);
    ASSERT_EQ(l.args.size(), entry.params.size());
    int end = 0;
    for (size_t i = 0; i < l.args.size(); ++i) {
      const BundleArg& a = l.args[i];
      EXPECT_EQ(a.size, entry.params[i].size);
      EXPECT_EQ(a.offset % arg_layout(a.kind).align, 0) << a.name << " misaligned";
      EXPECT_GE(a.offset, end) << a.name << " overlaps the previous argument";
      end = a.offset + a.size;
      if (a.kind == ArgKind::kParam || a.kind == ArgKind::kParamOut) {
        EXPECT_TRUE(params.count(a.tensor)) << a.tensor;
      } else if (a.kind == ArgKind::kInput || a.kind == ArgKind::kOutput) {
        EXPECT_NO_THROW(b.tensor(a.tensor)) << a.tensor;
      } else if (a.kind == ArgKind::kScratch) {
        EXPECT_EQ(b.tensor(a.tensor).producer, l.node) << a.tensor;
      }
      if (a.kind == ArgKind::kOutput) {
        EXPECT_EQ(a.tensor, l.node);
      }
      check_expr(a.value, a.name);
    }
    for (const Bindings& bindings : on_devices) {
      for (int d = 0; d < 3; ++d) {
        check_expr(l.grid[d], "grid");
        EXPECT_GE(l.grid[d].eval(bindings), 1) << "grid " << d << " = " << l.grid[d].str();
      }
      EXPECT_GE(l.bytes.eval(bindings), 1) << "cost bytes " << l.bytes.str();
      EXPECT_GE(l.flops.eval(bindings), 0) << "cost flops " << l.flops.str();
    }
  }
  for (const BundleNode& n : b.nodes) {
    if (n.role == NodeRole::kUpdate) continue;  // it writes params in place: no tensor, always launched
    const BundleTensor& t = b.tensor(n.name);
    bool launched =
        std::any_of(b.launches.begin(), b.launches.end(), [&](const BundleLaunch& l) { return l.node == n.name; });
    EXPECT_EQ(launched, t.alias_of.empty()) << n.name << ": a node either launches kernels or is a view";
  }
}

// Every two launches of `bundle` (default dims, an H200's facts) where one writes bytes the other
// reads or writes, found by brute force, are ordered by the stream plan its CUDA graphs use.
void check_launch_order(const Bundle& bundle) {
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "b.teeny");
  bind_launches(bound, DeviceFacts{132, 227 * 1024, 50 << 20});
  std::vector<std::vector<LaunchAccess>> accesses;
  for (const BoundLaunch& launch : bound.launches) accesses.push_back(launch_accesses(bound, launch));
  const StreamPlan plan = plan_streams(launch_dependencies(accesses), 8);
  const std::vector<std::vector<bool>> before = testing::ordered_before(plan);
  auto conflict = [](const LaunchAccess& a, const LaunchAccess& b) {
    return a.space == b.space && a.begin < b.end && b.begin < a.end && (a.write || b.write);
  };
  for (size_t j = 0; j < accesses.size(); ++j)
    for (size_t i = 0; i < j; ++i)
      for (const LaunchAccess& a : accesses[i])
        for (const LaunchAccess& b : accesses[j])
          if (conflict(a, b)) {
            ASSERT_TRUE(before[j][i]) << bound.launches[i].label() << " before " << bound.launches[j].label();
          }
}

std::vector<std::string> example_graphs() {
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(fs::path(TEENY_SOURCE_DIR) / "graphs")) {
    if (entry.path().extension() == ".yaml") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST(CompileGraphs, EveryExampleGraphCompilesAndRoundTrips) {
  std::vector<std::string> paths = example_graphs();
  ASSERT_FALSE(paths.empty());
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    try {
      Graph graph = load_graph(path, registry());
      CompileOptions options = suite_options();
      options.fuse = false;  // so nodes map one to one; fusion has its own tests
      Bundle bundle = compile_graph(graph, registry(), options);
      // The graph as compiled: a training graph's backward and update nodes included.
      check_structure(prepare_graph(graph, registry(), options), bundle);

      ScratchDir dir;
      write_bundle(bundle, dir.str("b.teeny"));
      Bundle loaded = read_bundle(dir.str("b.teeny"));
      EXPECT_EQ(bundle_to_json(loaded), bundle_to_json(bundle));
    } catch (const Error& e) {
      ADD_FAILURE() << e.render();
    }
  }
}

TEST(CompileGraphs, ExampleGraphsCompileWithFusion) {
  for (const std::string& path : example_graphs()) {
    SCOPED_TRACE(path);
    try {
      Graph graph = load_graph(path, registry());
      Bundle bundle = compile_graph(graph, registry(), suite_options());
      EXPECT_FALSE(bundle.launches.empty());
      check_launch_order(bundle);
    } catch (const Error& e) {
      ADD_FAILURE() << e.render();
    }
  }
}

// --arch reaches the ops: on sm_90 the bf16 block's wide linears are wgmma kernels compiled for
// sm_90a (PTX target and the bundle's per-kernel target agree); on sm_80 nothing is.
TEST(CompileGraphs, ArchPicksArchSpecificKernelsAndTheirTarget) {
  const Graph graph = load_graph(std::string(TEENY_SOURCE_DIR) + "/graphs/transformer_block_bf16.yaml", registry());
  for (const std::string arch : {"sm_90", "sm_80"}) {
    SCOPED_TRACE(arch);
    CompileOptions options = suite_options();
    options.arch = arch;
    const Bundle bundle = compile_graph(graph, registry(), options);
    int specific = 0;
    for (const BundleKernel& k : bundle.kernels) {
      const bool wgmma = k.name.find("_wgmma") != std::string::npos;
      specific += wgmma;
      EXPECT_EQ(k.target, wgmma ? arch + "a" : arch) << k.name;
      EXPECT_NE(k.ptx.find(".target " + k.target), std::string::npos) << k.name;
    }
    // Its six linears all load by TMA (16-byte rows) on the pingpong kernel: q, k, v share the
    // plain one, proj and fc_proj (K = 768 and 3072) the one adding the residual, fc the GELU one;
    // and its attention runs the wgmma kernel.
    EXPECT_EQ(specific, arch == "sm_90" ? 4 : 0);
  }
}

// fuse_attention_heads on the bf16 block: its three split_heads, sdpa and merge_heads become one
// fused.sdpa_heads node running sdpa's wgmma kernel; --no-fuse keeps all sixteen nodes.
TEST(CompileGraphs, TransformerBlockFusesAttentionHeads) {
  const Graph graph = load_graph(std::string(TEENY_SOURCE_DIR) + "/graphs/transformer_block_bf16.yaml", registry());
  CompileOptions options = suite_options();
  CompileStats stats;
  const Bundle fused = compile_graph(graph, registry(), options, &stats);
  options.fuse = false;
  const Bundle plain = compile_graph(graph, registry(), options);
  // + fuse_linear_epilogue: proj + res1, fc + act, fc_proj + out.
  EXPECT_EQ(stats.passes_applied, 4);
  EXPECT_EQ(plain.nodes.size(), 16u);
  EXPECT_EQ(fused.nodes.size(), 9u);
  EXPECT_EQ(fused.launches.size() + 7, plain.launches.size());
  const auto merged =
      std::find_if(fused.nodes.begin(), fused.nodes.end(), [](const BundleNode& n) { return n.name == "merged"; });
  ASSERT_NE(merged, fused.nodes.end());
  EXPECT_EQ(merged->op, "fused.sdpa_heads");
  EXPECT_EQ(merged->fused_from, (std::vector<std::string>{"qh", "kh", "vh", "attn", "merged"}));
  std::vector<std::string> kernels;
  for (const BundleLaunch& l : fused.launches)
    if (l.node == "merged") kernels.push_back(fused.kernels.at(l.kernel).name);
  // The wgmma kernel from 17 query rows on, the decode path and its combine up to 16.
  EXPECT_EQ(kernels, (std::vector<std::string>{"sdpa_bf16_d64_causal_wgmma", "sdpa_bf16_d64_causal_decode_mma",
                                               "sdpa_bf16_d64_decode_combine"}));
}

// Each op's conformance graphs cover its kernel variants and dtypes: all must compile and verify.
TEST(CompileGraphs, EveryOpsConformanceGraphsCompile) {
  int compiled = 0;
  for (const OpDef& op : registry().ops()) {
    if (!op.conformance_cases) continue;
    for (const ConformanceCase& c : op.conformance_cases()) {
      SCOPED_TRACE(fmt::format("{} [{}]", op.name, c.label));
      try {
        Graph graph = parse_graph(c.graph, fmt::format("{}.yaml", op.name), registry());
        CompileOptions options = suite_options();
        options.fuse = false;
        // The graph as compiled: a training case's backward and update nodes included.
        check_structure(prepare_graph(graph, registry(), options), compile_graph(graph, registry(), options));
        ++compiled;
      } catch (const Error& e) {
        ADD_FAILURE() << e.render();
      }
    }
  }
  EXPECT_GT(compiled, 0);
}

// Every kernel variant of a tunable op compiles and verifies on its conformance graphs
// (tests/conformance_variants.h; GpuConformance runs them), with the fusion passes the GPU test
// runs them with.
TEST(CompileGraphs, EveryVariantOfATunableOpCompiles) {
  int compiled = 0;
  for (const OpDef& op : registry().ops()) {
    if (!op.conformance_cases || !op.tuning.variants) continue;
    for (const ConformanceCase& c : op.conformance_cases()) {
      const Graph graph = parse_graph(c.graph, fmt::format("{}.yaml", op.name), registry());
      for (const op_testing::VariantCase& v : op_testing::variant_cases(op, graph, c.bindings, suite_options())) {
        SCOPED_TRACE(fmt::format("{} [{}] variant {}", op.name, c.label, v.variant));
        try {
          CompileOptions options = suite_options();
          options.variants = v.nodes;
          options.fixed = v.fixed;
          check_structure(prepare_graph(graph, registry(), options), compile_graph(graph, registry(), options));
          ++compiled;
        } catch (const Error& e) {
          ADD_FAILURE() << e.render();
        }
      }
    }
  }
  EXPECT_GT(compiled, 0);
}

}  // namespace
}  // namespace teeny
