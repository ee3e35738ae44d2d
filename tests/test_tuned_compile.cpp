// Tuned lowering (core/lowering_choice.h): compile builds a tuning record's variant exactly where
// the record's ranges hold and the op's heuristic everywhere else; records a node cannot run are
// passed over with the reason; a variant named for a node is built at every binding. Also the
// problems `teeny tune` finds in a graph and the variants it measures.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/binding.h"
#include "core/bundle.h"
#include "core/compile.h"
#include "core/graph.h"
#include "core/host_executor.h"
#include "core/run_data.h"
#include "core/tune.h"
#include "tests/file_test_util.h"
#include "tests/op_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using op_testing::registry;

const std::string& cache_dir() {
  static testing::ScratchDir dir;
  return dir.path().native();
}

// y = linear(x [M, 64], 200) in f32, M symbolic.
Graph linear_graph() {
  return parse_graph(
      "name: g\ndims:\n  M: {min: 1, max: 4096, default: 1}\ninputs:\n  x: {dtype: f32, shape: [M, 64]}\n"
      "nodes:\n  - {name: y, op: linear, inputs: [x], attrs: {out_features: 200}}\noutputs: [y]\n",
      "g.yaml", registry());
}

TuningRecord record(const std::string& variant, DimRange m) {
  return {"linear", DType::kF32, {{"M", m}, {"N", {200, 200}}, {"K", {64, 64}}}, variant, "cold", {}};
}

TuningFile tuning_file(std::vector<TuningRecord> records) {
  return {"NVIDIA H200", "sm_90", std::move(records), "t.json"};
}

Bundle compile_with(const std::optional<TuningFile>& tuning, std::map<std::string, std::string> variants = {}) {
  CompileOptions options;
  options.cache_dir = cache_dir();
  options.tuning = tuning;
  options.variants = std::move(variants);
  return compile_graph(linear_graph(), registry(), options);
}

// The kernels of the launches that run at M = m (their `when` nonzero).
std::vector<std::string> kernels_at(const Bundle& bundle, int64_t m) {
  std::vector<std::string> out;
  for (const BundleLaunch& launch : bundle.launches) {
    if (launch.when.eval({{"M", m}}) != 0) out.push_back(bundle.kernels[launch.kernel].name);
  }
  return out;
}

using Kernels = std::vector<std::string>;

TEST(TunedCompile, RecordsApplyInTheirRangesAndTheHeuristicElsewhere) {
  const Bundle bundle = compile_with(tuning_file({record("gemv_m4", {1, 3}), record("64x64x16", {100, 200})}));
  EXPECT_EQ(kernels_at(bundle, 1), Kernels{"linear_f32_gemv_m4_bias"});
  EXPECT_EQ(kernels_at(bundle, 3), Kernels{"linear_f32_gemv_m4_bias"});
  // M = 4 has no record: the heuristic's own kernel for up to 4 rows.
  EXPECT_EQ(kernels_at(bundle, 4), Kernels{"linear_f32_gemv_m4_bias"});
  EXPECT_EQ(kernels_at(bundle, 2), Kernels{"linear_f32_gemv_m4_bias"});
  EXPECT_EQ(kernels_at(bundle, 16), Kernels{"linear_f32_gemv_m16_bias"});
  // An f32 GEMM may split K, so a zeroing launch comes first (one element where it does not).
  EXPECT_EQ(kernels_at(bundle, 100), (Kernels{"linear_zero_f32", "linear_f32_nk_bias_64x64x16"}));
  EXPECT_EQ(kernels_at(bundle, 200), (Kernels{"linear_zero_f32", "linear_f32_nk_bias_64x64x16"}));
  // Outside both records the heuristic's GEMM runs: on CUDA cores for a small batch (under 33 tiles
  // of 3xTF32, 2 a row block of 128), else 3xTF32.
  EXPECT_EQ(kernels_at(bundle, 99), (Kernels{"linear_zero_f32", "linear_f32_nk_bias_64x64x16"}));
  EXPECT_EQ(kernels_at(bundle, 201), (Kernels{"linear_zero_f32", "linear_f32_nk_bias_64x64x16"}));
  EXPECT_EQ(kernels_at(bundle, 4224), (Kernels{"linear_zero_f32", "linear_f32_nk_bias_128x128x32_wgmma_pp"}));

  ASSERT_EQ(bundle.nodes.size(), 1u);
  const std::vector<BundleVariant>& variants = bundle.nodes[0].variants;
  ASSERT_EQ(variants.size(), 3u);
  EXPECT_EQ(variants[0].variant, "gemv_m4");
  EXPECT_EQ(variants[0].why, "tuned: t.json records[0] (NVIDIA H200, M=1..3, N=200, K=64, L2 cold)");
  EXPECT_EQ(variants[1].variant, "64x64x16");
  EXPECT_EQ(variants[2].variant, "");
  EXPECT_EQ(variants[2].why, "no record in t.json applies");
  EXPECT_EQ(bundle.tuning, "t.json");
}

TEST(TunedCompile, TheReasonQuotesTheWinnersTimeAmongTheMeasuredCandidates) {
  TuningRecord measured = record("64x64x16", {100, 100});
  measured.candidates = {{"64x64x16", 12.345, 30, ""}, {"128x128x8", 20.0, 30, ""}, {"gemv_m1", 0, 0, "compile: x"}};
  const Bundle bundle = compile_with(tuning_file({measured}));
  EXPECT_EQ(bundle.nodes[0].variants.at(0).why,
            "tuned: t.json records[0] (NVIDIA H200, M=100, N=200, K=64, L2 cold: 12.35 us, fastest of 2 measured)");
}

TEST(TunedCompile, WithoutRecordsTheBundleIsTheHeuristicOne) {
  const Bundle tuned = compile_with(tuning_file({}));
  const Bundle plain = compile_with(std::nullopt);
  ASSERT_EQ(tuned.launches.size(), plain.launches.size());
  for (size_t i = 0; i < plain.launches.size(); ++i) {
    EXPECT_EQ(tuned.kernels[tuned.launches[i].kernel].name, plain.kernels[plain.launches[i].kernel].name);
    EXPECT_EQ(tuned.launches[i].when, plain.launches[i].when);
  }
  EXPECT_EQ(tuned.nodes[0].variants.at(0).why, "no record in t.json for linear f32 M=M, N=200, K=64");
  EXPECT_EQ(plain.nodes[0].variants.at(0).why, "no tuning file");
}

TEST(TunedCompile, RecordsTheNodeCannotRunArePassedOverWithTheReason) {
  const Bundle bundle = compile_with(tuning_file({record("gemv_m8", {1, 64}), record("256x256x8", {100, 100})}));
  const std::vector<BundleVariant>& variants = bundle.nodes[0].variants;
  ASSERT_EQ(variants.size(), 1u);
  EXPECT_EQ(variants[0].why,
            "no record in t.json for linear f32 M=M, N=200, K=64; t.json records[0] not used: 'gemv_m8' runs M in "
            "[1, 8] only; t.json records[1] not used: '256x256x8' is not a variant of this node (its variants: "
            "gemv_m1, gemv_m4, gemv_m8, gemv_m16, 64x64x16, 128x128x8, 128x128x32_wgmma_pp)");
  EXPECT_EQ(kernels_at(bundle, 100), (Kernels{"linear_zero_f32", "linear_f32_nk_bias_64x64x16"}));
}

TEST(TunedCompile, AVariantNamedForTheNodeRunsAtEveryBinding) {
  const Bundle bundle = compile_with(std::nullopt, {{"y", "128x128x8"}});
  for (int64_t m : {1, 17, 4096}) {
    EXPECT_EQ(kernels_at(bundle, m), (Kernels{"linear_zero_f32", "linear_f32_nk_bias_128x128x8"})) << "M=" << m;
  }
  try {
    compile_with(std::nullopt, {{"y", "gemv_m2"}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "node 'y': op 'linear', linear has no variant 'gemv_m2' here (its variants: gemv_m1, gemv_m4, gemv_m8, "
              "gemv_m16, 64x64x16, 128x128x8, 128x128x32_wgmma_pp)");
  }
}

TEST(TunedCompile, BundleKeepsTheChoicesAcrossWriteAndRead) {
  const Bundle bundle = compile_with(tuning_file({record("gemv_m4", {1, 3})}));
  testing::ScratchDir dir;
  const std::string path = (dir.path() / "b.teeny").string();
  write_bundle(bundle, path);
  const Bundle read = read_bundle(path);
  EXPECT_EQ(read.tuning, "t.json");
  ASSERT_EQ(read.nodes[0].variants.size(), bundle.nodes[0].variants.size());
  for (size_t i = 0; i < read.nodes[0].variants.size(); ++i) {
    EXPECT_EQ(read.nodes[0].variants[i].variant, bundle.nodes[0].variants[i].variant);
    EXPECT_EQ(read.nodes[0].variants[i].why, bundle.nodes[0].variants[i].why);
    EXPECT_EQ(read.nodes[0].variants[i].when, bundle.nodes[0].variants[i].when);
  }
}

TEST(TuneProblems, AlikeNodesShareAProblemAndRowLimitsPickTheVariants) {
  Graph graph = parse_graph(
      "name: g\ndims:\n  B: {min: 1, max: 64, default: 2}\ninputs:\n  x: {dtype: bf16, shape: [B, 3, 768]}\n"
      "nodes:\n"
      "  - {name: q, op: linear, inputs: [x], attrs: {out_features: 768}}\n"
      "  - {name: k, op: linear, inputs: [x], attrs: {out_features: 768}}\n"
      "  - {name: up, op: linear, inputs: [k], attrs: {out_features: 1000}}\n"
      "  - {name: act, op: relu, inputs: [up]}\n"
      "outputs: [q, act]\n",
      "g.yaml", registry());
  CompileOptions options;
  options.fixed = {{"B", 2}};
  const Graph prepared = prepare_graph(std::move(graph), registry(), options);
  const std::vector<TuneProblem> problems = tune_problems(prepared);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].op, "linear");
  EXPECT_EQ(problems[0].nodes, (std::vector<std::string>{"q", "k"}));
  EXPECT_EQ(problems[0].dims, (std::vector<std::pair<std::string, int64_t>>{{"M", 6}, {"N", 768}, {"K", 768}}));
  // 6 rows: the 16-bit small-M kernels (up to 8 and 16 rows) and every tile; rows of 768 bf16
  // are 16-byte multiples, so the TMA tile is among them.
  EXPECT_EQ(problems[0].variants,
            (std::vector<std::string>{"gemv_m8", "gemv_m16", "64x64x32", "128x128x32", "128x128x64_wgmma_pp",
                                      "128x128x64_wgmma_pp_tma", "128x192x64_wgmma", "128x256x64_wgmma"}));
  // The relu fused into the second linear's epilogue: its own op.
  EXPECT_EQ(problems[1].op, "fused.linear");
  EXPECT_EQ(problems[1].nodes, (std::vector<std::string>{"act"}));
}

TEST(TuneProblems, MatmulIsTunedOverItsTilesWithTheBatchAsADim) {
  Graph graph = parse_graph(
      "name: g\ninputs:\n  a: {dtype: f16, shape: [3, 2, 40, 64]}\n  b: {dtype: f16, shape: [2, 64, 96]}\n"
      "nodes:\n  - {name: c, op: matmul, inputs: [a, b]}\noutputs: [c]\n",
      "g.yaml", registry());
  const Graph prepared = prepare_graph(std::move(graph), registry(), {});
  const std::vector<TuneProblem> problems = tune_problems(prepared);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].dims,
            (std::vector<std::pair<std::string, int64_t>>{{"Batch", 6}, {"M", 40}, {"N", 96}, {"K", 64}}));
  EXPECT_EQ(problems[0].variants, (std::vector<std::string>{"64x64x32", "128x128x32"}));
}

// Attention is tuned over its tensor-core kernels (mma.sync at each blocks an SM, and wgmma), for
// sdpa and fused.sdpa_heads alike; an f32 attention has nothing to choose and is no problem. A named variant builds its
// kernel (the decode path's launches stay as they are).
TEST(TuneProblems, AttentionIsTunedOverItsTensorCoreKernels) {
  Graph graph = parse_graph(
      "name: g\ninputs:\n  q: {dtype: bf16, shape: [8, 256, 128]}\n  kv: {dtype: bf16, shape: [2, 256, 128]}\n"
      "  x: {dtype: f32, shape: [4, 64, 17]}\n  h: {dtype: f16, shape: [2, 100, 256]}\n"
      "nodes:\n"
      "  - {name: a, op: sdpa, inputs: [q, kv, kv], attrs: {causal: true, kv_groups: 4}}\n"
      "  - {name: b, op: sdpa, inputs: [x, x, x]}\n"
      "  - {name: c, op: fused.sdpa_heads, inputs: [h, h, h], attrs: {heads: 4}}\n"
      "outputs: [a, b, c]\n",
      "g.yaml", registry());
  const Graph prepared = prepare_graph(std::move(graph), registry(), {});
  const std::vector<TuneProblem> problems = tune_problems(prepared);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].nodes, (std::vector<std::string>{"a"}));
  EXPECT_EQ(problems[0].dims, (std::vector<std::pair<std::string, int64_t>>{{"N", 8}, {"Sq", 256}, {"Skv", 256}}));
  // The mma.sync kernel at the blocks an SM its register cap aims at, and the wgmma kernel.
  EXPECT_EQ(problems[0].variants, (std::vector<std::string>{"mma_b4", "mma_b3", "mma_b2", "wgmma"}));
  EXPECT_EQ(problems[1].op, "fused.sdpa_heads");
  EXPECT_EQ(problems[1].dims, (std::vector<std::pair<std::string, int64_t>>{{"N", 8}, {"Sq", 100}, {"Skv", 100}}));

  CompileOptions options;
  options.cache_dir = cache_dir();
  options.variants = {{"a", "mma_b2"}};
  const Bundle bundle = compile_graph(prepared, registry(), options);
  std::vector<std::string> kernels;
  for (const BundleLaunch& launch : bundle.launches)
    if (launch.node == "a") kernels.push_back(bundle.kernels[launch.kernel].name);
  EXPECT_EQ(kernels, (Kernels{"sdpa_bf16_d128_causal_mma_b2"}));
  // With Sq symbolic the variant's lowering holds the decode path too, with its scratch buffer.
  const Graph symbolic = prepare_graph(
      parse_graph("name: g\ndims:\n  S: {min: 1, max: 4096, default: 1}\ninputs:\n"
                  "  q: {dtype: bf16, shape: [8, S, 64]}\nnodes:\n  - {name: a, op: sdpa, inputs: [q, q, q]}\n"
                  "outputs: [a]\n",
                  "s.yaml", registry()),
      registry(), {});
  const Bundle decoding = compile_graph(symbolic, registry(), options);
  kernels.clear();
  for (const BundleLaunch& launch : decoding.launches) kernels.push_back(decoding.kernels[launch.kernel].name);
  EXPECT_EQ(kernels, (Kernels{"sdpa_bf16_d64_mma_b2", "sdpa_bf16_d64_decode_mma", "sdpa_bf16_d64_decode_combine"}));
  options.variants = {{"b", "mma_b2"}};
  try {
    compile_graph(prepared, registry(), options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "node 'b': op 'sdpa', sdpa has no variant 'mma_b2' here (its variants: none)");
  }
}

// Tune checks attention on sampled rows: each computed with its batch's keys and, under the causal
// mask, its own position, as the whole reference computes it (grouped heads and heads in place
// alike).
TEST(TuneProblems, AttentionsSampledRowsAreThoseOfItsWholeReference) {
  const Graph graph = parse_graph(
      "name: g\ninputs:\n  q: {dtype: f32, shape: [4, 5, 16]}\n  kv: {dtype: f32, shape: [2, 7, 16]}\n"
      "  h: {dtype: f32, shape: [3, 6, 32]}\n"
      "nodes:\n"
      "  - {name: a, op: sdpa, inputs: [q, kv, kv], attrs: {causal: true, kv_groups: 2}}\n"
      "  - {name: b, op: fused.sdpa_heads, inputs: [h, h, h], attrs: {heads: 2, causal: true}}\n"
      "outputs: [a, b]\n",
      "g.yaml", registry());
  CompileOptions options;
  options.cache_dir = cache_dir();
  const Bundle bundle = compile_graph(graph, registry(), options);
  const BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "g");
  DataOptions data_options;
  data_options.fill = ParamFill::kRandom;
  const RunData data = prepare_data(bound, data_options);
  const std::map<std::string, HostTensor> whole = run_host(bound, registry(), data);
  for (size_t node = 0; node < bundle.nodes.size(); ++node) {
    SCOPED_TRACE(bundle.nodes[node].name);
    std::vector<HostTensor> inputs;
    for (const std::string& input : bundle.nodes[node].inputs) inputs.push_back(data.inputs.at(input));
    const std::vector<int64_t> rows = {17, 0, 5, 11, 6};  // out of order, across batches
    const HostTensor sampled = reference_rows(bound, registry(), node, inputs, data.params, rows);
    const HostTensor expected = select_rows(whole.at(bundle.nodes[node].name), rows);
    EXPECT_EQ(sampled.shape, expected.shape);
    EXPECT_EQ(sampled.data, expected.data);
  }
}

// A training graph's backward GEMMs are tuned too: over the tiles each can run and, where its sum
// may split, fixed split counts of at least a k-step each. A weight gradient's sum over the rows
// never runs on 3xTF32, even where the rows are a constant.
TEST(TuneProblems, GradientGemmsAreTunedOverTilesAndSplitCounts) {
  Graph graph = parse_graph(
      "name: g\ndims:\n  B: {min: 1, max: 8192, default: 4096}\n"
      "inputs:\n  x: {dtype: f32, shape: [B, 784]}\n  labels: {dtype: i32, shape: [B]}\n"
      "nodes:\n"
      "  - {name: fc1, op: linear, inputs: [x], attrs: {out_features: 256}}\n"
      "  - {name: act1, op: relu, inputs: [fc1]}\n"
      "  - {name: fc2, op: linear, inputs: [act1], attrs: {out_features: 10}}\n"
      "  - {name: loss, op: cross_entropy, inputs: [fc2, labels]}\n"
      "outputs: [loss]\ntrain:\n  loss: loss\n  optimizer: {type: sgd, lr: 0.1}\n",
      "g.yaml", registry());
  CompileOptions options;
  options.fixed = {{"B", 4096}};
  const Graph prepared = prepare_graph(std::move(graph), registry(), options);
  std::map<std::string, const TuneProblem*> by_node;
  const std::vector<TuneProblem> problems = tune_problems(prepared);
  for (const TuneProblem& problem : problems)
    for (const std::string& node : problem.nodes) by_node[node] = &problem;
  using Dims = std::vector<std::pair<std::string, int64_t>>;
  // fc1's weight gradient, dW = dyᵀ x: 256 x 784 over 4096 rows, on CUDA cores only. The
  // 128x128x8 tile splits at most 512 ways (4096 / 8) and the 64x64x16 one 256.
  const TuneProblem& dweight = *by_node.at("bwd_fc1");
  EXPECT_EQ(dweight.op, "grad.linear_dweight");
  EXPECT_EQ(dweight.dims, (Dims{{"M", 256}, {"N", 784}, {"K", 4096}}));
  std::vector<std::string> expected;
  for (const std::string tile : {"64x64x16", "128x128x8"}) {
    expected.push_back(tile);
    for (int splits : {1, 2, 4, 8, 16, 32, 64, 128}) expected.push_back(fmt::format("{}_split{}", tile, splits));
  }
  EXPECT_EQ(dweight.variants, expected);
  // fc2's input gradient takes relu's derivative in its epilogue (it reads r): never split. Its
  // sum is fc2's 10 outputs, so 3xTF32 may run.
  const TuneProblem& dx = *by_node.at("bwd_act1");
  EXPECT_EQ(dx.op, "grad.linear_dx");
  EXPECT_EQ(dx.dims, (Dims{{"M", 4096}, {"N", 256}, {"K", 10}}));
  EXPECT_EQ(dx.variants, (std::vector<std::string>{"64x64x16", "128x128x8", "128x128x32_wgmma_pp"}));

  // A named split count runs at every binding.
  options.cache_dir = cache_dir();
  options.fixed.clear();
  options.variants = {{"bwd_fc1", "128x128x8_split32"}};
  const Bundle bundle = compile_graph(prepared, registry(), options);
  std::vector<std::string> kernels;
  for (const BundleLaunch& launch : bundle.launches) {
    if (launch.node != "bwd_fc1") continue;
    kernels.push_back(bundle.kernels[launch.kernel].name);
    for (const BundleArg& arg : launch.args) {
      if (arg.name == "splits") {
        EXPECT_EQ(arg.value.eval({}), 32);
      }
    }
  }
  EXPECT_EQ(kernels, (Kernels{"grad_linear_dweight_f32_kn_128x128x8_at_b0", "grad_gemm_sum_splits_f32"}));
}

// A candidate's time is every launch of its node: an f32 linear's zeroing and GEMM, a split
// gradient GEMM and its sum; launches are labelled "v0", "v0#1", ... but summed by their node.
TEST(TuneTimes, ACandidatesTimeSumsEveryLaunchOfItsNode) {
  ProfileRun run;
  run.iterations = 30;
  const std::vector<std::tuple<std::string, std::string, double>> launches = {
      {"p0_v0", "p0_v0", 1.0}, {"p0_v0#1", "p0_v0", 40.5}, {"p0_v1", "p0_v1", 52.0}, {"p0_v1#1", "p0_v1", 3.25}};
  for (const auto& [label, owner, median] : launches) {
    LaunchStats launch;
    launch.facts.node = label;
    launch.facts.owner = owner;
    launch.duration_us.median = median;
    run.launches.push_back(launch);
  }
  const auto times = node_times(run);
  ASSERT_EQ(times.size(), 2u);
  EXPECT_DOUBLE_EQ(times.at("p0_v0").first, 41.5);
  EXPECT_DOUBLE_EQ(times.at("p0_v1").first, 55.25);
  EXPECT_EQ(times.at("p0_v1").second, 30);
}

// ---- the command line --------------------------------------------------------------------

testing::Command teeny(const testing::ScratchDir& dir, const std::string& args) {
  return testing::run_teeny(args, {dir.str(), {{"TEENY_CACHE_DIR", dir.str("cache")}}});
}

const std::string kMnist = std::string(TEENY_SOURCE_DIR) + "/graphs/mnist_mlp.yaml";

TEST(TuneCli, CompileTakesATuningFileForItsArchOrNone) {
  testing::ScratchDir dir;
  testing::spit(dir.str("a80.json"),
                R"({"format": "teeny-tuning", "version": 1, "gpu": "NVIDIA A100", "arch": "sm_80", "records": []})");
  testing::Command wrong = teeny(dir, "compile " + kMnist + " --tuning a80.json");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_EQ(wrong.err,
            "teeny: error: --tuning a80.json: the file's records are for sm_80 (NVIDIA A100), not --arch sm_90\n");
  testing::Command none = teeny(dir, "compile " + kMnist + " --tuning none -o none.teeny");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  testing::Command shown = teeny(dir, "inspect none.teeny --node fc2");
  EXPECT_NE(shown.out.find("  variant (heuristic): no tuning file\n"), std::string::npos) << shown.out;
  testing::Command builtin = teeny(dir, "compile " + kMnist + " -o builtin.teeny");
  ASSERT_EQ(builtin.exit_code, 0) << builtin.err;
  EXPECT_NE(teeny(dir, "inspect builtin.teeny").out.find("tuning: built-in tuning/nvidia-h200.json\n"),
            std::string::npos);
}

TEST(TuneCli, AGraphWithoutTunableNodesIsAnError) {
  testing::ScratchDir dir;
  testing::spit(dir.str("g.yaml"),
                "name: g\ninputs:\n  x: {dtype: f32, shape: [4]}\nnodes:\n  - {name: y, op: relu, inputs: [x]}\n"
                "outputs: [y]\n");
  testing::Command r = teeny(dir, "tune g.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: g.yaml: no node of the graph is tunable\n");
}

}  // namespace
}  // namespace teeny
