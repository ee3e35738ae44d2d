// Bundles: round trip, and every kind of damage on load named by file; atomic writes that
// never leave a half bundle or damage the previous one.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmath>
#include <csignal>
#include <sstream>

#include <fmt/format.h>

#include "core/bundle.h"
#include "core/sha256.h"
#include "tests/test_compile_util.h"

namespace teeny {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

const Bundle& sample() {
  static const Bundle bundle = [] {
    static const Registry registry = testing::test_registry();
    static ScratchDir cache;
    Graph graph = testing::test_graph(registry,
                                      "  - {name: a, op: t.good, inputs: [x, z]}\n"
                                      "  - {name: b, op: t.variant, inputs: [a, z], attrs: {k: 3}}\n"
                                      "  - {name: flat, op: t.view, inputs: [b]}\n",
                                      "flat");
    return compile_graph(graph, registry, testing::test_options(cache.str()));
  }();
  return bundle;
}

using testing::slurp;
using testing::spit;

std::string load_error(const std::string& path) {
  try {
    read_bundle(path);
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

// The load error of the bundle at `path` once its manifest is `manifest` changed by `edit`.
std::string load_error_edited(const std::string& path, const nlohmann::json& manifest,
                              const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json edited = manifest;
  edit(edited);
  spit(fs::path(path) / "manifest.json", edited.dump());
  return load_error(path);
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Bundle, RoundTripPreservesEverything) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  EXPECT_EQ(listing(path), (std::vector<std::string>{"kernels", "manifest.json", "params.bin"}));
  const Bundle b = sample();
  EXPECT_EQ(listing(fs::path(path) / "kernels"),
            (std::vector<std::string>{b.kernels[0].name + ".ptx", b.kernels[1].name + ".ptx"}));

  Bundle loaded = read_bundle(path);
  EXPECT_EQ(bundle_to_json(loaded), bundle_to_json(sample()));
  ASSERT_EQ(loaded.kernels.size(), 2u);
  for (size_t k = 0; k < loaded.kernels.size(); ++k) {
    EXPECT_EQ(loaded.kernels[k].ptx, sample().kernels[k].ptx);
    EXPECT_EQ(loaded.kernels[k].sha256, sha256_hex(sample().kernels[k].ptx));
  }
  EXPECT_EQ(loaded.param_bytes, sample().param_bytes);
  EXPECT_EQ(loaded.param_bytes.size(), 32u);  // two 16-byte tables
  EXPECT_EQ(loaded.launches[1].args[7].fvalue, 0.5);
  EXPECT_EQ(loaded.launches[1].grid[0].eval({{"B", 100}}), 4);
  EXPECT_EQ(loaded.tensor("flat").alias_of, "b");
  EXPECT_EQ(loaded.nodes[1].attrs, (nlohmann::json{{"k", 3}}));
}

TEST(Bundle, ManifestStructure) {
  nlohmann::json m = bundle_to_json(sample());
  EXPECT_EQ(m["format_version"], kBundleFormatVersion);
  EXPECT_EQ(m["teeny_version"], TEENY_VERSION);
  EXPECT_EQ(m["arch"], "sm_90");
  EXPECT_EQ(m["dims"][0], (nlohmann::json{{"name", "B"}, {"min", 1}, {"max", 1024}, {"default", 8}}));
  EXPECT_EQ(m["launches"][0]["kernel"], "t_kernel");
  EXPECT_EQ(m["launches"][0]["grid"], (nlohmann::json{"ceil_div(B*4, 128)", "1", "1"}));
  EXPECT_EQ(m["launches"][0]["args"][5], (nlohmann::json{{"kind", "i32"},
                                                         {"name", "n"},
                                                         {"c_type", "int"},
                                                         {"ptx_type", ".u32"},
                                                         {"size", 4},
                                                         {"offset", 40},
                                                         {"value", "B*4"}}));
  EXPECT_EQ(m["launches"][0]["args"][2]["tensor"], "a.weight");
  EXPECT_EQ(m["params"][1], (nlohmann::json{{"name", "a.table"},
                                            {"node", "a"},
                                            {"slot", "table"},
                                            {"dtype", "f32"},
                                            {"shape", {"4"}},
                                            {"init", "host"},
                                            {"offset", 0},
                                            {"size", 16}}));
  EXPECT_EQ(m["checksums"]["kernels/t_kernel.ptx"], sha256_hex(sample().kernels[0].ptx));
  EXPECT_EQ(m["checksums"].size(), 3u);
}

TEST(Bundle, TensorMapArgRoundTrips) {
  static const Registry registry = testing::test_registry();
  ScratchDir dir;
  Graph graph = testing::test_graph(registry, "  - {name: t1, op: t.tensor_map, inputs: [x, z]}\n", "t1");
  const Bundle compiled = compile_graph(graph, registry, testing::test_options(dir.str("cache")));
  nlohmann::json m = bundle_to_json(compiled);
  EXPECT_EQ(m["launches"][0]["args"][1], (nlohmann::json{{"kind", "tensor_map"},
                                                         {"name", "x_map"},
                                                         {"c_type", "const __grid_constant__ tn_tensor_map"},
                                                         {"ptx_type", ".b8"},
                                                         {"size", 128},
                                                         {"offset", 64},
                                                         {"of", "x"},
                                                         {"cols", "4"},
                                                         {"rows", "B"},
                                                         {"row_stride", "4"},
                                                         {"box", {4, 8}},
                                                         {"swizzle", 32}}));

  const std::string path = dir.str("t.teeny");
  write_bundle(compiled, path);
  Bundle loaded = read_bundle(path);
  EXPECT_EQ(bundle_to_json(loaded), m);
  const TensorMapSpec& map = loaded.launches[0].args[1].map;
  EXPECT_EQ(loaded.launches[0].args[1].kind, ArgKind::kTensorMap);
  EXPECT_EQ(map.of, "x");
  EXPECT_EQ(map.rows.eval({{"B", 5}}), 5);
  EXPECT_EQ(std::vector<int>({map.box_cols, map.box_rows, map.swizzle}), (std::vector<int>{4, 8, 32}));

  // Its fields are checked like every other field.
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) { return load_error_edited(path, m, edit); };
  const std::string prefix = fmt::format("bundle '{}': manifest.json: ", path);
  EXPECT_EQ(with([](nlohmann::json& e) { e["launches"][0]["args"][1]["box"] = {4}; }),
            prefix + "launches[0].args[1].box: expected 2 integers [cols, rows], found 1");
  EXPECT_EQ(with([](nlohmann::json& e) { e["launches"][0]["args"][1].erase("of"); }),
            prefix + "launches[0].args[1]: missing key 'of'");
  EXPECT_EQ(with([](nlohmann::json& e) { e["launches"][0]["args"][1]["rows"] = 8; }),
            prefix + "launches[0].args[1].rows: expected a string, found number");
}

TEST(Bundle, DeviceExpressionsAndRunHintsRoundTrip) {
  Bundle bundle = sample();
  bundle.launches[0].grid[0] = min(ceil_div(Expr::dim("B") * 4, Expr(128)), device_sms() * 8);
  bundle.tensors[0].id_bound = 50;
  bundle.params[0].hints.random_range = std::array<double, 2>{0.5, 1.5};
  bundle.params[0].hints.unused_state = {"num_batches_tracked"};
  const nlohmann::json m = bundle_to_json(bundle);
  EXPECT_EQ(m["launches"][0]["grid"][0], "min(ceil_div(B*4, 128), SMS*8)");
  EXPECT_EQ(m["tensors"][0]["id_bound"], 50);
  EXPECT_EQ(m["params"][0]["random_range"], (nlohmann::json{0.5, 1.5}));
  EXPECT_EQ(m["params"][0]["unused_state"], (nlohmann::json{"num_batches_tracked"}));
  EXPECT_FALSE(m["tensors"][1].contains("id_bound"));  // written only where set
  EXPECT_FALSE(m["params"][1].contains("random_range"));
  EXPECT_FALSE(m["params"][1].contains("unused_state"));

  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(bundle, path);
  const Bundle loaded = read_bundle(path);
  EXPECT_EQ(bundle_to_json(loaded), m);
  EXPECT_EQ(loaded.launches[0].grid[0].eval({{"B", 100}, {"SMS", 78}}), 4);   // ceil(400 / 128) < 624
  EXPECT_EQ(loaded.launches[0].grid[0].eval({{"B", 1000}, {"SMS", 3}}), 24);  // ceil(4000 / 128) = 32 > 24
  EXPECT_EQ(loaded.tensors[0].id_bound, 50);
  EXPECT_EQ(loaded.tensors[1].id_bound, 0);
  EXPECT_EQ(loaded.params[0].hints.random_range, (std::array<double, 2>{0.5, 1.5}));
  EXPECT_EQ(loaded.params[0].hints.unused_state, std::vector<std::string>{"num_batches_tracked"});
  EXPECT_FALSE(loaded.params[1].hints.random_range.has_value());

  auto with = [&](const std::function<void(nlohmann::json&)>& edit) { return load_error_edited(path, m, edit); };
  const std::string prefix = fmt::format("bundle '{}': manifest.json: ", path);
  EXPECT_EQ(with([](nlohmann::json& e) {
              e["params"][0]["random_range"] = {1.5, 0.5};
            }),
            prefix + "params[0].random_range: expected [low, high] with low < high");
  EXPECT_EQ(with([](nlohmann::json& e) { e["params"][0]["unused_state"] = 3; }),
            prefix + "params[0].unused_state: expected an array, found number");
  EXPECT_EQ(with([](nlohmann::json& e) { e["tensors"][0]["id_bound"] = "many"; }),
            prefix + "tensors[0].id_bound: expected an integer, found \"many\"");
}

// Each value of the manifest's text, one per line (a list's entries, or the value of a key of the
// top level), as nlohmann's compact dump of it: keys sorted, numbers and escapes written its way.
void expect_nlohmann_dumps(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == ',') line.pop_back();
    if (line == "{" || line == "}" || line == "  ]") continue;
    std::string value = line.rfind("    ", 0) == 0 ? line.substr(4) : line.substr(line.find("\": ") + 3);
    if (value == "[") continue;
    EXPECT_EQ(nlohmann::json::parse(value).dump(), value);
  }
}

TEST(Bundle, ManifestTextIsNlohmannsDumpOfBundleToJson) {
  static const Registry registry = testing::test_registry();
  ScratchDir dir;
  Graph graph = testing::test_graph(registry, "  - {name: t1, op: t.tensor_map, inputs: [x, z]}\n", "t1");
  Bundle bundle = sample();
  for (const BundleLaunch& launch : compile_graph(graph, registry, testing::test_options(dir.str("cache"))).launches) {
    bundle.launches.push_back(launch);
    bundle.launches.back().kernel = 0;
  }
  // Every optional field set, and strings that need escaping.
  bundle.spec_path = "dir/\xc3\xa9\t\"spec\".yaml";
  bundle.nodes[0].requested_dtype = DType::kF32;
  bundle.nodes[0].fused_from = {"x\\y", "z"};
  bundle.kernels[0].reqntid = std::array<int, 3>{128, 1, 1};
  bundle.launches[1].args[7].fvalue = std::nan("");
  bundle.tensors[0].id_bound = 50;
  bundle.params[0].hints.random_range = std::array<double, 2>{1e-05, 1.5};
  bundle.params[0].hints.unused_state = {"num_batches_tracked"};

  const std::string path = dir.str("t.teeny");
  write_bundle(bundle, path);
  const std::string text = slurp(fs::path(path) / "manifest.json");
  expect_nlohmann_dumps(text);
  EXPECT_EQ(nlohmann::json::parse(text), bundle_to_json(bundle));
  EXPECT_EQ(bundle_to_json(bundle)["launches"][1]["args"][7]["value"], "nan");
  EXPECT_EQ(bundle_to_json(bundle)["graph"]["spec"], bundle.spec_path);
}

TEST(Bundle, LaunchesAlikeButForTheirNamesAreWrittenWithTheirOwn) {
  ScratchDir dir;
  Bundle bundle = sample();
  const size_t first = bundle.launches.size();
  auto like_launch_0 = [&](const std::string& node, int index) {
    BundleLaunch launch = bundle.launches[0];
    launch.node = node;
    launch.index = index;
    for (BundleArg& arg : launch.args)
      if (is_pointer(arg.kind)) arg.tensor = node + "." + arg.name;
    return launch;
  };
  // Runs of launches alike but for node, index and tensors (one needing escapes), and one that
  // differs in a cost between them.
  bundle.launches.push_back(like_launch_0("b1", 1));
  bundle.launches.push_back(like_launch_0("b\"2", 2));
  bundle.launches.push_back(like_launch_0("b3", 3));
  bundle.launches.back().bytes = Expr(777);
  bundle.launches.push_back(like_launch_0("b4", 4));
  bundle.launches.push_back(like_launch_0("b5", 5));

  const std::string path = dir.str("t.teeny");
  write_bundle(bundle, path);
  const std::string text = slurp(fs::path(path) / "manifest.json");
  expect_nlohmann_dumps(text);
  const nlohmann::json launches = nlohmann::json::parse(text)["launches"];
  for (size_t k = first; k < bundle.launches.size(); ++k) {
    const BundleLaunch& launch = bundle.launches[k];
    nlohmann::json expected = launches[0];  // written in full, first
    expected["node"] = launch.node;
    expected["index"] = launch.index;
    for (size_t a = 0; a < launch.args.size(); ++a)
      if (is_pointer(launch.args[a].kind)) expected["args"][a]["tensor"] = launch.args[a].tensor;
    if (k == first + 2) expected["bytes"] = "777";
    EXPECT_EQ(launches[k], expected) << "launch " << k;
  }
}

TEST(Bundle, CorruptedPtxNamesTheFile) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  const std::string file = "kernels/" + sample().kernels[1].name + ".ptx";
  fs::path ptx = fs::path(path) / file;
  std::string text = slurp(ptx);
  text[text.size() / 2] ^= 1;
  spit(ptx, text);
  EXPECT_EQ(load_error(path), fmt::format("bundle '{}': {} has been altered: its SHA-256 is {}, "
                                          "the manifest says {}",
                                          path, file, sha256_hex(text), sha256_hex(sample().kernels[1].ptx)));
}

TEST(Bundle, TruncatedManifest) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  fs::path manifest = fs::path(path) / "manifest.json";
  std::string text = slurp(manifest);
  spit(manifest, text.substr(0, text.size() / 2));
  std::string message = load_error(path);
  std::string prefix = fmt::format("bundle '{}': manifest.json is not valid JSON: parse error at line ", path);
  EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
}

TEST(Bundle, WrongFormatVersion) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  fs::path manifest = fs::path(path) / "manifest.json";
  nlohmann::json m = nlohmann::json::parse(slurp(manifest));
  m["format_version"] = kBundleFormatVersion + 1;
  spit(manifest, m.dump());
  EXPECT_EQ(load_error(path),
            fmt::format("bundle '{}': manifest.json: format_version: bundle format version {} is not "
                        "supported (this teeny reads version {}); recompile the graph with this teeny",
                        path, kBundleFormatVersion + 1, kBundleFormatVersion));
}

TEST(Bundle, MissingFiles) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  fs::remove(fs::path(path) / "params.bin");
  EXPECT_EQ(load_error(path), fmt::format("bundle '{}': missing file params.bin", path));
  fs::remove(fs::path(path) / "kernels" / "t_kernel.ptx");
  EXPECT_EQ(load_error(path), fmt::format("bundle '{}': missing file kernels/t_kernel.ptx", path));
  fs::remove(fs::path(path) / "manifest.json");
  EXPECT_EQ(load_error(path), fmt::format("bundle '{}': missing file manifest.json", path));
  EXPECT_EQ(load_error(dir.str("nothing")), fmt::format("bundle '{}': no such directory", dir.str("nothing")));
}

TEST(Bundle, MalformedManifestFieldsNameTheirPath) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  const nlohmann::json good = nlohmann::json::parse(slurp(fs::path(path) / "manifest.json"));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) { return load_error_edited(path, good, edit); };
  const std::string prefix = fmt::format("bundle '{}': manifest.json: ", path);
  EXPECT_EQ(with([](nlohmann::json& m) { m["launches"][1]["args"][0].erase("size"); }),
            prefix + "launches[1].args[0]: missing key 'size'");
  EXPECT_EQ(with([](nlohmann::json& m) {
              m["launches"][0]["grid"][0] = "ceil_div(B*4,";
            }).rfind(prefix + "launches[0].grid[0]: bad expression 'ceil_div(B*4,': ", 0),
            0u);
  EXPECT_EQ(with([](nlohmann::json& m) { m["launches"][0]["kernel"] = "nope"; }),
            prefix + "launches[0].kernel: unknown kernel 'nope'");
  EXPECT_EQ(with([](nlohmann::json& m) { m["kernels"][0]["name"] = "../../evil"; }),
            prefix + "kernels[0].name: kernel name '../../evil' is not an identifier");
  EXPECT_EQ(with([](nlohmann::json& m) { m["params"][1]["size"] = 4096; }),
            prefix + "params[1]: bytes [0, 4096) lie outside params.bin (32 bytes)");
  EXPECT_EQ(with([](nlohmann::json& m) { m["tensors"][0]["dtype"] = "f64"; }),
            prefix + "tensors[0].dtype: unknown dtype 'f64'");
}

// What compile would never write is refused on load, as strictly as compile checks it.
TEST(BundleValidation, ManifestValuesOutOfRangeAreRefused) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  const nlohmann::json good = nlohmann::json::parse(slurp(fs::path(path) / "manifest.json"));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) { return load_error_edited(path, good, edit); };
  const std::string prefix = fmt::format("bundle '{}': manifest.json: ", path);
  EXPECT_EQ(with([](nlohmann::json& m) { m["dims"][0]["min"] = 2000; }),
            prefix + "dims[0]: min 2000 is greater than max 1024");
  EXPECT_EQ(with([](nlohmann::json& m) { m["dims"][0]["default"] = 2000; }),
            prefix + "dims[0]: default 2000 is outside [1, 1024]");
  EXPECT_EQ(with([](nlohmann::json& m) { m["dims"][0]["min"] = 0; }),
            prefix + "dims[0]: min must be at least 1, got 0");
  EXPECT_EQ(with([](nlohmann::json& m) { m["dims"][0]["max"] = 18446744073709551615u; }),
            prefix + "dims[0].max: 18446744073709551615 is out of range");
  EXPECT_EQ(with([](nlohmann::json& m) { m["fixed"]["B"] = 5000; }), prefix + "fixed.B: 5000 is outside [1, 1024]");
  EXPECT_EQ(with([](nlohmann::json& m) { m["launches"][0]["args"][0]["size"] = 1 << 29; }),
            prefix +
                "launches[0].args[0]: input argument 'x' has size 536870912 at offset 0; expected size 8 at "
                "offset 0");
  EXPECT_EQ(with([](nlohmann::json& m) { m["launches"][0]["args"][6]["offset"] = 44; }),
            prefix + "launches[0].args[6]: i64 argument 'count' has size 8 at offset 44; expected size 8 at offset 48");
  EXPECT_EQ(with([](nlohmann::json& m) {
              m["launches"][0]["block"] = {2048, 1, 1};
            }),
            prefix +
                "launches[0].block: block [2048, 1, 1] is not a valid CUDA block (each dim >= 1, z <= 64, at most "
                "1024 threads)");
  EXPECT_EQ(with([](nlohmann::json& m) { m["launches"][0]["grid"][2] = "70000"; }),
            prefix + "launches[0].grid[2]: grid.z = 70000 is outside [1, 65535]");
  EXPECT_EQ(with([](nlohmann::json& m) { m["launches"][0]["dynamic_smem"] = "300000"; }),
            prefix +
                "launches[0].dynamic_smem: 300000 bytes of dynamic shared memory is outside [0, 232448], what "
                "CUDA GPUs allow");
}

TEST(BundleValidation, GraphOrderAndNamesAreChecked) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  const nlohmann::json good = nlohmann::json::parse(slurp(fs::path(path) / "manifest.json"));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) { return load_error_edited(path, good, edit); };
  const std::string prefix = fmt::format("bundle '{}': manifest.json: ", path);
  EXPECT_EQ(with([](nlohmann::json& m) { std::swap(m["nodes"][0], m["nodes"][1]); }),
            prefix + "nodes[0].inputs[0]: 'a' is neither a graph input nor the output of an earlier node");
  EXPECT_EQ(with([](nlohmann::json& m) { m["nodes"][1]["name"] = "a"; }),
            prefix + "nodes[1].name: node 'a' is defined twice or has no output tensor produced by it");
  EXPECT_EQ(with([](nlohmann::json& m) { m["tensors"][0]["producer"] = "a"; }),
            prefix + "tensors[0].producer: tensor 'x' is not produced by node 'a'");
  EXPECT_EQ(with([](nlohmann::json& m) { m["params"][0]["node"] = "zz"; }),
            prefix + "params[0].node: unknown node 'zz'");
}

TEST(BundleValidation, NumbersAndNestingTheParserCannotHoldAreErrors) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  const fs::path manifest = fs::path(path) / "manifest.json";
  const std::string good = slurp(manifest);
  spit(manifest, "{\"format_version\": 1e999}");
  EXPECT_EQ(load_error(path), fmt::format("bundle '{}': manifest.json: number overflow parsing '1e999'", path));
  nlohmann::json m = nlohmann::json::parse(good);
  m["nodes"][0]["attrs"] = nlohmann::json::object();
  std::string text = m.dump();
  const std::string attrs = "\"attrs\":{}";
  text.replace(text.find(attrs), attrs.size(), "\"attrs\":" + std::string(100000, '[') + std::string(100000, ']'));
  spit(manifest, text);
  const std::string message = load_error(path);
  EXPECT_EQ(message.rfind(fmt::format("bundle '{}': manifest.json: lists and objects nested more than 64 deep, at "
                                      "line 1, column ",
                                      path),
                          0),
            0u)
      << message;
}

// A kernel file swapped for another kernel's, its checksum updated to match: the manifest's
// account of the entry no longer fits the PTX actually loaded.
TEST(BundleValidation, SwappedKernelFileIsDetectedWithoutAGpu) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  const BundleKernel& kernel = sample().kernels[1];
  const std::string file = "kernels/" + kernel.name + ".ptx";
  const std::string foreign =
      ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry " + kernel.entry +
      "(\n.param .u64 p0,\n.param .u64 p1,\n.param .u32 p2\n)\n.maxntid 128, 1, 1\n{\nret;\n}\n";
  spit(fs::path(path) / file, foreign);
  nlohmann::json m = nlohmann::json::parse(slurp(fs::path(path) / "manifest.json"));
  m["checksums"][file] = sha256_hex(foreign);
  spit(fs::path(path) / "manifest.json", m.dump());
  const std::string where = fmt::format("kernel '{}' in {}/{}", kernel.name, path, file);
  EXPECT_EQ(load_error(path), where +
                                  ": the PTX entry's parameters are (.u64, .u64, .u32) but the manifest lists "
                                  "(.u64, .u64, .u64, .u64, .u64, .u32, .u64, .f32)");
  m["kernels"][1]["ptx_params"] = {".u64", ".u64", ".u32"};
  spit(fs::path(path) / "manifest.json", m.dump());
  EXPECT_EQ(load_error(path),
            where + ": the PTX entry takes 3 parameters (20 bytes) but the manifest packs 8 (60 bytes) for launch 'b'");
}

TEST(BundleValidation, BlocksAreCheckedAgainstTheLoadedPtx) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  const nlohmann::json good = nlohmann::json::parse(slurp(fs::path(path) / "manifest.json"));
  const BundleKernel& kernel = sample().kernels[0];
  ASSERT_EQ(kernel.maxntid, (std::array<int, 3>{128, 1, 1}));
  EXPECT_EQ(load_error_edited(path, good,
                              [](nlohmann::json& m) {
                                m["launches"][0]["block"] = {256, 1, 1};
                              }),
            fmt::format("kernel '{0}' in {1}/kernels/{0}.ptx: launch 'a': block [256, 1, 1] exceeds '.maxntid 128, 1, "
                        "1' of '{2}': expected at most 128 threads, found 256",
                        kernel.name, path, kernel.entry));
}

TEST(BundleValidation, FilesThatAreNotRegularFilesAreRefused) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  write_bundle(sample(), path);
  fs::remove(fs::path(path) / "params.bin");
  fs::create_directory(fs::path(path) / "params.bin");
  EXPECT_EQ(load_error(path), fmt::format("cannot read bundle file '{}/params.bin': is a directory", path));
  fs::remove(fs::path(path) / "params.bin");
  ASSERT_EQ(mkfifo((fs::path(path) / "params.bin").c_str(), 0600), 0);
  EXPECT_EQ(load_error(path), fmt::format("cannot read bundle file '{}/params.bin': not a regular file", path));
  fs::remove(fs::path(path) / "params.bin");
  const fs::path manifest = fs::path(path) / "manifest.json";
  fs::resize_file(manifest, (uint64_t{1} << 30) + 1);  // sparse
  EXPECT_EQ(load_error(path),
            fmt::format("cannot read bundle file '{}/manifest.json': larger than the 1024 MiB limit", path));
  write_bundle(sample(), path);
  fs::remove(fs::path(path) / "params.bin");
  spit(fs::path(path) / "params.bin", std::string(33, '\0'));
  EXPECT_EQ(load_error(path), fmt::format("bundle '{}': params.bin is 33 bytes, the manifest says 32", path));
}

TEST(BundleWrite, ReplacesAnExistingBundleOnlyOnSuccess) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  Bundle first = sample();
  first.graph_name = "first";
  write_bundle(first, path);
  Bundle second = sample();
  second.graph_name = "second";
  write_bundle(second, path);
  EXPECT_EQ(read_bundle(path).graph_name, "second");
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"t.teeny"});  // no temp or old dirs left

  Bundle bad = sample();
  bad.kernels[0].name = "bad/name";
  try {
    write_bundle(bad, path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), fmt::format("cannot write bundle '{}': kernel name 'bad/name' is not an identifier", path));
  }
  EXPECT_EQ(read_bundle(path).graph_name, "second");
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"t.teeny"});
}

TEST(BundleWrite, RefusesToReplaceSomethingThatIsNotABundle) {
  ScratchDir dir;
  fs::create_directory(dir.path() / "precious");
  spit(dir.path() / "precious" / "notes.txt", "keep me");
  try {
    write_bundle(sample(), dir.str("precious"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), fmt::format("cannot write bundle '{}': it exists and is not a teeny bundle (no "
                                       "manifest.json); not replacing it",
                                       dir.str("precious")));
  }
  EXPECT_EQ(slurp(dir.path() / "precious" / "notes.txt"), "keep me");
}

// A write that fails part-way (here: the file size limit, as a full disk would) leaves no
// temp directory and the previous bundle intact. Runs in a child so the limit stays there.
TEST(BundleWrite, FailureMidWriteLeavesNoTraceAndKeepsThePreviousBundle) {
  ScratchDir dir;
  const std::string path = dir.str("t.teeny");
  Bundle previous = sample();
  previous.graph_name = "previous";
  write_bundle(previous, path);
  const std::string manifest_before = slurp(fs::path(path) / "manifest.json");

  Bundle big = sample();
  big.kernels[1].ptx += std::string(1 << 20, ' ');  // the second kernel file exceeds the limit
  ASSERT_GT(big.kernels[0].ptx.size(), 0u);

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG instead of killing
    rlimit limit{256 * 1024, 256 * 1024};
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      write_bundle(big, path);
      _exit(10);  // should have failed
    } catch (const Error& e) {
      bool names_file = e.message().find(big.kernels[1].name + ".ptx") != std::string::npos &&
                        e.message().find("File too large") != std::string::npos;
      _exit(names_file ? 0 : 11);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: the write succeeded; 11: the error did not name the file and cause";

  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"t.teeny"});
  EXPECT_EQ(slurp(fs::path(path) / "manifest.json"), manifest_before);
  EXPECT_EQ(read_bundle(path).graph_name, "previous");
}

TEST(BundleWrite, StaleTempDirsOfDeadProcessesAreCleanedUp) {
  ScratchDir dir;
  // A pid that cannot be running: beyond the kernel's pid limit.
  fs::create_directory(dir.path() / ".t.teeny.tmp-99999999-0");
  spit(dir.path() / ".t.teeny.tmp-99999999-0" / "manifest.json", "{");
  fs::create_directory(dir.path() / ".other.teeny.tmp-99999999-0");  // another target's: removed too
  write_bundle(sample(), dir.str("t.teeny"));
  EXPECT_EQ(listing(dir.path()), (std::vector<std::string>{"t.teeny"}));
}

}  // namespace
}  // namespace teeny
