// The teeny binary end to end: check on graphs/, errors with exit codes and exact stderr,
// `teeny ops` in both formats, and no link-time dependency on the CUDA driver.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/registry.h"
#include "ops/ops.h"
#include "tests/op_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using testing::Command;
using testing::run_command;

// A temp path unique to this process and test: CTest runs tests in parallel.
std::string temp_path(const std::string& name) {
  return fmt::format("{}/teeny_cli_{}_{}_{}", ::testing::TempDir(), getpid(),
                     ::testing::UnitTest::GetInstance()->current_test_info()->name(), name);
}

// teeny in the source directory, so that graph paths read as in the README.
Command teeny(const std::string& args) { return testing::run_teeny(args, {TEENY_SOURCE_DIR, {}}); }

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, CheckMnistPrintsSymbolicAndBoundShapes) {
  Command r = teeny("check graphs/mnist_mlp.yaml --bind B=32");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out,
            "graph 'mnist_mlp' (graphs/mnist_mlp.yaml): OK\n"
            "\n"
            "dims\n"
            "  DIM  RANGE       DEFAULT  BOUND\n"
            "  B    [1, 65536]  64       32 (--bind)\n"
            "\n"
            "inputs\n"
            "  INPUT  DTYPE  SHAPE     BOUND\n"
            "  x      f32    [B, 784]  [32, 784]\n"
            "\n"
            "nodes\n"
            "  NODE   OP       INPUTS  DTYPE  SHAPE                    BOUND      PARAMS\n"
            "  fc1    linear   x       f32    [B, 256]                 [32, 256]  weight [256, 784], bias [256]\n"
            "  act1   relu     fc1     f32    [B, 256]                 [32, 256]\n"
            "  fc2    linear   act1    f32    [B, 10] (row stride 12)  [32, 10]   weight [10, 256], bias [10]\n"
            "  probs  softmax  fc2     f32    [B, 10]                  [32, 10]\n"
            "\n"
            "outputs\n"
            "  OUTPUT  DTYPE  SHAPE    BOUND\n"
            "  probs   f32    [B, 10]  [32, 10]\n");
}

TEST(Cli, CheckUsesDefaultBindings) {
  Command r = teeny("check graphs/mnist_mlp.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  B    [1, 65536]  64       64\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  probs   f32    [B, 10]  [64, 10]\n"), std::string::npos) << r.out;
  // --bind may come before the graph and repeat.
  r = teeny("check --bind B=7 graphs/mnist_mlp.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  probs   f32    [B, 10]  [7, 10]\n"), std::string::npos) << r.out;
}

TEST(Cli, EveryBundledGraphChecks) {
  int graphs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(TEENY_SOURCE_DIR "/graphs")) {
    if (entry.path().extension() != ".yaml") continue;
    ++graphs;
    std::string relative = "graphs/" + entry.path().filename().string();
    Command r = teeny("check " + relative);
    EXPECT_EQ(r.exit_code, 0) << relative << "\n" << r.err;
    EXPECT_EQ(r.err, "") << relative;
    EXPECT_NE(r.out.find("' (" + relative + "): OK\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\nnodes\n"), std::string::npos) << r.out;
  }
  EXPECT_GE(graphs, 1);
}

TEST(Cli, BadSpecExitsOneWithTheLocatedError) {
  std::string path = write_temp("teeny_cli_bad.yaml",
                                "name: bad\n"
                                "inputs:\n"
                                "  x: {dtype: f32, shape: [4, 784]}\n"
                                "nodes:\n"
                                "  - {name: fc1, op: liner, inputs: [x], attrs: {out_features: 8}}\n"
                                "outputs: [fc1]\n");
  Command r = teeny("check " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "teeny: error: " + path +
                       ":5:21: node 'fc1': unknown op 'liner' (did you mean 'linear'?)\n"
                       "    - {name: fc1, op: liner, inputs: [x], attrs: {out_features: 8}}\n"
                       "                      ^\n"
                       "note: `teeny ops` lists the registered ops\n");
  std::filesystem::remove(path);
}

TEST(Cli, BadBindingsExitOne) {
  Command r = teeny("check graphs/mnist_mlp.yaml --bind B=0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "teeny: error: --bind B=0: B must be in [1, 65536]\n");
  r = teeny("check graphs/mnist_mlp.yaml --bind N=2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: --bind N=2: unknown dim 'N' (did you mean 'B'?)\nnote: declared dims: B\n");
  r = teeny("check graphs/mnist_mlp.yaml --bind B");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: malformed --bind 'B': expected DIM=N, e.g. --bind B=64\n");
}

TEST(Cli, MissingFileAndUsageErrorsExitOne) {
  Command r = teeny("check graphs/nope.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: cannot read graph spec 'graphs/nope.yaml': No such file or directory\n");
  r = teeny("check");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("GRAPH is required"), std::string::npos) << r.err;
  r = teeny("frobnicate");
  EXPECT_EQ(r.exit_code, 1);
  r = teeny("ops --format yaml");
  EXPECT_EQ(r.exit_code, 1);
  r = teeny("");
  EXPECT_EQ(r.exit_code, 1);
  r = teeny("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("check"), std::string::npos);
  EXPECT_NE(r.out.find("ops"), std::string::npos);
}

TEST(Cli, UsageErrorsNameTheCommandAndTheNearestOption) {
  const std::string commands = "check, ops, compile, inspect, run, profile, compare, tune, train";
  // Exit code 1 and exactly `err` on stderr.
  const auto expect_error = [](const std::string& args, const std::string& err) {
    const Command r = teeny(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.err, err) << args;
  };
  expect_error("", "teeny: error: a command is required: " + commands + "\n");
  expect_error(
      "complie graphs/mnist_mlp.yaml",
      "teeny: error: unknown command 'complie' (did you mean 'compile'?)\nnote: teeny's commands: " + commands + "\n");
  // A command's own usage errors, with a note on its --help.
  const auto expect_usage = [&](const std::string& args, const std::string& command, const std::string& err) {
    expect_error(args, "teeny: error: " + err + "\nnote: 'teeny " + command + " --help' lists its arguments\n");
  };
  expect_usage("check graphs/mnist_mlp.yaml --bnid B=2", "check",
               "'teeny check' has no option '--bnid' (did you mean '--bind'?)");
  // An option of another command says which.
  expect_usage("check graphs/mnist_mlp.yaml --steps 3", "check",
               "'teeny check' has no option '--steps'\nnote: --steps is an option of 'teeny train'");
  // A long one is quoted cut to 80 bytes.
  expect_usage("check graphs/mnist_mlp.yaml --" + std::string(100, 'x'), "check",
               "'teeny check' has no option '--" + std::string(75, 'x') + "...'");
  expect_usage("check graphs/mnist_mlp.yaml graphs/tiny_lm.yaml", "check",
               "'teeny check': unexpected argument 'graphs/tiny_lm.yaml'");
  // Flag values: numbers quoted as given.
  expect_usage("inspect bundle --device-sms 3x", "inspect", "'teeny inspect': --device-sms: '3x' is not a number");
  expect_usage("inspect bundle --device-sms 0", "inspect", "'teeny inspect': --device-sms: '0' must be above 0");
  expect_usage("compile graphs/mnist_mlp.yaml --jobs -1", "compile", "'teeny compile': --jobs: '-1' must be 0 or more");
}

TEST(Cli, OpsJsonListsEveryRegisteredOp) {
  Command r = teeny("ops --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json ops = nlohmann::json::parse(r.out);
  ASSERT_TRUE(ops.is_array());
  const Registry& registry = op_testing::registry();
  std::vector<std::string> listed;
  for (const auto& op : ops) listed.push_back(op.at("name").get<std::string>());
  EXPECT_EQ(listed, registry.names());
  for (const auto& op : ops) {
    const OpDef& def = *registry.find(op.at("name").get<std::string>());
    EXPECT_EQ(op.at("doc"), def.doc);
    EXPECT_EQ(op.at("attrs").size(), def.attrs.size()) << def.name;
    EXPECT_EQ(op.at("inputs").size(), def.inputs.size()) << def.name;
    EXPECT_EQ(op.at("params"), nlohmann::json(def.param_slots)) << def.name;
  }
}

TEST(Cli, OpsShowsOneOpInDetailAndAsJson) {
  Command r = teeny("ops linear --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json linear = nlohmann::json::parse(r.out);
  EXPECT_EQ(linear.at("name"), "linear");
  EXPECT_EQ(linear.at("source"), "ops/linear.cpp");
  EXPECT_EQ(linear.at("params"), nlohmann::json({"weight", "bias"}));
  EXPECT_EQ(linear.at("attrs").at(0).at("name"), "out_features");
  EXPECT_EQ(linear.at("attrs").at(0).at("required"), true);
  EXPECT_EQ(linear.at("attrs").at(1).at("name"), "bias");
  EXPECT_EQ(linear.at("attrs").at(1).at("default"), true);

  r = teeny("ops linear");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Registry& registry = op_testing::registry();
  const OpDef& def = *registry.find("linear");
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "linear: " + def.doc);
  EXPECT_NE(r.out.find("  source:  ops/linear.cpp\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  params:  weight, bias\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    out_features  int   (required)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    bias          bool  true"), std::string::npos) << r.out;

  r = teeny("ops");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')).substr(0, 2), "OP");
  // One line per op after the header.
  EXPECT_EQ(static_cast<size_t>(std::count(r.out.begin(), r.out.end(), '\n')), registry.names().size() + 1);
}

// fused.linear's residual may be left out: marked `?` in the list, said in the details and JSON.
TEST(Cli, OpsMarksOptionalInputs) {
  Command r = teeny("ops fused.linear");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  inputs (the last one optional):\n    x         [..., in]\n    residual  optional"),
            std::string::npos)
      << r.out;
  r = teeny("ops fused.linear --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("optional_inputs"), 1);
  r = teeny("ops");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The row, whatever the columns' widths: the op, then its inputs.
  const size_t row = r.out.find("\nfused.linear ");
  ASSERT_NE(row, std::string::npos) << r.out;
  const std::string line = r.out.substr(row + 1, r.out.find('\n', row + 1) - row - 1);
  EXPECT_EQ(line.substr(line.find_first_not_of(' ', 12), 14), "x, residual?  ") << line;
}

TEST(Cli, OpsUnknownNameSuggests) {
  Command r = teeny("ops lineer");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "teeny: error: unknown op 'lineer' (did you mean 'linear'?)\n"
            "note: `teeny ops` lists the registered ops\n");
}

// The driver is dlopen'ed so check/compile/inspect work without a GPU: the binary must not
// link libcuda. Requiring NEEDED entries at all keeps this from passing on empty output.
TEST(Cli, BinaryDoesNotLinkTheCudaDriver) {
  Command r = run_command("readelf -d " TEENY_BINARY);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(NEEDED)"), std::string::npos) << r.out;
  // The readelf output is real: NVRTC is always linked dynamically (libstdc++ need not be).
  EXPECT_NE(r.out.find("libnvrtc"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("libcuda.so"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace teeny
