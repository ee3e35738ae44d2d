// The bad-input battery: the teeny binary driven with hostile inputs of every kind it reads (specs,
// flags, .npy, .safetensors, bundles), each of which must end in a clean, bounded error: exit code 1,
// one "teeny: error:" naming the culprit, no "internal error", no crash or hang, no huge echo of the
// input, and nothing half-written left behind. The exact wording of each defect class's error is
// tested next to the code that raises it; this test is about no input slipping past those checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/file_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using testing::slurp;
using testing::spit;

// A hostile input: `make` writes the files into the case's directory; `args` are teeny's arguments
// with "{dir}" standing for that directory; stderr must name `culprit`.
struct Hostile {
  std::string name;
  std::function<void(const fs::path& dir)> make;
  std::string args;
  std::string culprit;
};

// gtest prints a case by its name, not its bytes.
void PrintTo(const Hostile& input, std::ostream* out) { *out << input.name; }

std::string repeat(const std::string& piece, size_t times) {
  std::string out;
  out.reserve(piece.size() * times);
  for (size_t i = 0; i < times; ++i) out += piece;
  return out;
}

std::string replace_dir(std::string args, const std::string& dir) {
  for (size_t at = args.find("{dir}"); at != std::string::npos; at = args.find("{dir}", at + dir.size()))
    args.replace(at, 5, dir);
  return args;
}

// ---- specs ----------------------------------------------------------------------------------------

// mnist_mlp's shape of spec with `x_shape` as the input's shape and `fc1_attrs` as fc1's attrs.
std::string mlp_spec(const std::string& x_shape = "[B, 784]", const std::string& fc1_attrs = "{out_features: 16}",
                     const std::string& dims = "B: {min: 1, max: 64, default: 8}") {
  return "name: mlp\ndims:\n  " + dims + "\ninputs:\n  x: {dtype: f32, shape: " + x_shape +
         "}\nnodes:\n  - {name: fc1, op: linear, inputs: [x], attrs: " + fc1_attrs +
         "}\n  - {name: act, op: relu, inputs: [fc1]}\noutputs: [act]\n";
}

Hostile spec_case(std::string name, std::string text, std::string culprit = "spec.yaml") {
  return {std::move(name), [text](const fs::path& dir) { spit(dir / "spec.yaml", text); }, "check {dir}/spec.yaml",
          std::move(culprit)};
}

std::vector<Hostile> spec_cases() {
  const std::string deep = repeat("(", 100000) + "B" + repeat(")", 100000);
  const std::string int64_min = "(-9223372036854775807 - 1)";
  return {
      spec_case("EmptySpec", ""),
      spec_case("BinarySpec", std::string("\x00\xff\xfe\x01\x80name", 9)),
      spec_case("TopLevelList", "- a\n- b\n"),
      spec_case("UnclosedFlowMapping", "name: x\nnodes: [{name: a\n"),
      spec_case("NestedFlowSequences", "name: x\nnodes: " + repeat("[", 100000) + "\n"),
      spec_case("NestedFlowMappings", "name: x\nnodes: " + repeat("{a: ", 100000) + "\n"),
      spec_case("AliasBomb",
                "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
                "name: [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]\n"),
      spec_case("HugeLineError", "name: mlp\nnodes: [" + repeat("x", 20 << 20) + "\n"),
      spec_case("ExpressionNestedDeep", mlp_spec("[\"" + deep + "\", 784]")),
      spec_case("NegationNestedDeep", mlp_spec("[\"" + repeat("-", 100000) + "B\", 784]")),
      spec_case("ExpressionChainedLong", mlp_spec("[\"" + repeat("B*", 100000) + "B\", 784]")),
      spec_case("Int64MinOverMinusOne", mlp_spec("[\"" + int64_min + "/(-1)\", 784]")),
      spec_case("Int64MinModMinusOne", mlp_spec("[\"" + int64_min + "%(-1)\", 784]")),
      spec_case("NumberTooLarge", mlp_spec("[\"99999999999999999999\", 784]")),
      spec_case("ConstantProductOverflows", mlp_spec("[\"4294967296*4294967296\", 784]")),
      spec_case("ElementCountWraps", mlp_spec("[4294967296, 4294967296, 784]")),
      spec_case("TensorOver2To63Bytes", mlp_spec("[2305843009213693952, 784]")),
      spec_case("NegativeExtent", mlp_spec("[-5, 784]")),
      spec_case("OutFeaturesInt64Max", mlp_spec("[B, 784]", "{out_features: 9223372036854775807}")),
      spec_case("OutFeaturesZero", mlp_spec("[B, 784]", "{out_features: 0}")),
      spec_case("DimMinAboveMax", mlp_spec("[B, 784]", "{out_features: 16}", "B: {min: 64, max: 1, default: 8}")),
      spec_case("DimDefaultAboveMax", mlp_spec("[B, 784]", "{out_features: 16}", "B: {min: 1, max: 8, default: 64}")),
      spec_case("DimNamedLikeDeviceSymbol", mlp_spec("[SMS, 784]", "{out_features: 16}", "SMS: {min: 1, max: 8}")),
      spec_case("NegativeLayernormEps",
                "name: n\ninputs:\n  x: {dtype: f32, shape: [4, 8]}\nnodes:\n"
                "  - {name: ln, op: layernorm, inputs: [x], attrs: {eps: -1.0}}\noutputs: [ln]\n"),
      spec_case("NodeReadsItself",
                "name: n\ninputs:\n  x: {dtype: f32, shape: [4, 8]}\nnodes:\n"
                "  - {name: r, op: relu, inputs: [r]}\noutputs: [r]\n"),
      spec_case("InvalidUtf8Name",
                "name: n\ninputs:\n  x: {dtype: f32, shape: [4, 8]}\nnodes:\n"
                "  - {name: \"\xc3\x28\xff\", op: relu, inputs: [x]}\noutputs: [x]\n"),
      {"SpecIsADirectory", [](const fs::path& dir) { fs::create_directory(dir / "spec.yaml"); },
       "check {dir}/spec.yaml", "spec.yaml"},
      {"SpecIsDevZero", [](const fs::path&) {}, "check /dev/zero", "/dev/zero"},
      {"SpecIsMissing", [](const fs::path&) {}, "check {dir}/missing.yaml", "missing.yaml"},
      {"BindOutOfInt64", [](const fs::path& dir) { spit(dir / "spec.yaml", mlp_spec()); },
       "check {dir}/spec.yaml --bind B=99999999999999999999", "B"},
      {"BindOutsideRange", [](const fs::path& dir) { spit(dir / "spec.yaml", mlp_spec()); },
       "check {dir}/spec.yaml --bind B=-1", "B"},
      {"BindMakesTensorTooBig",
       [](const fs::path& dir) {
         spit(dir / "spec.yaml", mlp_spec("[\"B*B*B*B\", 784]", "{out_features: 16}",
                                          "B: {min: 1, max: 9223372036854775807, default: 8}"));
       },
       "check {dir}/spec.yaml --bind B=1000000", "B=1000000"},
  };
}

// ---- data files for `run --device cpu` ------------------------------------------------------------

// A version-1 .npy file: the header dictionary `header`, padded as numpy does, then `data`.
std::string npy(const std::string& header, const std::string& data = "") {
  std::string dict = header;
  const size_t unpadded = 10 + dict.size() + 1;
  dict += std::string((64 - unpadded % 64) % 64, ' ') + "\n";
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + data;
}

std::string npy_f32(const std::string& shape, size_t data_bytes) {
  return npy("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }", std::string(data_bytes, '\0'));
}

// A .safetensors file: the 8-byte little-endian header length, the header, then `data`.
std::string safetensors(const std::string& header, const std::string& data = "", uint64_t length = 0) {
  if (length == 0) length = header.size();
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((length >> (8 * i)) & 0xff);
  return out + header + data;
}

constexpr const char* kRunX = "run {dir}/b --device cpu --input x={dir}/x.npy";
constexpr const char* kRunWeights = "run {dir}/b --device cpu --weights {dir}/w.safetensors";

Hostile npy_case(std::string name, std::string bytes) {
  return {std::move(name), [bytes](const fs::path& dir) { spit(dir / "x.npy", bytes); }, kRunX, "x.npy"};
}

Hostile weights_case(std::string name, std::string bytes) {
  return {std::move(name), [bytes](const fs::path& dir) { spit(dir / "w.safetensors", bytes); }, kRunWeights,
          "w.safetensors"};
}

std::vector<Hostile> data_cases() {
  const std::string fc1_weight = "\"fc1.weight\": {\"dtype\": \"F32\", \"shape\": [16, 784], ";
  return {
      npy_case("NpyEmpty", ""),
      npy_case("NpyBadMagic", "\x93NUMPX" + std::string(120, ' ')),
      npy_case("NpyHeaderPastTheEnd", std::string("\x93NUMPY\x01\x00\xff\xff{'descr'", 17)),
      npy_case("NpyHeaderNotADict", npy("garbage")),
      npy_case("NpyExtent23Digits", npy_f32("(12345678901234567890123, 784)", 0)),
      npy_case("NpyShapeOverflows", npy_f32("(4294967296, 4294967296)", 0)),
      npy_case("NpyTruncatedData", npy_f32("(8, 784)", 10)),
      npy_case("NpyWrongShape", npy_f32("(3, 5)", 60)),
      npy_case("NpyUnknownDescr", npy("{'descr': '<q9', 'fortran_order': False, 'shape': (8, 784), }")),
      npy_case("NpyFortranOrder",
               npy("{'descr': '<f4', 'fortran_order': True, 'shape': (8, 784), }", std::string(8 * 784 * 4, '\0'))),
      {"NpyIsDevZero", [](const fs::path&) {}, "run {dir}/b --device cpu --input x=/dev/zero", "/dev/zero"},
      {"NpyIsADirectory", [](const fs::path& dir) { fs::create_directory(dir / "x.npy"); }, kRunX, "x.npy"},
      weights_case("SafetensorsEmpty", ""),
      weights_case("SafetensorsHeaderLength2To63", safetensors("{}", "", uint64_t{1} << 63)),
      weights_case("SafetensorsHeaderPastTheEnd", safetensors("{}", "", 4096)),
      weights_case("SafetensorsHeaderNotJson", safetensors("{not json")),
      weights_case("SafetensorsOffsetsPastTheEnd", safetensors("{" + fc1_weight + "\"data_offsets\": [0, 50176]}}")),
      weights_case("SafetensorsOffsetsReversed",
                   safetensors("{" + fc1_weight + "\"data_offsets\": [8, 0]}}", std::string(8, '\0'))),
      weights_case("SafetensorsOffsetsNotNumbers", safetensors("{" + fc1_weight + "\"data_offsets\": \"x\"}}")),
      weights_case("SafetensorsShapeMismatch",
                   safetensors("{\"fc1.weight\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}",
                               std::string(16, '\0'))),
      weights_case("SafetensorsUnknownDtype",
                   safetensors("{\"fc1.weight\": {\"dtype\": \"F99\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                               std::string(4, '\0'))),
      weights_case("SafetensorsHugeShape",
                   safetensors("{\"fc1.weight\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], "
                               "\"data_offsets\": [0, 4]}}",
                               std::string(4, '\0'))),
      {"OutputDirIsAFile", [](const fs::path& dir) { spit(dir / "out", "a file"); },
       "run {dir}/b --device cpu --output-dir {dir}/out", "out"},
  };
}

// ---- bundles ------------------------------------------------------------------------------------

// `edit` applied to the manifest of the good bundle copied to {dir}/b.
Hostile manifest_case(std::string name, std::function<void(nlohmann::json&)> edit) {
  return {std::move(name),
          [edit](const fs::path& dir) {
            const fs::path manifest = dir / "b" / "manifest.json";
            nlohmann::json json = nlohmann::json::parse(slurp(manifest));
            edit(json);
            spit(manifest, json.dump(1));
          },
          "inspect {dir}/b", "manifest.json"};
}

Hostile manifest_text_case(std::string name, std::string text) {
  return {std::move(name), [text](const fs::path& dir) { spit(dir / "b" / "manifest.json", text); }, "inspect {dir}/b",
          "manifest.json"};
}

// The first kernel's PTX replaced by the second's, its checksum updated to match: a well-formed
// bundle that lies about what its launches call.
void swap_kernels(const fs::path& dir) {
  const fs::path manifest = dir / "b" / "manifest.json";
  nlohmann::json json = nlohmann::json::parse(slurp(manifest));
  const std::string first = json["kernels"][0]["file"], second = json["kernels"][1]["file"];
  spit(dir / "b" / first, slurp(dir / "b" / second));
  json["checksums"][first] = json["checksums"][second];
  spit(manifest, json.dump(1));
}

std::vector<Hostile> bundle_cases() {
  return {
      manifest_text_case("ManifestEmpty", ""),
      manifest_text_case("ManifestNotJson", "{\"format_version\": "),
      manifest_text_case("ManifestNumberOutOfRange", "{\"format_version\": 1e999}"),
      manifest_case("ManifestDimMinAboveMax", [](nlohmann::json& m) { m["dims"][0]["min"] = 100000000; }),
      manifest_case("ManifestDimDefaultAboveMax", [](nlohmann::json& m) { m["dims"][0]["default"] = 100000000; }),
      manifest_case("ManifestBlockTooLarge",
                    [](nlohmann::json& m) {
                      m["launches"][0]["block"] = {4096, 1, 1};
                    }),
      manifest_case("ManifestArgSizeHuge",
                    [](nlohmann::json& m) { m["launches"][0]["args"][0]["size"] = int64_t{1} << 40; }),
      manifest_case("ManifestNodesOutOfOrder",
                    [](nlohmann::json& m) {
                      auto& nodes = m["nodes"];
                      std::swap(nodes[0], nodes[nodes.size() - 1]);
                    }),
      manifest_case("ManifestLaunchNamesNoKernel", [](nlohmann::json& m) { m["launches"][0]["kernel"] = "nope"; }),
      manifest_case("ManifestGridExpressionBad", [](nlohmann::json& m) { m["launches"][0]["grid"][0] = "B+"; }),
      manifest_case("ManifestFieldWrongType", [](nlohmann::json& m) { m["launches"] = "many"; }),
      {"ManifestIsADirectory",
       [](const fs::path& dir) {
         fs::remove(dir / "b" / "manifest.json");
         fs::create_directory(dir / "b" / "manifest.json");
       },
       "inspect {dir}/b", "manifest.json"},
      {"KernelSwappedChecksumUpdated", swap_kernels, "inspect {dir}/b", "kernel"},
      {"KernelFileMissing",
       [](const fs::path& dir) {
         for (const auto& entry : fs::directory_iterator(dir / "b" / "kernels")) fs::remove(entry.path());
       },
       "inspect {dir}/b", "kernels/"},
      {"BundleIsAFile", [](const fs::path& dir) { spit(dir / "file", "not a bundle"); }, "inspect {dir}/file", "file"},
      {"CompileOverAFile",
       [](const fs::path& dir) {
         spit(dir / "spec.yaml", mlp_spec());
         spit(dir / "parent", "a file");
       },
       "compile {dir}/spec.yaml -o {dir}/parent/out", "parent"},
  };
}

std::vector<Hostile> all_cases() {
  std::vector<Hostile> cases;
  for (auto make : {spec_cases, data_cases, bundle_cases})
    for (Hostile& c : make()) cases.push_back(std::move(c));
  return cases;
}

// The good bundle the data and bundle cases start from, compiled once.
class HostileInput : public ::testing::TestWithParam<Hostile> {
 protected:
  static void SetUpTestSuite() {
    good_ = new ScratchDir();
    spit(good_->path() / "spec.yaml", mlp_spec());
    const auto compiled = testing::run_teeny("compile " + good_->str("spec.yaml") + " -o " + good_->str("b"));
    ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  }
  static void TearDownTestSuite() {
    delete good_;
    good_ = nullptr;
  }
  static ScratchDir* good_;
};
ScratchDir* HostileInput::good_ = nullptr;

// Hidden entries are teeny's temporaries (core/atomic_file.cpp); none may survive a failed command.
std::vector<std::string> hidden_entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.path().filename().string().rfind('.', 0) == 0) out.push_back(entry.path().string());
  return out;
}

// Lines of stderr that start a teeny error (notes may come before it).
int error_lines(const std::string& err) {
  int count = err.rfind("teeny: error: ", 0) == 0;
  for (size_t at = err.find("\nteeny: error: "); at != std::string::npos; at = err.find("\nteeny: error: ", at + 1))
    ++count;
  return count;
}

TEST_P(HostileInput, EndsInOneCleanBoundedError) {
  const Hostile& input = GetParam();
  ScratchDir dir;
  fs::copy(good_->path() / "b", dir.path() / "b", fs::copy_options::recursive);
  input.make(dir.path());
  const auto result = testing::run_command("timeout 20 " + testing::command_detail::quoted(TEENY_BINARY) + " " +
                                           replace_dir(input.args, dir.str()));
  EXPECT_EQ(result.exit_code, 1) << result.err.substr(0, 2000);
  EXPECT_EQ(error_lines(result.err), 1) << result.err.substr(0, 2000);
  EXPECT_EQ(result.err.find("internal error"), std::string::npos) << result.err.substr(0, 2000);
  EXPECT_NE(result.err.find(input.culprit), std::string::npos) << result.err.substr(0, 2000);
  EXPECT_LT(result.err.size(), 4000u) << "stderr starts: " << result.err.substr(0, 300);
  EXPECT_EQ(hidden_entries(dir.path()), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Battery, HostileInput, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Hostile>& info) { return info.param.name; });

}  // namespace
}  // namespace teeny
