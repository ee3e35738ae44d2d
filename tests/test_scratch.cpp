// Scratch buffers (Lowering::scratch): compile makes each node's buffers tensors of its own, the
// manifest keeps and checks them, the memory plan keeps them only while their node runs, launches
// point at them, inspect shows them; and every mistake an op can make with them is an error.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/binding.h"
#include "core/bundle.h"
#include "core/host_executor.h"
#include "core/inspect.h"
#include "core/run_data.h"
#include "tests/teeny_command.h"
#include "tests/test_compile_util.h"

namespace teeny {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

const Registry& test_ops() {
  static const Registry registry = testing::test_registry();
  return registry;
}

const std::string& suite_cache() {
  static ScratchDir dir;
  return dir.path().native();
}

Bundle compile_nodes(const std::string& nodes, const std::string& output) {
  Graph graph = testing::test_graph(test_ops(), nodes, output);
  return compile_graph(graph, test_ops(), testing::test_options(suite_cache()));
}

// a = t.good(x, z); s = t.scratch(a), its buffer "s#partials" [B*8]; c = t.good(s, z).
const std::string kChain =
    "  - {name: a, op: t.good, inputs: [x, z]}\n"
    "  - {name: s, op: t.scratch, inputs: [a]}\n"
    "  - {name: c, op: t.good, inputs: [s, z]}\n";

const Bundle& chain() {
  static const Bundle bundle = compile_nodes(kChain, "c");
  return bundle;
}

std::string compile_error(const std::string& op) {
  try {
    compile_nodes(fmt::format("  - {{name: s, op: {}, inputs: [x]}}\n", op), "s");
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

const DeviceFacts kH200{132, 227 * 1024, 50 << 20};

TEST(Scratch, ABufferIsATensorOfItsNodeAfterItsOutput) {
  const Bundle& b = chain();
  std::vector<std::string> names;
  for (const BundleTensor& t : b.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "z", "a", "s", "s#partials", "c"}));
  const BundleTensor& buffer = b.tensor("s#partials");
  EXPECT_TRUE(buffer.scratch);
  EXPECT_EQ(buffer.producer, "s");
  EXPECT_EQ(buffer.dtype, DType::kF32);
  EXPECT_EQ(shape_str(buffer.shape), "[B*8]");
  EXPECT_EQ(buffer.row_stride.str(), "B*8");
  EXPECT_EQ(buffer.alias_of, "");
  for (const char* other : {"x", "a", "s", "c"}) EXPECT_FALSE(b.tensor(other).scratch) << other;
  EXPECT_EQ(b.outputs, (std::vector<std::string>{"c"}));
}

TEST(Scratch, BothLaunchesPassTheBufferAsAPointer) {
  const Bundle& b = chain();
  std::vector<const BundleLaunch*> launches;
  for (const BundleLaunch& l : b.launches) {
    if (l.node == "s") launches.push_back(&l);
  }
  ASSERT_EQ(launches.size(), 2u);
  for (const BundleLaunch* l : launches) {
    const BundleArg& arg = l->args.at(1);
    EXPECT_EQ(arg.kind, ArgKind::kScratch);
    EXPECT_EQ(arg.name, "partials");
    EXPECT_EQ(arg.c_type, "float*");
    EXPECT_EQ(arg.ptx_type, ".u64");
    EXPECT_EQ(arg.size, 8);
    EXPECT_EQ(arg.offset, 8);
    EXPECT_EQ(arg.tensor, "s#partials");
    EXPECT_EQ(l->args.at(2).tensor, "s");  // the output, at 16
    EXPECT_EQ(l->args.at(2).offset, 16);
  }
  EXPECT_EQ(launches[0]->kernel, launches[1]->kernel);
}

TEST(Scratch, NodesSharingALoweringEachGetTheirOwnBuffer) {
  const Bundle b = compile_nodes(
      "  - {name: s1, op: t.scratch, inputs: [x]}\n"
      "  - {name: s2, op: t.scratch, inputs: [s1]}\n",
      "s2");
  std::vector<std::string> scratch_args;
  for (const BundleLaunch& l : b.launches) scratch_args.push_back(l.args.at(1).tensor);
  EXPECT_EQ(scratch_args, (std::vector<std::string>{"s1#partials", "s1#partials", "s2#partials", "s2#partials"}));
  EXPECT_EQ(b.tensor("s2#partials").producer, "s2");
}

TEST(Scratch, TheManifestKeepsTheBufferAndOnlyItsTensorSaysScratch) {
  ScratchDir dir;
  write_bundle(chain(), dir.str("s.teeny"));
  const nlohmann::json manifest = nlohmann::json::parse(testing::slurp(dir.path() / "s.teeny" / "manifest.json"));
  EXPECT_EQ(manifest["tensors"][4], (nlohmann::json{{"alias_of", ""},
                                                    {"dtype", "f32"},
                                                    {"name", "s#partials"},
                                                    {"producer", "s"},
                                                    {"row_stride", "B*8"},
                                                    {"scratch", true},
                                                    {"shape", {"B*8"}}}));
  EXPECT_FALSE(manifest["tensors"][3].contains("scratch"));  // manifests without scratch are as before
  const nlohmann::json& arg = manifest["launches"][1]["args"][1];
  EXPECT_EQ(arg["kind"], "scratch");
  EXPECT_EQ(arg["tensor"], "s#partials");
  EXPECT_EQ(arg["dtype"], "f32");

  const Bundle loaded = read_bundle(dir.str("s.teeny"));
  EXPECT_EQ(bundle_to_json(loaded), bundle_to_json(chain()));
  EXPECT_TRUE(loaded.tensor("s#partials").scratch);
  EXPECT_EQ(loaded.launches[2].args[1].kind, ArgKind::kScratch);
}

std::string load_error_edited(const std::string& path, const nlohmann::json& manifest,
                              const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json edited = manifest;
  edit(edited);
  testing::spit(fs::path(path) / "manifest.json", edited.dump());
  try {
    read_bundle(path);
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(Scratch, LoadingRefusesBuffersCompileWouldNeverWrite) {
  ScratchDir dir;
  const std::string path = dir.str("s.teeny");
  write_bundle(chain(), path);
  const nlohmann::json good = nlohmann::json::parse(testing::slurp(fs::path(path) / "manifest.json"));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) { return load_error_edited(path, good, edit); };
  const std::string prefix = fmt::format("bundle '{}': manifest.json: ", path);
  // tensors[4] is s#partials; launches[1] and [2] are s's, launches[3] is c's.
  EXPECT_EQ(with([](nlohmann::json& m) { m["tensors"][4]["producer"] = "a"; }),
            prefix +
                "tensors[4].name: scratch buffer 's#partials' is not named '<node>#<buffer>' after its producer "
                "'a'");
  EXPECT_EQ(with([](nlohmann::json& m) { m["tensors"][4]["producer"] = "q"; }),
            prefix +
                "tensors[4].name: scratch buffer 's#partials' is not named '<node>#<buffer>' after its producer "
                "'q'");
  EXPECT_EQ(with([](nlohmann::json& m) {
              m["tensors"][4]["shape"] = nlohmann::json::array({"B", "8"});
            }),
            prefix +
                "tensors[4].shape: scratch buffer 's#partials' has shape [B, 8] and row stride B*8; expected "
                "one dim, its stride");
  EXPECT_EQ(with([](nlohmann::json& m) { m["tensors"][4]["alias_of"] = "a"; }),
            prefix + "tensors[4].alias_of: scratch buffer 's#partials' is a view");
  EXPECT_EQ(with([](nlohmann::json& m) { m["tensors"][3]["alias_of"] = "s#partials"; }),
            prefix + "tensors[3].alias_of: 's#partials' is a scratch buffer");
  EXPECT_EQ(with([](nlohmann::json& m) { m["outputs"] = nlohmann::json::array({"s#partials"}); }),
            prefix + "outputs[0]: 's#partials' is a scratch buffer");
  EXPECT_EQ(with([](nlohmann::json& m) { m["nodes"][2]["inputs"][0] = "s#partials"; }),
            prefix + "nodes[2].inputs[0]: 's#partials' is neither a graph input nor the output of an earlier node");
  EXPECT_EQ(with([](nlohmann::json& m) { m["launches"][3]["args"][0]["tensor"] = "s#partials"; }),
            prefix + "launches[3].args[0].tensor: 's#partials' is a scratch buffer");
  EXPECT_EQ(with([](nlohmann::json& m) { m["launches"][1]["args"][1]["tensor"] = "a"; }),
            prefix + "launches[1].args[1].tensor: 'a' is not a scratch buffer of node 's'");
  EXPECT_EQ(with([](nlohmann::json& m) {
              m["launches"][3]["args"][4]["kind"] = "scratch";  // c's output 'y'
              m["launches"][3]["args"][4]["tensor"] = "s#partials";
            }),
            prefix + "launches[3].args[4].tensor: 's#partials' is not a scratch buffer of node 'c'");
}

TEST(Scratch, TheBufferLivesOnlyWhileItsNodeRunsAndSharesBytesOtherwise) {
  const Bundle& b = chain();
  const BoundBundle bound = bind_bundle(b, bundle_bindings(b, {"B=8"}), "s.teeny");
  // 8 x 4 f32 = 128 bytes a tensor (one 256-byte slot), the buffer 8 x 8 f32 = 256 bytes.
  EXPECT_EQ(bound.tensor("s#partials").bytes, 256u);
  EXPECT_EQ(bound.tensor("s#partials").shape, (std::vector<int64_t>{64}));
  const std::map<std::string, uint64_t>& at = bound.plan.offsets;
  // Largest first: the buffer at 0. Everything live at step 1 (x, z, a read by s, s itself) takes
  // a slot of its own above it; c, written at step 2 when the buffer is dead, reuses its bytes.
  EXPECT_EQ(at.at("s#partials"), 0u);
  EXPECT_EQ(at.at("c"), 0u);
  std::set<uint64_t> live_at_s;
  for (const char* name : {"x", "z", "a", "s"}) {
    EXPECT_GE(at.at(name), 256u) << name;
    live_at_s.insert(at.at(name));
  }
  EXPECT_EQ(live_at_s.size(), 4u);
  EXPECT_EQ(bound.plan.arena_bytes, 5u * 256);
  EXPECT_EQ(bound.plan.naive_bytes, 6u * 256);
  EXPECT_EQ(bound.plan.buffers, 6);
}

TEST(Scratch, LaunchesBindTheBufferAsTheirTarget) {
  const Bundle& b = chain();
  BoundBundle bound = bind_bundle(b, bundle_bindings(b, {"B=8"}), "s.teeny");
  bind_launches(bound, kH200);
  ASSERT_EQ(bound.launches.size(), 4u);
  for (size_t i : {1, 2}) {
    const BoundArg& arg = bound.launches[i].args.at(1);
    EXPECT_EQ(arg.kind, ArgKind::kScratch);
    EXPECT_EQ(arg.target, "s#partials");
    EXPECT_EQ(arg.offset, 8);
    EXPECT_EQ(bound.launches[i].args.at(4).ivalue, static_cast<int64_t>(i - 1));  // the phase
  }
}

TEST(Scratch, TheHostReferenceIgnoresTheBuffer) {
  const Bundle& b = chain();
  const BoundBundle bound = bind_bundle(b, bundle_bindings(b, {"B=2"}), "s.teeny");
  DataOptions options;
  const RunData data = prepare_data(bound, options);
  const std::map<std::string, HostTensor> values = run_host(bound, test_ops(), data);
  EXPECT_EQ(values.count("s#partials"), 0u);
  const HostTensor& a = values.at("a");
  const HostTensor& s = values.at("s");
  ASSERT_EQ(s.data.size(), 8u);
  for (size_t i = 0; i < s.data.size(); ++i) EXPECT_FLOAT_EQ(s.data[i], 2 * a.data[i] + 1);
}

TEST(Scratch, InspectShowsTheBufferAndTheArgumentBoundToIt) {
  const Inspection view = inspect_bundle(chain(), {{"B", 8}}, {}, std::string("s"));
  ASSERT_EQ(view.nodes.size(), 1u);
  const InspectedNode& s = view.nodes[0];
  EXPECT_EQ(s.output.name, "s");
  ASSERT_EQ(s.scratch.size(), 1u);
  EXPECT_EQ(s.scratch[0].name, "s#partials");
  EXPECT_EQ(s.scratch[0].dtype, "f32");
  EXPECT_EQ(s.scratch[0].elements.expr, "B*8");
  EXPECT_EQ(s.scratch[0].elements.value, 64);
  EXPECT_EQ(s.scratch[0].bytes.value, 256);
  const InspectedArg& arg = s.launches.at(0).args.at(1);
  EXPECT_EQ(arg.kind, "scratch");
  EXPECT_EQ(arg.bound_to, "s#partials");
  EXPECT_EQ(arg.value, "f32 [64]");
  EXPECT_TRUE(inspect_bundle(chain(), {{"B", 8}}, {}, std::string("a")).nodes[0].scratch.empty());

  ScratchDir dir;
  write_bundle(chain(), dir.str("s.teeny"));
  testing::Command table =
      testing::run_teeny("inspect s.teeny --bind B=8 --node s", {dir.str(), {{"TEENY_CACHE_DIR", dir.str("cache")}}});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("  output s f32 [B, 4] = [8, 4], row stride 4\n"
                           "  SCRATCH     DTYPE  ELEMENTS  BYTES\n"
                           "  s#partials  f32    B*8 = 64  B*32 = 256\n"),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("    1    partials  float*        .u64  8     8       s#partials  f32 [64]\n"),
            std::string::npos)
      << table.out;
  testing::Command json = testing::run_teeny("inspect s.teeny --bind B=8 --node s --format json",
                                             {dir.str(), {{"TEENY_CACHE_DIR", dir.str("cache")}}});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json node = nlohmann::json::parse(json.out)["nodes"][0];
  EXPECT_EQ(node["scratch"], (nlohmann::json{{{"name", "s#partials"},
                                              {"dtype", "f32"},
                                              {"elements", {{"expr", "B*8"}, {"value", 64}}},
                                              {"bytes", {{"expr", "B*32"}, {"value", 256}}}}}));
  EXPECT_EQ(node["launches"][0]["args"][1]["kind"], "scratch");
  EXPECT_EQ(node["launches"][0]["args"][1]["bound_to"], "s#partials");
}

// ---- an op's mistakes -----------------------------------------------------------------------------

TEST(ScratchVerify, AnArgumentMustNameABufferOfItsOwnLowering) {
  EXPECT_EQ(compile_error("t.scratch_unknown"),
            "node 's': op 't.scratch_unknown', launch 0, argument 1 'partials': the lowering has no scratch buffer "
            "'partial' (did you mean 'partials'?)");
}

TEST(ScratchVerify, AnArgumentHasItsBuffersDtype) {
  EXPECT_EQ(compile_error("t.scratch_wrong_dtype"),
            "node 's': op 't.scratch_wrong_dtype', launch 0, argument 1 'partials': dtype mismatch: expected bf16 "
            "(scratch buffer 'partials'), found f32");
}

TEST(ScratchVerify, BuffersAreNamedOnceByIdentifiers) {
  EXPECT_EQ(compile_error("t.scratch_twice"),
            "node 's': op 't.scratch_twice', scratch buffer 'partials' is declared twice");
  EXPECT_EQ(compile_error("t.scratch_bad_name"),
            "node 's': op 't.scratch_bad_name', scratch buffer '2partials' is not named by a C identifier");
}

TEST(ScratchVerify, BuffersAreSizedByTheGraphsDimsAlone) {
  EXPECT_EQ(compile_error("t.scratch_device_sized"),
            "node 's': op 't.scratch_device_sized', scratch buffer 'partials' elements 'SMS*4' uses 'SMS', which is "
            "not a dim of the graph");
  EXPECT_EQ(compile_error("t.scratch_empty"),
            "node 's': op 't.scratch_empty', scratch buffer 'partials' has 0 elements; it needs at least 1");
}

}  // namespace
}  // namespace teeny
