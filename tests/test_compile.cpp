// compile_graph: lowering, deduplication, argument layout, and every verification check
// firing on a deliberately wrong test-only op, with its exact text.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/compile.h"
#include "core/nvrtc.h"
#include "core/sha256.h"
#include "tests/test_compile_util.h"

namespace teeny {
namespace {

using testing::Fault;
using testing::ScratchDir;

const Registry& test_ops() {
  static const Registry registry = testing::test_registry();
  return registry;
}

// One scratch cache for the whole suite: identical kernels compile once.
const std::string& suite_cache() {
  static ScratchDir dir;
  return dir.path().native();
}

Bundle compile_nodes(const std::string& nodes, const std::string& output, CompileOptions options = {},
                     CompileStats* stats = nullptr) {
  Graph graph = testing::test_graph(test_ops(), nodes, output);
  if (options.cache_dir.empty()) options.cache_dir = suite_cache();
  return compile_graph(graph, test_ops(), options, stats);
}

// The message of the error compiling one node of `op`.
std::string compile_error(const std::string& op) {
  try {
    compile_nodes(fmt::format("  - {{name: t1, op: {}, inputs: [x, z]}}\n", op), "t1");
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

const std::string kEntry = "t_kernel_entry_point";

TEST(CompileGraph, GoodOpLayoutMatchesCudaParamBufferRules) {
  Bundle b = compile_nodes("  - {name: t1, op: t.good, inputs: [x, z]}\n", "t1");
  ASSERT_EQ(b.kernels.size(), 1u);
  EXPECT_EQ(b.kernels[0].name, "t_kernel");
  EXPECT_EQ(b.kernels[0].entry, kEntry);
  EXPECT_NE(b.kernels[0].ptx.find(".visible .entry " + kEntry + "("), std::string::npos);
  ASSERT_TRUE(b.kernels[0].maxntid.has_value());
  EXPECT_EQ(*b.kernels[0].maxntid, (std::array<int, 3>{128, 1, 1}));
  EXPECT_EQ(b.kernels[0].ptx_params,
            (std::vector<std::string>{".u64", ".u64", ".u64", ".u64", ".u64", ".u32", ".u64", ".f32"}));

  ASSERT_EQ(b.launches.size(), 1u);
  const BundleLaunch& l = b.launches[0];
  EXPECT_EQ(l.node, "t1");
  EXPECT_EQ(l.block, (std::array<int, 3>{128, 1, 1}));
  EXPECT_EQ(l.grid[0].str(), "ceil_div(B*4, 128)");
  EXPECT_EQ(l.grid[0].eval({{"B", 100}}), 4);  // 400 elements / 128 per block
  // Pointers at 0..32, int n at 40, long long count padded from 44 to 48, float alpha at 56.
  std::vector<int> offsets, sizes;
  std::vector<std::string> names, c_types, bound;
  for (const BundleArg& a : l.args) {
    offsets.push_back(a.offset);
    sizes.push_back(a.size);
    names.push_back(a.name);
    c_types.push_back(a.c_type);
    bound.push_back(a.tensor);
  }
  EXPECT_EQ(offsets, (std::vector<int>{0, 8, 16, 24, 32, 40, 48, 56}));
  EXPECT_EQ(sizes, (std::vector<int>{8, 8, 8, 8, 8, 4, 8, 4}));
  EXPECT_EQ(names, (std::vector<std::string>{"x", "z", "w", "table", "y", "n", "count", "alpha"}));
  EXPECT_EQ(c_types, (std::vector<std::string>{"const float*", "const float*", "const float*", "const float*", "float*",
                                               "int", "long long", "float"}));
  EXPECT_EQ(bound, (std::vector<std::string>{"x", "z", "t1.weight", "t1.table", "t1", "", "", ""}));
  EXPECT_EQ(l.args[5].value.str(), "B*4");
  EXPECT_EQ(l.args[7].fvalue, 0.5);
  EXPECT_EQ(l.bytes.eval({{"B", 10}}), 10 * 4 * 12 + 32);
  EXPECT_EQ(l.flops.eval({{"B", 10}}), 10 * 4 * 5);

  ASSERT_EQ(b.params.size(), 2u);
  EXPECT_EQ(b.params[0].name, "t1.weight");
  EXPECT_EQ(b.params[0].init, ParamInit::kTrained);
  EXPECT_EQ(b.params[1].name, "t1.table");
  EXPECT_EQ(b.params[1].init, ParamInit::kHost);
  EXPECT_EQ(b.params[1].offset, 0u);
  EXPECT_EQ(b.params[1].size, 16u);
  ASSERT_EQ(b.param_bytes.size(), 16u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(read_element(b.param_bytes.data(), DType::kF32, i), i + 1);

  ASSERT_EQ(b.tensors.size(), 3u);
  EXPECT_EQ(b.tensors[2].name, "t1");
  EXPECT_EQ(b.tensors[2].producer, "t1");
  EXPECT_EQ(shape_str(b.tensors[2].shape), "[B, 4]");
  EXPECT_EQ(b.inputs, (std::vector<std::string>{"x", "z"}));
  EXPECT_EQ(b.outputs, (std::vector<std::string>{"t1"}));
  EXPECT_EQ(b.arch, "sm_90");
  EXPECT_EQ(b.nvrtc_version, nvrtc_version());
  EXPECT_EQ(b.nvrtc_options.at(1), "--gpu-architecture=sm_90");
}

TEST(CompileGraph, IdenticalKernelsShareOneAndCollidingNamesGetAHashSuffix) {
  Bundle b = compile_nodes(
      "  - {name: a, op: t.good, inputs: [x, z]}\n"
      "  - {name: b, op: t.variant, inputs: [a, z], attrs: {k: 1}}\n"
      "  - {name: c, op: t.variant, inputs: [b, z], attrs: {k: 2}}\n"
      "  - {name: d, op: t.variant, inputs: [c, z], attrs: {k: 1}}\n"
      "  - {name: e, op: t.good, inputs: [d, z]}\n",
      "e");
  ASSERT_EQ(b.kernels.size(), 3u);
  EXPECT_EQ(b.kernels[0].name, "t_kernel");
  // The suffix is the first 8 hex digits of the SHA-256 of the kernel's translation unit (its entry
  // named after the base name).
  const Graph graph =
      testing::test_graph(test_ops(), "  - {name: a, op: t.variant, inputs: [x, z], attrs: {k: 1}}\n", "a");
  for (int k : {1, 2}) {
    KernelSource source = graph.nodes[0].op->lower(graph.nodes[0].ctx).kernels[0];
    source.function = fmt::format("t_body<{}>", k);
    const std::string name =
        "t_kernel_" + sha256_hex(kernel_translation_unit(source, "t_kernel_entry_point")).substr(0, 8);
    EXPECT_EQ(b.kernels[k].name, name);
    EXPECT_EQ(b.kernels[k].entry, name + "_entry_point");
    EXPECT_NE(b.kernels[k].ptx.find(".visible .entry " + name + "_entry_point("), std::string::npos);
  }
  std::vector<int> used;
  for (const BundleLaunch& l : b.launches) used.push_back(l.kernel);
  EXPECT_EQ(used, (std::vector<int>{0, 1, 2, 1, 0}));
}

TEST(CompileGraph, TranslationUnitIncludesTheHeaderAndForwardsTheParams) {
  KernelSource kernel;
  kernel.header = "k.cuh";
  kernel.function = "k_body<float, 4>";
  kernel.params = {input(0, "x", DType::kBF16), output("y", DType::kF32), i64("n", Expr(8)), f32("alpha", 1.0)};
  EXPECT_EQ(kernel_translation_unit(kernel, "k_entry"),
            "#include \"k.cuh\"\n\n"
            "extern \"C\" __global__ void k_entry(const __nv_bfloat16* x, float* y, long long n, float alpha) {\n"
            "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n"
            "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
            "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
            "#endif\n"
            "  k_body<float, 4>(x, y, n, alpha);\n}\n");
  kernel.max_threads = 256;
  EXPECT_NE(kernel_translation_unit(kernel, "k_entry").find("void __launch_bounds__(256) k_entry("), std::string::npos);
  kernel.min_blocks = 2;
  EXPECT_NE(kernel_translation_unit(kernel, "k_entry").find("void __launch_bounds__(256, 2) k_entry("),
            std::string::npos);
}

TEST(CompileGraph, ViewsAliasTheirInputBufferAndHaveNoKernel) {
  Bundle b = compile_nodes(
      "  - {name: t1, op: t.good, inputs: [x, z]}\n"
      "  - {name: flat, op: t.view, inputs: [t1]}\n"
      "  - {name: flat2, op: t.view, inputs: [flat]}\n",
      "flat2");
  EXPECT_EQ(b.launches.size(), 1u);
  EXPECT_EQ(b.tensor("flat").alias_of, "t1");
  EXPECT_EQ(b.tensor("flat2").alias_of, "t1");  // the buffer's owner, not the intermediate view
  EXPECT_EQ(shape_str(b.tensor("flat2").shape), "[B*4]");
}

TEST(CompileGraph, ViewOfPaddedRowsIsRefused) {
  try {
    compile_nodes(
        "  - {name: p, op: t.padded, inputs: [x, z]}\n"
        "  - {name: flat, op: t.view, inputs: [p]}\n",
        "flat");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "node 'flat': op 't.view', cannot view 'p' as [B*4]: its rows are padded (row stride 8, last dim 4), "
              "so a view must keep the last dim and stride");
    ASSERT_TRUE(e.location().has_value());
    EXPECT_EQ(e.location()->file, "tgraph.yaml");
    EXPECT_EQ(e.location()->line, 9);
  }
}

TEST(CompileGraph, FixedDimsAreSubstitutedBeforeLowering) {
  CompileOptions options;
  options.fixed = {{"B", 16}};
  Bundle b = compile_nodes("  - {name: t1, op: t.good, inputs: [x, z]}\n", "t1", options);
  EXPECT_EQ(shape_str(b.tensor("x").shape), "[16, 4]");
  EXPECT_EQ(shape_str(b.tensor("t1").shape), "[16, 4]");
  EXPECT_EQ(b.launches[0].grid[0].str(), "1");
  EXPECT_EQ(b.launches[0].args[5].value.str(), "64");
  EXPECT_EQ(b.fixed, (Bindings{{"B", 16}}));

  options.fixed = {{"B", 2000}};
  try {
    compile_nodes("  - {name: t1, op: t.good, inputs: [x, z]}\n", "t1", options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "--bind B=2000: B must be in [1, 1024]");
  }
  options.fixed = {{"Batch", 2}};
  try {
    compile_nodes("  - {name: t1, op: t.good, inputs: [x, z]}\n", "t1", options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "--bind Batch=2: unknown dim 'Batch'");
  }
}

TEST(CompileGraph, StatsCountKernelsCompiledAndCached) {
  ScratchDir cache;
  CompileStats stats;
  const std::string nodes = "  - {name: a, op: t.good, inputs: [x, z]}\n  - {name: b, op: t.good, inputs: [a, z]}\n";
  compile_nodes(nodes, "b", testing::test_options(cache.str()), &stats);
  EXPECT_EQ(stats.kernels, 1);
  EXPECT_EQ(stats.compiled, 1);
  EXPECT_EQ(stats.cached, 0);
  compile_nodes(nodes, "b", testing::test_options(cache.str()), &stats);
  EXPECT_EQ(stats.compiled, 0);
  EXPECT_EQ(stats.cached, 1);
}

// ---- every verification check fires ------------------------------------------------------------

TEST(CompileVerify, SwappedArgumentNames) {
  EXPECT_EQ(compile_error("t.swapped_names"),
            "node 't1': op 't.swapped_names', launch 0, argument 0: does not match kernel 't_kernel': expected "
            "'const float* x', found 'const float* z'");
}

TEST(CompileVerify, WrongArgumentType) {
  EXPECT_EQ(compile_error("t.wrong_type"),
            "node 't1': op 't.wrong_type', launch 0, argument 6: does not match kernel 't_kernel': expected "
            "'long long count', found 'int count'");
}

TEST(CompileVerify, MissingArgument) {
  EXPECT_EQ(compile_error("t.missing_arg"),
            "node 't1': op 't.missing_arg', launch 0, argument 7: does not match kernel 't_kernel': expected "
            "'float alpha', found nothing (the launch passes 7 arguments)");
}

TEST(CompileVerify, ExtraArgument) {
  EXPECT_EQ(compile_error("t.extra_arg"),
            "node 't1': op 't.extra_arg', launch 0, argument 8: does not match kernel 't_kernel': expected nothing "
            "(the kernel takes 8 parameters), found 'int extra'");
}

TEST(CompileVerify, MismatchNotesShowBothLists) {
  try {
    compile_nodes("  - {name: t1, op: t.extra_arg, inputs: [x, z]}\n", "t1");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    ASSERT_EQ(e.notes().size(), 2u);
    EXPECT_EQ(e.notes()[0],
              "launch arguments: (const float* x, const float* z, const float* w, const float* table, float* y, "
              "int n, long long count, float alpha, int extra)");
    EXPECT_NE(e.notes()[1].find("kernel parameters (tests/test_compile_util.cpp:"), std::string::npos) << e.notes()[1];
    EXPECT_NE(e.notes()[1].find(": (const float* x, const float* z, const float* w, const float* table, float* y, "
                                "int n, long long count, float alpha)"),
              std::string::npos)
        << e.notes()[1];
    ASSERT_TRUE(e.location().has_value());
    EXPECT_EQ(e.location()->line, 8);  // the node's `op` key in the spec
  }
}

TEST(CompileVerify, BlockOverMaxntid) {
  EXPECT_EQ(compile_error("t.block_over_maxntid"),
            "node 't1': op 't.block_over_maxntid', launch 0: block [256, 1, 1] exceeds '.maxntid 128, 1, 1' of "
            "'t_kernel_entry_point': expected at most 128 threads, found 256");
}

TEST(CompileVerify, BlockMustEqualReqntid) {
  const std::vector<PtxEntry> entries =
      parse_ptx_entries(".visible .entry k(\n\t.param .u32 k_param_0\n)\n.reqntid 64, 1, 1\n{\n\tret;\n}\n", "k.ptx");
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(block_problem({64, 1, 1}, entries[0]), "");
  EXPECT_EQ(block_problem({128, 1, 1}, entries[0]),
            "block does not match '.reqntid 64, 1, 1' of 'k': expected [64, 1, 1], found [128, 1, 1]");
}

TEST(CompileVerify, WrongInitByteCount) {
  EXPECT_EQ(compile_error("t.wrong_init_bytes"),
            "node 't1': op 't.wrong_init_bytes', param 't1.table' init bytes: expected 16 ([4] = 4 elements x 4 "
            "bytes of f32), found 12");
}

TEST(CompileVerify, HostInitNeedsConcreteShape) {
  EXPECT_EQ(compile_error("t.symbolic_host_param"),
            "node 't1': op 't.symbolic_host_param', param 't1.table' has host-computed init bytes but a symbolic "
            "shape [B]; host init needs a concrete shape");
  // Fixing the dim at compile time makes the shape concrete (and then the 16 bytes fit B=4).
  CompileOptions options;
  options.fixed = {{"B", 4}};
  Bundle b = compile_nodes("  - {name: t1, op: t.symbolic_host_param, inputs: [x, z]}\n", "t1", options);
  EXPECT_EQ(b.params[1].size, 16u);
}

TEST(CompileVerify, EntryMissingFromPtx) {
  try {
    compile_nodes("  - {name: t1, op: t.entry_renamed, inputs: [x, z]}\n", "t1");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "node 't1': op 't.entry_renamed', launch 0: kernel 't_kernel' has no '.visible .entry "
              "t_kernel_entry_point' in its PTX");
    EXPECT_EQ(e.notes(), std::vector<std::string>{"the PTX declares: .visible .entry t_kernel_renamed"});
  }
}

TEST(CompileVerify, PtxParameterSizeDisagreesWithTheArgument) {
  EXPECT_EQ(compile_error("t.param_type_changed"),
            "node 't1': op 't.param_type_changed', launch 0, argument 7: PTX parameter mismatch in '.visible .entry "
            "t_kernel_entry_point': expected size 4 align 4 for 'float alpha', found .f64 size 8 align 8");
}

TEST(CompileVerify, NvrtcChecksTheCallAgainstTheTemplate) {
  try {
    compile_nodes("  - {name: t1, op: t.template_mismatch, inputs: [x, z]}\n", "t1");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message().rfind("NVRTC failed to compile kernel 't_kernel' (NVRTC_ERROR_COMPILATION)", 0), 0u)
        << e.message();
    ASSERT_FALSE(e.notes().empty());
    EXPECT_NE(e.notes()[0].find("t_body"), std::string::npos) << e.notes()[0];
  }
}

TEST(CompileVerify, ArgumentDtypeMustMatchTensor) {
  EXPECT_EQ(compile_error("t.wrong_dtype"),
            "node 't1': op 't.wrong_dtype', launch 0, argument 0 'x': dtype mismatch: expected f32 (input 0 'x'), "
            "found f16");
}

TEST(CompileVerify, UnknownParamSlot) {
  EXPECT_EQ(compile_error("t.unknown_slot"),
            "node 't1': op 't.unknown_slot', launch 0, argument 3 'table': no param slot 'tables' (did you mean "
            "'table'?)");
}

TEST(CompileVerify, NvrtcFailureShowsLogOptionsAndOrigin) {
  try {
    compile_nodes("  - {name: t1, op: t.syntax_error, inputs: [x, z]}\n", "t1");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kGpu);
    EXPECT_EQ(
        e.message().rfind("NVRTC failed to compile kernel 't_kernel' (NVRTC_ERROR_COMPILATION), generated at ", 0), 0u)
        << e.message();
    EXPECT_NE(e.message().find("test_compile_util.cpp:"), std::string::npos) << e.message();
    ASSERT_EQ(e.notes().size(), 2u);
    // The log points into the kernel header, by its include name.
    EXPECT_EQ(e.notes()[0].rfind("NVRTC log:\nt_syntax_error.cuh(1): error: expected an expression", 0), 0u)
        << e.notes()[0];
    EXPECT_EQ(e.notes()[1].rfind("options: -std=c++17 --gpu-architecture=sm_90 -default-device -lineinfo -I", 0), 0u)
        << e.notes()[1];
  }
}

// ---- tensor maps ------------------------------------------------------------------------------------

TEST(CompileTensorMap, NvrtcParamIsA64AlignedByteArrayAndTheLayoutFollowsIt) {
  Bundle b = compile_nodes("  - {name: t1, op: t.tensor_map, inputs: [x, z]}\n", "t1");
  ASSERT_EQ(b.kernels.size(), 1u);
  const BundleKernel& k = b.kernels[0];
  EXPECT_NE(k.ptx.find(".param .align 64 .b8 " + k.entry + "_param_1[128]"), std::string::npos) << k.ptx;
  EXPECT_EQ(k.ptx_params, (std::vector<std::string>{".u64", ".b8", ".u64", ".u32"}));

  ASSERT_EQ(b.launches.size(), 1u);
  const std::vector<BundleArg>& args = b.launches[0].args;
  ASSERT_EQ(args.size(), 4u);
  // x at 0; the map padded from 8 to 64; y right after its 128 bytes; n after y.
  std::vector<int> offsets, sizes;
  for (const BundleArg& a : args) {
    offsets.push_back(a.offset);
    sizes.push_back(a.size);
  }
  EXPECT_EQ(offsets, (std::vector<int>{0, 64, 192, 200}));
  EXPECT_EQ(sizes, (std::vector<int>{8, 128, 8, 4}));
  const BundleArg& map = args[1];
  EXPECT_EQ(map.kind, ArgKind::kTensorMap);
  EXPECT_EQ(map.c_type, "const __grid_constant__ tn_tensor_map");
  EXPECT_EQ(map.ptx_type, ".b8");
  EXPECT_EQ(map.map.of, "x");
  EXPECT_EQ(map.map.cols.str(), "4");
  EXPECT_EQ(map.map.rows.str(), "B");
  EXPECT_EQ(map.map.row_stride.str(), "4");
  EXPECT_EQ(std::vector<int>({map.map.box_cols, map.map.box_rows, map.map.swizzle}), (std::vector<int>{4, 8, 32}));

  // Dims fixed at compile time are substituted into the map like into scalar arguments.
  CompileOptions options;
  options.fixed = {{"B", 16}};
  EXPECT_EQ(compile_nodes("  - {name: t1, op: t.tensor_map, inputs: [x, z]}\n", "t1", options)
                .launches[0]
                .args[1]
                .map.rows.str(),
            "16");
}

TEST(CompileTensorMap, OfMustNameAPointerArgumentOfTheLaunch) {
  EXPECT_EQ(compile_error("t.map_of_unknown"),
            "node 't1': op 't.map_of_unknown', launch 0, argument 1 'x_map': tensor map of 'xx', which is not an "
            "argument of the launch (did you mean 'x'?)");
  EXPECT_EQ(compile_error("t.map_of_scalar"),
            "node 't1': op 't.map_of_scalar', launch 0, argument 1 'x_map': tensor map of 'n', an argument of kind "
            "i32; a tensor map views an input, param or output");
}

TEST(CompileTensorMap, ConstantRowStrideMustBeWhole16ByteUnits) {
  EXPECT_EQ(compile_error("t.map_unaligned_stride"),
            "node 't1': op 't.map_unaligned_stride', launch 0, argument 1 'x_map': tensor map of 'x': row stride 5 x "
            "4 bytes of f32 = 20 bytes is not a multiple of 16");
}

TEST(CompileTensorMap, PtxParamWithoutThe64ByteAlignmentIsRejected) {
  EXPECT_EQ(compile_error("t.map_underaligned"),
            "node 't1': op 't.map_underaligned', launch 0, argument 1: PTX parameter mismatch in '.visible .entry "
            "t_map_kernel_entry_point': expected size 128 align 64 for 'const __grid_constant__ tn_tensor_map "
            "x_map', found .b8 size 128 align 8");
}

TEST(CompileTensorMap, SpecProblemsNameTheRule) {
  auto problem = [](TensorMapSpec spec, DType dtype = DType::kBF16) { return tensor_map_problem(spec, dtype); };
  const Expr k = Expr::dim("K");
  const TensorMapSpec good{"a", k, Expr::dim("M"), k, 64, 128, 128};
  EXPECT_EQ(problem(good), "");
  TensorMapSpec spec = good;
  spec.box_rows = 257;
  EXPECT_EQ(problem(spec), "box_rows 257 is outside 1..256");
  spec = good;
  spec.swizzle = 16;
  EXPECT_EQ(problem(spec), "swizzle 16 is not 0, 32, 64 or 128 (bytes)");
  spec = good;
  spec.box_cols = 4;
  EXPECT_EQ(problem(spec), "box_cols 4 x 2 bytes of bf16 = 8 bytes is not a multiple of 16");
  spec = good;
  spec.swizzle = 64;
  EXPECT_EQ(problem(spec), "box_cols 64 x 2 bytes of bf16 = 128 bytes exceeds the 64-byte swizzle span");
  spec.swizzle = 0;  // no swizzle: any box width
  EXPECT_EQ(problem(spec), "");
  spec = good;
  spec.rows = Expr(0);
  EXPECT_EQ(problem(spec), "rows 0 is outside 1..2^32");
  spec = good;
  spec.cols = Expr(100);
  spec.row_stride = Expr(96);
  EXPECT_EQ(problem(spec), "row stride 96 is less than cols 100");
  spec.row_stride = Expr(100);
  EXPECT_EQ(problem(spec), "row stride 100 x 2 bytes of bf16 = 200 bytes is not a multiple of 16");
  EXPECT_EQ(problem(spec, DType::kF32), "box_cols 64 x 4 bytes of f32 = 256 bytes exceeds the 128-byte swizzle span");
}

}  // namespace
}  // namespace teeny
