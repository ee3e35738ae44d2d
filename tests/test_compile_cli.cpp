// `teeny compile` and `teeny inspect` end to end on graphs/mnist_mlp.yaml: exit codes, the
// summary, the inspection in both formats, --ptx, and errors with their exact text.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/teeny_command.h"
#include "tests/test_compile_util.h"

namespace teeny {
namespace {

using testing::Command;
using testing::ScratchDir;
using testing::slurp;

// Runs teeny in `dir`, with its kernel cache there too.
Command teeny(const ScratchDir& dir, const std::string& args) {
  return testing::run_teeny(args, {dir.str(), {{"TEENY_CACHE_DIR", dir.str("cache")}}});
}

const std::string kMnist = std::string(TEENY_SOURCE_DIR) + "/graphs/mnist_mlp.yaml";

TEST(CompileCli, CompileWritesBundleAndSummary) {
  ScratchDir dir;
  Command r = teeny(dir, "compile " + kMnist);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  ASSERT_TRUE(std::filesystem::exists(dir.path() / "mnist_mlp.teeny" / "manifest.json"));  // default -o
  nlohmann::json manifest = nlohmann::json::parse(slurp(dir.str("mnist_mlp.teeny/manifest.json")));
  const size_t kernels = manifest["kernels"].size(), launches = manifest["launches"].size();
  EXPECT_GE(launches, 4u);  // at least one per node
  EXPECT_NE(r.out.find(fmt::format("  4 nodes, {} kernels ({} compiled, 0 cached), {} launches\n", kernels, kernels,
                                   launches)),
            std::string::npos)
      << r.out;
  // fc1: 256*784 + 256 floats, fc2: 10*256 + 10 floats.
  EXPECT_NE(r.out.find(fmt::format("  4 params: {} bytes at B=64, 0 bytes of host init data\n",
                                   (256 * 784 + 256 + 10 * 256 + 10) * 4)),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  arch sm_90, NVRTC "), std::string::npos) << r.out;

  Command again = teeny(dir, "compile " + kMnist + " -o again.teeny -j 1");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find(fmt::format("{} kernels (0 compiled, {} cached)", kernels, kernels)), std::string::npos)
      << again.out;
  EXPECT_EQ(slurp(dir.str("again.teeny/manifest.json")), slurp(dir.str("mnist_mlp.teeny/manifest.json")));
}

TEST(CompileCli, InspectJsonEvaluatesUnderBindings) {
  ScratchDir dir;
  ASSERT_EQ(teeny(dir, "compile " + kMnist + " -o m.teeny").exit_code, 0);
  Command r = teeny(dir, "inspect m.teeny --bind B=100 --device-sms 132 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json view = nlohmann::json::parse(r.out);
  EXPECT_EQ(view["graph"], "mnist_mlp");
  ASSERT_EQ(view["nodes"].size(), 4u);
  const nlohmann::json& fc1 = view["nodes"][0];
  EXPECT_EQ(fc1["name"], "fc1");
  EXPECT_EQ(fc1["output"]["shape"]["value"], (nlohmann::json{100, 256}));
  EXPECT_EQ(fc1["params"][0]["name"], "fc1.weight");
  EXPECT_EQ(fc1["params"][0]["bytes"]["value"], 256 * 784 * 4);
  ASSERT_GE(fc1["launches"].size(), 1u);
  int inputs_seen = 0;
  for (const nlohmann::json& launch : fc1["launches"]) {
    EXPECT_EQ(launch["entry"], launch["kernel"].get<std::string>() + "_entry_point");
    // Offsets follow the C parameter buffer: each argument aligned to its own size (a tensor
    // map's 128 bytes to 64).
    int end = 0;
    for (const nlohmann::json& arg : launch["args"]) {
      EXPECT_EQ(arg["offset"].get<int>() % (arg["kind"] == "tensor_map" ? 64 : arg["size"].get<int>()), 0);
      EXPECT_GE(arg["offset"].get<int>(), end);
      end = arg["offset"].get<int>() + arg["size"].get<int>();
      if (arg["kind"] == "input") {
        ++inputs_seen;
        EXPECT_EQ(arg["bound_to"], "x");
        EXPECT_EQ(arg["value"], "f32 [100, 784]");
        EXPECT_EQ(arg["ptx_type"], ".u64");
        EXPECT_EQ(arg["size"], 8);
      }
    }
    for (const nlohmann::json& g : launch["grid"]) EXPECT_GE(g["value"].get<int64_t>(), 1);
  }
  EXPECT_GE(inputs_seen, 1);

  Command one = teeny(dir, "inspect m.teeny --node probs --format json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  nlohmann::json probs = nlohmann::json::parse(one.out);
  ASSERT_EQ(probs["nodes"].size(), 1u);
  EXPECT_EQ(probs["nodes"][0]["output"]["shape"]["value"], (nlohmann::json{64, 10}));  // the default B
}

TEST(CompileCli, InspectTableAndPtx) {
  ScratchDir dir;
  ASSERT_EQ(teeny(dir, "compile " + kMnist + " -o m.teeny").exit_code, 0);
  Command table = teeny(dir, "inspect m.teeny --node act1 --bind B=2");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("bindings: B=2\n"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("node act1 (relu)  inputs: fc1\n"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("POS  NAME"), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find("node fc1 "), std::string::npos) << "--node shows one node";

  Command ptx = teeny(dir, "inspect m.teeny --ptx act1");
  ASSERT_EQ(ptx.exit_code, 0) << ptx.err;
  nlohmann::json manifest = nlohmann::json::parse(slurp(dir.str("m.teeny/manifest.json")));
  std::string kernel;
  for (const nlohmann::json& launch : manifest["launches"]) {
    if (launch["node"] == "act1") kernel = launch["kernel"];
  }
  ASSERT_FALSE(kernel.empty());
  // (EXPECT_TRUE: a failure should not print whole PTX files.)
  EXPECT_TRUE(ptx.out == slurp(dir.str("m.teeny/kernels/" + kernel + ".ptx")));
  EXPECT_NE(ptx.out.find(".visible .entry " + kernel + "_entry_point("), std::string::npos);
  EXPECT_TRUE(teeny(dir, "inspect m.teeny --ptx " + kernel).out == ptx.out);
}

TEST(CompileCli, Errors) {
  ScratchDir dir;
  ASSERT_EQ(teeny(dir, "compile " + kMnist + " -o m.teeny").exit_code, 0);
  Command node = teeny(dir, "inspect m.teeny --node prob");
  EXPECT_EQ(node.exit_code, 1);
  EXPECT_EQ(node.err, "teeny: error: --node prob: the bundle has no node 'prob' (did you mean 'probs'?)\n");
  Command ptx = teeny(dir, "inspect m.teeny --ptx nothing_like_it");
  EXPECT_EQ(ptx.exit_code, 1);
  EXPECT_EQ(ptx.err, "teeny: error: --ptx nothing_like_it: the bundle has no node or kernel 'nothing_like_it'\n");
  Command missing = teeny(dir, "inspect nowhere.teeny");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "teeny: error: bundle 'nowhere.teeny': no such directory\n");
  Command arch = teeny(dir, "compile " + kMnist + " --arch sm9");
  EXPECT_EQ(arch.exit_code, 1);
  EXPECT_EQ(arch.err, "teeny: error: invalid --arch 'sm9': expected sm_NN or compute_NN, e.g. sm_90\n");
  Command bind = teeny(dir, "compile " + kMnist + " --bind B=0");
  EXPECT_EQ(bind.exit_code, 1);
  EXPECT_EQ(bind.err, "teeny: error: --bind B=0: B must be in [1, 65536]\n");

  std::filesystem::create_directory(dir.path() / "notes");
  Command clobber = teeny(dir, "compile " + kMnist + " -o notes");
  EXPECT_EQ(clobber.exit_code, 1);
  EXPECT_EQ(clobber.err,
            "teeny: error: cannot write bundle 'notes': it exists and is not a teeny bundle (no manifest.json); "
            "not replacing it\n");
}

TEST(CompileCli, InspectShowsTensorMapArgs) {
  ScratchDir dir;
  const Registry registry = testing::test_registry();
  Graph graph = testing::test_graph(registry, "  - {name: t1, op: t.tensor_map, inputs: [x, z]}\n", "t1");
  write_bundle(compile_graph(graph, registry, testing::test_options(dir.str("cache"))), dir.str("t.teeny"));

  Command table = teeny(dir, "inspect t.teeny --bind B=6");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const std::string rows[] = {
      "    POS  NAME   C TYPE                                 PTX   SIZE  OFFSET  BOUND TO  VALUE\n",
      "    0    x      const float*                           .u64  8     0       x         f32 [6, 4]\n",
      "    1    x_map  const __grid_constant__ tn_tensor_map  .b8   128   64      map of x  "
      "f32 [6, 4] row stride 4, box [8, 4], swizzle 32B\n"};
  EXPECT_NE(table.out.find(rows[0] + rows[1] + rows[2]), std::string::npos) << table.out;

  Command json = teeny(dir, "inspect t.teeny --bind B=6 --format json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json arg = nlohmann::json::parse(json.out)["nodes"][0]["launches"][0]["args"][1];
  EXPECT_EQ(arg["kind"], "tensor_map");
  EXPECT_EQ(arg["bound_to"], "map of x");
  EXPECT_EQ(arg["map"], (nlohmann::json{{"of", "x"},
                                        {"cols", {{"expr", "4"}, {"value", 4}}},
                                        {"rows", {{"expr", "B"}, {"value", 6}}},
                                        {"row_stride", {{"expr", "4"}, {"value", 4}}},
                                        {"box", {4, 8}},
                                        {"swizzle", 32}}));
}

TEST(CompileCli, FixedBindingsSpecialiseAndAreEnforcedByInspect) {
  ScratchDir dir;
  Command r = teeny(dir, "compile " + kMnist + " -o m32.teeny --bind B=32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("at B=32,"), std::string::npos) << r.out;
  nlohmann::json manifest = nlohmann::json::parse(slurp(dir.str("m32.teeny/manifest.json")));
  EXPECT_EQ(manifest["fixed"], (nlohmann::json{{"B", 32}}));
  EXPECT_EQ(manifest["tensors"][0]["shape"], (nlohmann::json{"32", "784"}));
  Command other = teeny(dir, "inspect m32.teeny --bind B=64");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_EQ(other.err, "teeny: error: --bind B=64: B was fixed to 32 when the bundle was compiled\n");
}

}  // namespace
}  // namespace teeny
