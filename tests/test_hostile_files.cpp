// Hostile files, exact messages: what is not a regular file or is too large is refused at once,
// nesting the parsers would recurse into is refused before parsing, an error on a huge line shows
// a window around its caret, and temporary files of killed writers do not survive the next write.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "core/npy.h"
#include "tests/file_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

namespace fs = std::filesystem;
using testing::Command;
using testing::ScratchDir;
using testing::spit;

// A pid that cannot be running: beyond the kernel's pid limit.
constexpr const char* kDeadPid = "99999999";

std::string repeat(const std::string& text, size_t times) {
  std::string out;
  out.reserve(text.size() * times);
  for (size_t i = 0; i < times; ++i) out += text;
  return out;
}

// ---- error rendering ---------------------------------------------------------------------------

std::string rendered(const std::string& line, int column) {
  return Error("bad").at(SourceLocation{"g.yaml", 2, column, line}).render();
}

TEST(ErrorRender, ShortLinesAreShownWhole) {
  EXPECT_EQ(rendered("nodes: [a, b]", 9), "teeny: error: g.yaml:2:9: bad\n  nodes: [a, b]\n          ^\n");
}

TEST(ErrorRender, HugeLinesShowAWindowAroundTheCaret) {
  const std::string line = repeat("0123456789", 5'000'000);  // 50 MB
  const std::string text = rendered(line, 25'000'001);       // at a '0'
  const std::string window = line.substr(25'000'000 - 60, kShownColumns);
  EXPECT_EQ(text,
            "teeny: error: g.yaml:2:25000001: bad\n  ..." + window + "...\n  " + std::string(3 + 60, ' ') + "^\n");
  EXPECT_EQ(window[60], '0');

  EXPECT_EQ(rendered(line, 3), "teeny: error: g.yaml:2:3: bad\n  " + line.substr(0, kShownColumns) + "...\n    ^\n");
  EXPECT_EQ(rendered(line, static_cast<int>(line.size())), "teeny: error: g.yaml:2:50000000: bad\n  ..." +
                                                               line.substr(line.size() - kShownColumns) + "\n  " +
                                                               std::string(3 + kShownColumns - 1, ' ') + "^\n");
}

TEST(ErrorRender, ExcerptCutsQuotedText) {
  EXPECT_EQ(excerpt("short"), "short");
  EXPECT_EQ(excerpt(repeat("x", 1000), 10), "xxxxxxx...");
  EXPECT_EQ(excerpt("ab\xc3\xa9\xc3\xa9", 5), "ab...");  // never cuts a UTF-8 character in two
}

TEST(ErrorRender, AHugeValueInASpecMakesAShortError) {
  ScratchDir dir;
  spit(dir.path() / "g.yaml", "name: g\ninputs:\n  x: {dtype: " + repeat("f", 20 << 20) + ", shape: [4]}\n");
  Command r = testing::run_teeny("check " + dir.str("g.yaml"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_LT(r.err.size(), 1000u) << r.err.substr(0, 1000);
  EXPECT_EQ(r.err.rfind(fmt::format("teeny: error: {}:3:14: input 'x': unknown dtype '{}...'", dir.str("g.yaml"),
                                    repeat("f", 77)),
                        0),
            0u)
      << r.err.substr(0, 1000);
}

// ---- input files -------------------------------------------------------------------------------

TEST(InputFile, RefusesWhatIsNotARegularFileAtOnce) {
  ScratchDir dir;
  ASSERT_EQ(mkfifo(dir.str("fifo").c_str(), 0600), 0);
  for (const auto& [path, reason] :
       {std::pair{std::string("/dev/zero"), "not a regular file"}, std::pair{dir.str("fifo"), "not a regular file"},
        std::pair{dir.str(), "is a directory"}, std::pair{dir.str("none.yaml"), "No such file or directory"}}) {
    Command r = testing::run_command("timeout 20 " + std::string(TEENY_BINARY) + " check " + path);
    EXPECT_EQ(r.exit_code, 1) << path;
    EXPECT_EQ(r.err, fmt::format("teeny: error: cannot read graph spec '{}': {}\n", path, reason));
  }
}

TEST(InputFile, ReadsOnlyUpToItsLimit) {
  ScratchDir dir;
  const std::string path = dir.str("big.yaml");
  spit(path, "name: g\n");
  fs::resize_file(path, kTextFileLimit + 1);  // sparse: costs no disk
  try {
    read_input_file(path, "graph spec");
    FAIL() << "read a file over the limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), fmt::format("cannot read graph spec '{}': larger than the 64 MiB limit", path));
  }
  const InputFile file(path, "graph spec");
  EXPECT_EQ(file.read(0, 5), "name:");
  try {
    file.read(kTextFileLimit, 2);
    FAIL() << "read past the end";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), fmt::format("cannot read graph spec '{}': it ends at byte 67108865, before the 2 bytes "
                                       "needed at byte 67108864",
                                       path));
  }
}

// A bundle of graphs/mnist_mlp.yaml, compiled once for the tests that run it on the host.
class HostileRunFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir;
    Command r = teeny("compile " + std::string(TEENY_SOURCE_DIR) + "/graphs/mnist_mlp.yaml -o m.teeny");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  static Command teeny(const std::string& args) {
    return testing::run_teeny(args, {dir_->str(), {{"TEENY_CACHE_DIR", dir_->str("cache")}}});
  }
  static std::string last_line(const std::string& text) {
    const size_t end = text.find_last_not_of('\n');
    return text.substr(text.rfind('\n', end) + 1, end - text.rfind('\n', end));
  }
  static ScratchDir* dir_;
};
ScratchDir* HostileRunFiles::dir_ = nullptr;

TEST_F(HostileRunFiles, InputsAndWeightsMustBeRegularFiles) {
  Command r = teeny("run m.teeny --device cpu --bind B=2 --input x=/dev/zero");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: cannot read .npy file '/dev/zero': not a regular file\n");
  r = teeny("run m.teeny --device cpu --bind B=2 --weights .");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: cannot read safetensors file '.': is a directory\n");
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// Sizes every check accepts can still be more than the machine holds: a plain error, not an
// "internal error" (here a 700 MB address space for B=65536 inputs, ~1.3 GB on the host).
TEST_F(HostileRunFiles, RunningOutOfHostMemoryIsAPlainError) {
  if (kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit";
  Command r = testing::run_command("cd " + dir_->str() + " && ulimit -v 700000 && " + std::string(TEENY_BINARY) +
                                   " run m.teeny --device cpu --bind B=65536");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(last_line(r.err), "teeny: error: out of host memory");
}

// Node attrs are data the host reference reads: an edited bundle's are checked against the op's
// schema (a wrong type reached "internal error" from the JSON library).
TEST_F(HostileRunFiles, EditedAttrsAreAnErrorOfTheNode) {
  fs::create_directory(dir_->path() / "edited.teeny");
  fs::copy(dir_->path() / "m.teeny", dir_->path() / "edited.teeny", fs::copy_options::recursive);
  nlohmann::json manifest = nlohmann::json::parse(testing::slurp(dir_->path() / "m.teeny" / "manifest.json"));
  ASSERT_EQ(manifest["nodes"][3]["name"], "probs");
  manifest["nodes"][3]["attrs"]["axis"] = "x";
  spit(dir_->path() / "edited.teeny" / "manifest.json", manifest.dump());
  Command r = teeny("run edited.teeny --device cpu --bind B=2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(last_line(r.err),
            "teeny: error: host reference of node 'probs' (softmax): attr 'axis' must be int, got \"x\"");
}

TEST(HostileFlags, AnArchNumberPastIntIsAnError) {
  Command r = testing::run_teeny("compile " + std::string(TEENY_SOURCE_DIR) +
                                 "/graphs/mnist_mlp.yaml --arch sm_99999999999 -o /nonexistent/x.teeny");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: invalid --arch 'sm_99999999999': expected sm_NN or compute_NN, e.g. sm_90\n");
}

// ---- nesting -----------------------------------------------------------------------------------

TEST(Nesting, DeepYamlIsRefusedBeforeParsing) {
  ScratchDir dir;
  for (const auto& [text, column] : {std::pair{"name: g\nnodes: " + repeat("[", 100000), 71},
                                     std::pair{"name: g\nnodes: " + repeat("{a: ", 100000), 260}}) {
    spit(dir.path() / "deep.yaml", text + "\n");
    Command r = testing::run_teeny("check " + dir.str("deep.yaml"));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(
        r.err.substr(0, r.err.find('\n')),
        fmt::format("teeny: error: {}:2:{}: lists and maps nested more than 64 deep", dir.str("deep.yaml"), column));
  }
}

TEST(Nesting, YamlScanCountsBlockAndFlowLevelsAndSkipsScalars) {
  std::string nested_blocks;
  for (int i = 0; i < 70; ++i) nested_blocks += std::string(i, ' ') + "a:\n";
  ASSERT_TRUE(yaml_nesting_beyond(nested_blocks));
  EXPECT_EQ(yaml_nesting_beyond(nested_blocks)->line, 65);
  const auto compact = yaml_nesting_beyond(repeat("- ", 70) + "1\n");  // a list in a list in a list...
  ASSERT_TRUE(compact);
  EXPECT_EQ(compact->column, 129);
  // Brackets in quoted scalars, comments and block scalars are text, not nesting.
  EXPECT_FALSE(yaml_nesting_beyond("a: '" + repeat("[", 100) + "'\nb: \"" + repeat("{", 100) + "\"\n"));
  EXPECT_FALSE(yaml_nesting_beyond("a: 1  # " + repeat("[", 100) + "\n"));
  std::string block_scalar = "a: |\n";
  for (int i = 0; i < 100; ++i) block_scalar += std::string(i + 2, ' ') + "[x\n";
  EXPECT_FALSE(yaml_nesting_beyond(block_scalar + "b: 2\n"));
  // What the graphs of the repository nest is far from the limit.
  EXPECT_FALSE(yaml_nesting_beyond(testing::slurp(std::string(TEENY_SOURCE_DIR) + "/graphs/transformer_block.yaml")));
}

TEST(Nesting, JsonScanSkipsStrings) {
  EXPECT_FALSE(json_nesting_beyond("{\"a\": \"" + repeat("[", 100) + "\\\"\"}"));
  const auto deep = json_nesting_beyond("{\"a\":\n" + repeat("[", 100));
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->line, 2);
  EXPECT_EQ(deep->column, 64);
}

// ---- crash-safe writes -------------------------------------------------------------------------

TEST(StaleTemporaries, AnyWriteIntoAFolderRemovesThoseOfDeadWriters) {
  ScratchDir dir;
  const fs::path stale_dir = dir.path() / fmt::format(".m.teeny.tmp-{}-0", kDeadPid);
  fs::create_directories(stale_dir / "kernels");
  spit(stale_dir / "manifest.json", "{");
  fs::create_directory(dir.path() / "b.teeny");
  fs::create_directory(dir.path() / fmt::format(".b.teeny.old-{}-3", kDeadPid));  // b.teeny is there
  spit(dir.path() / fmt::format(".probs.npy.tmp-{}-7", kDeadPid), "partial");
  const std::string live = fmt::format(".other.npy.tmp-{}-0", static_cast<long>(::getpid()));
  spit(dir.path() / live, "being written");
  spit(dir.path() / ".notes.tmp-draft", "not teeny's");

  write_npy(dir.str("out.npy"), HostTensor{DType::kF32, {1}, {1}});

  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path())) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".notes.tmp-draft", live, "b.teeny", "out.npy"}));
}

// The command line's writes clean up too: `run --output-dir` into a folder a killed teeny left
// temporaries in, and `compile -o` next to a killed compile's temporary bundle.
TEST_F(HostileRunFiles, CommandsThatWriteRemoveDeadWritersTemporaries) {
  const fs::path out = dir_->path() / "out";
  fs::create_directory(out);
  spit(out / fmt::format(".probs.npy.tmp-{}-0", kDeadPid), "partial");
  Command r = teeny("run m.teeny --device cpu --bind B=2 --output-dir out");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(out / fmt::format(".probs.npy.tmp-{}-0", kDeadPid)));
  EXPECT_TRUE(fs::exists(out / "probs.npy"));

  const fs::path stale = dir_->path() / fmt::format(".m.teeny.tmp-{}-1", kDeadPid);
  fs::create_directories(stale / "kernels");
  r = teeny("compile " + std::string(TEENY_SOURCE_DIR) + "/graphs/mnist_mlp.yaml -o m.teeny");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(stale));
}

// A kill between the two renames of the fallback replacement (no RENAME_EXCHANGE) leaves the
// previous bundle set aside and none at the target: the next write puts it back.
TEST(StaleTemporaries, ASetAsideBundleWithoutItsTargetIsPutBack) {
  ScratchDir dir;
  const fs::path set_aside = dir.path() / fmt::format(".m.teeny.old-{}-0", kDeadPid);
  fs::create_directory(set_aside);
  spit(set_aside / "manifest.json", "{}");
  write_npy(dir.str("out.npy"), HostTensor{DType::kF32, {1}, {1}});
  EXPECT_FALSE(fs::exists(set_aside));
  EXPECT_EQ(testing::slurp(dir.path() / "m.teeny" / "manifest.json"), "{}");
}

}  // namespace
}  // namespace teeny
