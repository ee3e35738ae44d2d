// teeny run on the CPU: memory planning, binding, host data, the reference executor, check
// comparisons and the driver-absent path.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "cli/check_report.h"
#include "core/compare.h"
#include "core/driver.h"
#include "core/executor.h"
#include "core/host_executor.h"
#include "core/memory_plan.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "tests/error_test_util.h"
#include "tests/file_test_util.h"
#include "tests/teeny_command.h"
#include "tests/test_run_support.h"

namespace teeny {
namespace {

using testing_run::test_registry;
using testing_run::tiny_bundle;

// An H200's facts: 132 SMs, 227 KiB of opt-in shared memory a block, 50 MiB of L2.
const DeviceFacts kH200{132, 227 * 1024, 50 << 20};

// Dims from `binds`, launches for `device`.
BoundBundle bind_for(const Bundle& bundle, const std::vector<std::string>& binds, const std::string& label,
                     const DeviceFacts& device = kH200) {
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, binds), label);
  bind_launches(bound, device);
  return bound;
}

// ---- memory plan ---------------------------------------------------------------------------

TEST(MemoryPlan, ReusesBytesOfTensorsThatAreNoLongerLive) {
  // A chain t0 -> t1 -> t2 -> t3: each tensor is read only by the next node.
  MemoryPlan plan =
      plan_memory({{"t0", 1000, 0, 1, ""}, {"t1", 1000, 1, 2, ""}, {"t2", 1000, 2, 3, ""}, {"t3", 1000, 3, 3, ""}});
  EXPECT_EQ(plan.offsets.at("t0"), 0u);
  EXPECT_EQ(plan.offsets.at("t1"), 1024u);
  EXPECT_EQ(plan.offsets.at("t2"), 0u);  // t0 is dead once t1 is computed
  EXPECT_EQ(plan.offsets.at("t3"), 1024u);
  EXPECT_EQ(plan.arena_bytes, 2048u);
  EXPECT_EQ(plan.naive_bytes, 4096u);
  EXPECT_EQ(plan.buffers, 4);
  EXPECT_EQ(plan.shared, 4);
}

TEST(MemoryPlan, AnOutputNeverSharesWithItsOwnInputs) {
  // Inclusive lifetimes: t1 is written at step 1, where t0 is read for the last time.
  MemoryPlan plan = plan_memory({{"t0", 256, 0, 1, ""}, {"t1", 256, 1, 1, ""}});
  EXPECT_NE(plan.offsets.at("t0"), plan.offsets.at("t1"));
  EXPECT_EQ(plan.shared, 0);
}

TEST(MemoryPlan, ViewsAliasAndExtendTheirSourcesLifetime) {
  // v is a view of t0 read at step 3, so t0's bytes must survive until then: t2 cannot
  // take them as it could without the view.
  MemoryPlan plan =
      plan_memory({{"t0", 1000, 0, 1, ""}, {"v", 1000, 1, 3, "t0"}, {"t1", 1000, 1, 2, ""}, {"t2", 1000, 2, 3, ""}});
  EXPECT_EQ(plan.offsets.at("v"), plan.offsets.at("t0"));
  EXPECT_NE(plan.offsets.at("t2"), plan.offsets.at("t0"));
  EXPECT_EQ(plan.buffers, 3);
  EXPECT_EQ(plan.arena_bytes, 3072u);
}

TEST(MemoryPlan, LiveTensorsNeverOverlapAndOffsetsAreAligned) {
  // A wider pattern: sizes and lifetimes vary; check the invariant for every pair.
  std::vector<PlanEntry> entries;
  for (int i = 0; i < 40; ++i) {
    entries.push_back(
        {"t" + std::to_string(i), static_cast<uint64_t>(100 + (i * 7919) % 5000), i, i + 1 + (i * 31) % 5, ""});
  }
  MemoryPlan plan = plan_memory(entries);
  for (const PlanEntry& a : entries) {
    EXPECT_EQ(plan.offsets.at(a.name) % kArenaAlignment, 0u);
    EXPECT_LE(plan.offsets.at(a.name) + a.bytes, plan.arena_bytes);
    for (const PlanEntry& b : entries) {
      if (a.name == b.name || a.last_step < b.first_step || b.last_step < a.first_step) continue;
      const uint64_t a0 = plan.offsets.at(a.name), b0 = plan.offsets.at(b.name);
      EXPECT_TRUE(a0 + a.bytes <= b0 || b0 + b.bytes <= a0) << a.name << " overlaps " << b.name;
    }
  }
  EXPECT_LT(plan.arena_bytes, plan.naive_bytes);
}

// The planner's rule, written as plainly as possible: the largest first (then the earlier first
// use, then declaration order), each at the lowest aligned offset clear of every tensor placed
// before it that is live at the same time.
std::map<std::string, uint64_t> plainly_planned(const std::vector<PlanEntry>& entries) {
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (entries[a].bytes != entries[b].bytes) return entries[a].bytes > entries[b].bytes;
    return entries[a].first_step < entries[b].first_step;
  });
  auto size = [&](size_t i) { return (std::max<uint64_t>(entries[i].bytes, 1) + 255) / 256 * 256; };
  std::map<std::string, uint64_t> offsets;
  std::vector<size_t> placed;
  for (size_t i : order) {
    for (uint64_t offset = 0;; offset += 256) {
      bool clear = std::all_of(placed.begin(), placed.end(), [&](size_t j) {
        const bool live_together =
            entries[i].first_step <= entries[j].last_step && entries[j].first_step <= entries[i].last_step;
        const uint64_t other = offsets[entries[j].name];
        return !live_together || offset + size(i) <= other || other + size(j) <= offset;
      });
      if (clear) {
        offsets[entries[i].name] = offset;
        break;
      }
    }
    placed.push_back(i);
  }
  return offsets;
}

TEST(MemoryPlan, PlacesAsThePlainRuleDoes) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::vector<PlanEntry> entries;
    unsigned state = seed;
    auto next = [&](unsigned range) {
      state = state * 1103515245u + 12345u;
      return (state >> 8) % range;
    };
    const int steps = 2 + static_cast<int>(next(60));
    for (int i = 0; i < 120; ++i) {
      const int first = static_cast<int>(next(static_cast<unsigned>(steps))) - 1;
      const int last = first + static_cast<int>(next(next(2) ? 3 : static_cast<unsigned>(steps)));
      entries.push_back({"t" + std::to_string(i), 1 + next(4) * 256 + next(2) * next(1000), first, last, ""});
    }
    const MemoryPlan plan = plan_memory(entries);
    std::map<std::string, uint64_t> expected = plainly_planned(entries);
    ASSERT_EQ(plan.offsets, expected) << "seed " << seed;
    int shared = 0;
    for (const PlanEntry& a : entries) {
      const uint64_t a0 = expected[a.name], a1 = a0 + (a.bytes + 255) / 256 * 256;
      shared += std::any_of(entries.begin(), entries.end(), [&](const PlanEntry& b) {
        const uint64_t b0 = expected[b.name], b1 = b0 + (b.bytes + 255) / 256 * 256;
        return a.name != b.name && a0 < b1 && b0 < a1;
      });
    }
    EXPECT_EQ(plan.shared, shared) << "seed " << seed;
  }
}

TEST(MemoryPlan, ALongChainTakesTwoBuffersBesideItsInput) {
  // x -> t0 -> t1 -> ... -> t99999, x live throughout: x, and two buffers the chain alternates.
  std::vector<PlanEntry> entries{{"x", 1000, -1, 100000, ""}};
  for (int i = 0; i < 100000; ++i) entries.push_back({"t" + std::to_string(i), 1000, i, i + 1, ""});
  const MemoryPlan plan = plan_memory(entries);
  EXPECT_EQ(plan.arena_bytes, 3 * 1024u);
  EXPECT_EQ(plan.offsets.at("t0"), plan.offsets.at("t2"));
  EXPECT_NE(plan.offsets.at("t0"), plan.offsets.at("t1"));
  EXPECT_EQ(plan.shared, 100000);
}

TEST(MemoryPlan, TensorsLiveToTheEndStackInOrder) {
  // A chain whose every node is a graph output: all stay live, so each goes above the last.
  std::vector<PlanEntry> entries{{"x", 1000, -1, 20000, ""}};
  for (int i = 0; i < 20000; ++i) entries.push_back({"t" + std::to_string(i), 1000, i, 20000, ""});
  const MemoryPlan plan = plan_memory(entries);
  EXPECT_EQ(plan.arena_bytes, 20001 * 1024u);
  EXPECT_EQ(plan.offsets.at("x"), 0u);
  EXPECT_EQ(plan.offsets.at("t0"), 1024u);
  EXPECT_EQ(plan.offsets.at("t19999"), 20000 * 1024u);
  EXPECT_EQ(plan.shared, 0);
}

TEST(MemoryPlan, UnknownAliasIsAnError) {
  try {
    plan_memory({{"v", 16, 0, 1, "nowhere"}});
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "memory plan: view 'v' aliases 'nowhere', which is not an earlier tensor");
  }
}

TEST(MemoryPlan, NamesAndAliasesAreChecked) {
  using testing::message;
  EXPECT_EQ(message([] {
              plan_memory({{"a", 16, 0, 1, ""}, {"v", 16, 1, 2, "a"}, {"a", 16, 2, 3, ""}});
            }),
            "memory plan: tensor 'a' appears twice");
  EXPECT_EQ(message([] {
              plan_memory({{"v", 16, 0, 1, "b"}, {"b", 16, 0, 1, ""}});
            }),
            "memory plan: view 'v' aliases 'b', which is not an earlier tensor");
  EXPECT_EQ(message([] {
              plan_memory({{"v", 16, 0, 1, "v"}});
            }),
            "memory plan: view 'v' aliases 'v', which is not an earlier tensor");
  EXPECT_EQ(message([] {
              plan_memory({{"a", 16, 0, 1, ""}, {"v", 8, 1, 2, "a"}, {"w", 32, 2, 3, "v"}});
            }),
            "memory plan: view 'w' (32 bytes) is larger than 'a' (16 bytes)");
  // A view of a view shares the first one's bytes.
  const MemoryPlan plan = plan_memory({{"a", 16, 0, 1, ""}, {"v", 8, 1, 2, "a"}, {"w", 8, 2, 3, "v"}});
  EXPECT_EQ(plan.offsets.at("w"), plan.offsets.at("a"));
  EXPECT_EQ(plan.buffers, 1);
}

// ---- binding -------------------------------------------------------------------------------

TEST(RunBinding, EvaluatesShapesStridesGridsAndArguments) {
  Bundle bundle = tiny_bundle();
  BoundBundle bound = bind_for(bundle, {"B=2"}, "tiny.teeny");
  EXPECT_EQ(bound.bindings, (Bindings{{"B", 2}}));
  const BoundTensor& h = bound.tensor("h");
  EXPECT_EQ(h.shape, std::vector<int64_t>({2, 3}));
  EXPECT_EQ(h.row_stride, 4);
  EXPECT_EQ(h.bytes, 2u * 4 * 4);  // padded rows
  EXPECT_EQ(bound.tensor("s").bytes, 2u * 3 * 4);
  EXPECT_EQ(bound.tensor("out").shape, std::vector<int64_t>({6}));

  ASSERT_EQ(bound.launches.size(), 2u);
  const BoundLaunch& affine = bound.launches[0];
  EXPECT_EQ(affine.grid, (std::array<int64_t, 3>{1, 1, 1}));
  EXPECT_EQ(affine.args[4].ivalue, 6);
  EXPECT_EQ(affine.param_buffer_bytes, 36u);
  EXPECT_EQ(affine.bytes, 48);
  EXPECT_EQ(bound.node_launches(1), std::vector<size_t>({1}));
  EXPECT_TRUE(bound.node_launches(2).empty());  // the view launches nothing

  // Defaults apply without --bind; the grid follows B.
  BoundBundle big = bind_for(bundle, {"B=64"}, "tiny.teeny");
  EXPECT_EQ(big.launches[0].grid[0], 2);  // ceil_div(192, 128)
  EXPECT_EQ(bind_bundle(bundle, bundle_bindings(bundle, {}), "t").bindings.at("B"), 4);
}

TEST(RunBinding, LaunchesAreBoundOnlyForADevice) {
  Bundle bundle = tiny_bundle();
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {"B=2"}), "tiny.teeny");
  EXPECT_TRUE(bound.launches.empty());  // the host side (data, the host executor) needs none
  EXPECT_FALSE(bound.device.has_value());
  bind_launches(bound, kH200);
  EXPECT_EQ(bound.launches.size(), 2u);
  EXPECT_EQ(bound.device, kH200);
  EXPECT_EQ(bound.bindings, (Bindings{{"B", 2}}));  // the dims only
}

TEST(RunBinding, GridsOverDeviceSymbolsFollowTheDevice) {
  // A grid-stride launch capped at 2 blocks an SM, and a persistent one at one block an SM.
  Bundle bundle = tiny_bundle();
  const Expr b = Expr::dim("B");
  bundle.launches[0].grid[0] = min(b * 3, device_sms() * 2);
  bundle.launches[1].grid[0] = min(b * 3, device_sms());
  bundle.launches[1].args[3].value = max(Expr(1), ceil_div(device_sms(), b));  // a split count
  for (const int64_t sms : {132, 114, 78}) {
    for (const int64_t batch : {1, 40, 64}) {
      const BoundBundle bound = bind_for(bundle, {fmt::format("B={}", batch)}, "t", DeviceFacts{sms, 1024, 1024});
      EXPECT_EQ(bound.launches[0].grid[0], std::min(3 * batch, 2 * sms)) << sms << " SMs, B=" << batch;
      EXPECT_EQ(bound.launches[1].grid[0], std::min(3 * batch, sms)) << sms << " SMs, B=" << batch;
      EXPECT_EQ(bound.launches[1].args[3].ivalue, (sms + batch - 1) / batch) << sms << " SMs, B=" << batch;
    }
  }
}

TEST(RunBinding, DeviceLimitsAreCheckedWithTheDevicesValues) {
  auto message = [](const Bundle& b, const DeviceFacts& device) {
    try {
      bind_for(b, {}, "tiny.teeny", device);
    } catch (const Error& error) {
      return error.message();
    }
    return std::string("no error");
  };
  Bundle smem = tiny_bundle();
  smem.launches[0].dynamic_smem = Expr(200 * 1024);
  EXPECT_EQ(message(smem, kH200), "no error");
  EXPECT_EQ(message(smem, DeviceFacts{132, 99 * 1024, 50 << 20}),
            "bundle tiny.teeny: launch 'h' needs 204800 bytes of dynamic shared memory; the device allows a block "
            "at most 101376 (SMEM_PER_BLOCK)");
  Bundle grid = tiny_bundle();
  grid.launches[0].grid[1] = device_sms() * 1000;
  EXPECT_EQ(message(grid, DeviceFacts{78, 1024, 1024}),
            "bundle tiny.teeny: launch 'h' has grid.y = 78000 ('SMS*1000') with B=4, SMS=78; it must be in "
            "[1, 65535]");
}

TEST(RunBinding, PlanKeepsInputsAndOutputsAndAliasesViews) {
  Bundle bundle = tiny_bundle();
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "tiny.teeny");
  const MemoryPlan& plan = bound.plan;
  EXPECT_EQ(plan.offsets.at("out"), plan.offsets.at("s"));
  std::set<uint64_t> distinct{plan.offsets.at("x"), plan.offsets.at("h"), plan.offsets.at("s")};
  EXPECT_EQ(distinct.size(), 3u);  // x, h and s are all live at step 1
  EXPECT_EQ(plan.buffers, 3);
}

TEST(RunBinding, ErrorsNameWhatIsWrong) {
  Bundle bundle = tiny_bundle();
  auto message = [&](const Bundle& b, std::vector<std::string> binds) {
    try {
      bind_for(b, binds, "tiny.teeny");
    } catch (const Error& error) {
      return error.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(bundle, {"B=65"}), "--bind B=65: B must be in [1, 64]");

  Bundle fixed = tiny_bundle();
  fixed.fixed = {{"B", 8}};
  EXPECT_EQ(message(fixed, {"B=9"}), "--bind B=9: B was fixed to 8 when the bundle was compiled");
  EXPECT_EQ(message(fixed, {"B=8"}), "no error");

  Bundle bad_shape = tiny_bundle();
  bad_shape.tensors[2].shape[1] = Expr::dim("B") - 4;
  EXPECT_EQ(message(bad_shape, {"B=4"}),
            "bundle tiny.teeny: tensor 's' has shape [B, B - 4] = [4, 0] with B=4; sizes must be positive");

  Bundle bad_arg = tiny_bundle();
  bad_arg.launches[1].args[3].size = 8;
  EXPECT_EQ(message(bad_arg, {}),
            "bundle tiny.teeny: argument 3 'n' of launch 's' (i32) has size 8 at offset 24; expected "
            "size 4 at a multiple of 4");

  Bundle bad_tensor = tiny_bundle();
  bad_tensor.launches[1].args[0].tensor = "hh";
  EXPECT_EQ(message(bad_tensor, {}),
            "bundle tiny.teeny: argument 0 'a' of launch 's' names tensor 'hh', which the bundle does "
            "not have");

  Bundle bad_grid = tiny_bundle();
  bad_grid.launches[0].grid[1] = Expr::dim("B") * 20000;
  EXPECT_EQ(message(bad_grid, {"B=4"}),
            "bundle tiny.teeny: launch 'h' has grid.y = 80000 ('B*20000') with B=4; it must be in "
            "[1, 65535]");

  Bundle bad_host = tiny_bundle();
  bad_host.param_bytes.resize(8);
  EXPECT_EQ(message(bad_host, {}),
            "bundle tiny.teeny: parameter 'h.bias' has 12 init bytes at offset 0 (params.bin holds 8), "
            "but f32 [3] needs 12");
}

// tiny_bundle with launch 's' also taking `a_map`, a tensor map of its argument `a` (tensor h:
// f32 [B, 3], row stride 4), at offset 64 as the PTX would place it.
Bundle tensor_map_bundle() {
  Bundle bundle = tiny_bundle();
  BundleArg map;
  map.kind = ArgKind::kTensorMap;
  map.name = "a_map";
  map.c_type = "const __grid_constant__ tn_tensor_map";
  map.ptx_type = ".b8";
  map.size = 128;
  map.offset = 64;
  map.map = TensorMapSpec{"a", Expr(3), Expr::dim("B"), Expr(4), 4, 8, 0};
  bundle.launches[1].args.push_back(map);
  return bundle;
}

TEST(RunBinding, TensorMapsAreEvaluatedAndResolvedToTheirPointer) {
  Bundle bundle = tensor_map_bundle();
  BoundBundle bound = bind_for(bundle, {"B=2"}, "tiny.teeny");
  const BoundLaunch& add = bound.launches[1];
  ASSERT_EQ(add.args.size(), 5u);
  const BoundArg& arg = add.args[4];
  EXPECT_EQ(arg.kind, ArgKind::kTensorMap);
  EXPECT_EQ(arg.offset, 64);
  EXPECT_EQ(arg.map.of, 0u);  // `a`, bound to tensor h
  EXPECT_EQ(add.args[arg.map.of].target, "h");
  EXPECT_EQ(arg.map.dtype, DType::kF32);
  EXPECT_EQ(std::vector<int64_t>({arg.map.cols, arg.map.rows, arg.map.row_stride}), (std::vector<int64_t>{3, 2, 4}));
  EXPECT_EQ(std::vector<int>({arg.map.box_cols, arg.map.box_rows, arg.map.swizzle}), (std::vector<int>{4, 8, 0}));
  EXPECT_EQ(add.param_buffer_bytes, 192u);  // the map's 128 bytes end the buffer

  // The host executor runs the references and never looks at kernel arguments.
  std::map<std::string, HostTensor> values = run_host(bound, test_registry(), prepare_data(bound, {}));
  EXPECT_EQ(values.at("out").shape, std::vector<int64_t>({6}));
}

TEST(RunBinding, TensorMapErrorsNameTheArgument) {
  auto message = [](const Bundle& b, std::vector<std::string> binds) {
    try {
      bind_for(b, binds, "tiny.teeny");
    } catch (const Error& error) {
      return error.message();
    }
    return std::string("no error");
  };
  auto with = [](const std::function<void(BundleArg&)>& edit) {
    Bundle b = tensor_map_bundle();
    edit(b.launches[1].args[4]);
    return b;
  };
  const std::string where = "bundle tiny.teeny: argument 4 'a_map' of launch 's' (tensor map of 'a'): ";
  EXPECT_EQ(message(with([](BundleArg& a) { a.offset = 72; }), {}),
            "bundle tiny.teeny: argument 4 'a_map' of launch 's' (tensor_map) has size 128 at offset 72; "
            "expected size 128 at a multiple of 64");
  EXPECT_EQ(message(with([](BundleArg& a) { a.map.of = "n"; }), {}),
            "bundle tiny.teeny: argument 4 'a_map' of launch 's' (tensor map of 'n'): the launch has no input, "
            "param or output argument 'n'");
  EXPECT_EQ(message(with([](BundleArg& a) { a.map.row_stride = Expr(3); }), {"B=2"}),
            where + "row stride 3 x 4 bytes of f32 = 12 bytes is not a multiple of 16 with B=2");
  EXPECT_EQ(message(with([](BundleArg& a) { a.map.rows = Expr::dim("B") + 1; }), {"B=2"}),
            where + "[3, 3] with row stride 4 of f32 reaches 44 bytes, but tensor 'h' has 32 with B=2");
  EXPECT_EQ(message(with([](BundleArg& a) { a.map.cols = Expr::dim("C"); }), {"B=2"})
                .rfind("bundle tiny.teeny: cannot evaluate cols of argument 4 'a_map' of launch 's' 'C' with B=2: ", 0),
            0u);
}

TEST(RunBinding, PacksPaddedRowsWithZerosAndUnpacksThem) {
  Bundle bundle = tiny_bundle();
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {"B=2"}), "t");
  const BoundTensor& h = bound.tensor("h");
  std::vector<uint8_t> bytes = pack_tensor(h, HostTensor{DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}});
  ASSERT_EQ(bytes.size(), 32u);
  std::vector<double> device;
  for (size_t i = 0; i < 8; ++i) device.push_back(read_element(bytes.data(), DType::kF32, i));
  EXPECT_EQ(device, std::vector<double>({1, 2, 3, 0, 4, 5, 6, 0}));
  EXPECT_EQ(unpack_tensor(h, bytes.data()).data, std::vector<double>({1, 2, 3, 4, 5, 6}));
}

// ---- host data -----------------------------------------------------------------------------

TEST(RunData, RandomInputsAreDeterministicAndInRange) {
  Bundle bundle = tiny_bundle();
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {"B=64"}), "t");
  HostTensor a = random_input(bound.tensor("x"), 7);
  HostTensor b = random_input(bound.tensor("x"), 7);
  HostTensor c = random_input(bound.tensor("x"), 8);
  EXPECT_EQ(a.data, b.data);
  EXPECT_NE(a.data, c.data);
  double low = 1, high = -1;
  for (double v : a.data) {
    low = std::min(low, v);
    high = std::max(high, v);
    EXPECT_EQ(v, static_cast<float>(v));
  }
  EXPECT_GE(low, -1.0);
  EXPECT_LT(high, 1.0);
  EXPECT_LT(low, -0.9);  // 192 uniform samples reach both ends
  EXPECT_GT(high, 0.9);
}

TEST(RunData, RandomIdsStayBelowTheTensorsIdBound) {
  Bundle bundle = tiny_bundle();
  bundle.tensors[0].dtype = DType::kI32;
  auto range = [&]() {
    BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {"B=64"}), "t");
    HostTensor ids = random_input(bound.tensor("x"), 1);
    std::set<double> values(ids.data.begin(), ids.data.end());
    return std::make_pair(*values.begin(), *values.rbegin());
  };
  EXPECT_EQ(range(), std::make_pair(0.0, 7.0));  // no consumer bounds them: [0, 8)
  bundle.tensors[0].id_bound = 5;                // e.g. an embedding of 5 rows reads them
  EXPECT_EQ(range(), std::make_pair(0.0, 4.0));
}

TEST(RunData, RandomParamsUseTheDeclaredRangeElseTheFanIn) {
  auto extremes = [](std::vector<int64_t> shape, std::optional<std::array<double, 2>> range) {
    BoundParam param;
    param.name = "p";
    param.shape = std::move(shape);
    param.hints.random_range = range;
    HostTensor values = random_param(param, 9);
    return std::make_pair(*std::min_element(values.data.begin(), values.data.end()),
                          *std::max_element(values.data.begin(), values.data.end()));
  };
  // ±1/sqrt(fan_in), fan_in = numel / shape[0]: 100 -> ±0.1; a rank-1 param: ±1.
  auto [low, high] = extremes({10, 100}, std::nullopt);
  EXPECT_GE(low, -0.1);
  EXPECT_LT(high, 0.1);
  EXPECT_LT(low, -0.09);  // 1000 uniform samples reach both ends
  EXPECT_GT(high, 0.09);
  std::tie(low, high) = extremes({1000}, std::nullopt);
  EXPECT_GE(low, -1.0);
  EXPECT_LT(high, 1.0);
  EXPECT_LT(low, -0.9);
  EXPECT_GT(high, 0.9);
  std::tie(low, high) = extremes({1000}, std::array<double, 2>{0.5, 1.5});
  EXPECT_GE(low, 0.5);
  EXPECT_LT(high, 1.5);
  EXPECT_LT(low, 0.6);
  EXPECT_GT(high, 1.4);
}

class RunFiles : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.str(name); }
  testing::ScratchDir dir_;
};

TEST_F(RunFiles, ParamsComeFromWeightsHostBytesOrZeroWithANote) {
  Bundle bundle = tiny_bundle();
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {"B=2"}), "t");
  RunData zero = prepare_data(bound, DataOptions{});
  EXPECT_EQ(zero.params.at("h.weight").data, std::vector<double>({0, 0, 0}));
  EXPECT_EQ(zero.params.at("h.bias").data, std::vector<double>({0.5, 1, 1.5}));
  EXPECT_EQ(zero.notes, std::vector<std::string>({"1 trained parameter(s) not loaded from weights "
                                                  "are zero (use --weights FILE.safetensors, or "
                                                  "--init random): h.weight"}));
  DataOptions random;
  random.fill = ParamFill::kRandom;
  random.seed = 3;
  RunData filled = prepare_data(bound, random);
  for (double v : filled.params.at("h.weight").data) {  // rank 1, no declared range: [-1, 1)
    EXPECT_GE(v, -1.0);
    EXPECT_LT(v, 1.0);
  }
  EXPECT_EQ(filled.params.at("h.weight").data, random_param(bound.param("h.weight"), 3).data);
  EXPECT_EQ(filled.notes[0].substr(0, 72), "1 trained parameter(s) not loaded from weights are random (--init random");

  write_safetensors(path("w.safetensors"), {{"h.weight", HostTensor{DType::kF32, {3}, {2, 3, 4}}}});
  DataOptions loaded;
  loaded.weights_path = path("w.safetensors");
  RunData data = prepare_data(bound, loaded);
  EXPECT_EQ(data.params.at("h.weight").data, std::vector<double>({2, 3, 4}));
  EXPECT_TRUE(data.notes.empty());
}

TEST_F(RunFiles, InputsFromNpyAreChecked) {
  Bundle bundle = tiny_bundle();
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {"B=2"}), "t");
  auto message = [&](std::map<std::string, std::string> files) {
    DataOptions options;
    options.input_files = std::move(files);
    try {
      prepare_data(bound, options);
    } catch (const Error& error) {
      return error.message();
    }
    return std::string("no error");
  };
  write_npy(path("x.npy"), HostTensor{DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6}});
  EXPECT_EQ(message({{"x", path("x.npy")}}), "--input x=" + path("x.npy") +
                                                 ": the file's shape [3, 2] does not match input 'x' [2, 3] "
                                                 "(with B=2)");
  write_npy(path("i.npy"), HostTensor{DType::kI32, {2, 3}, {1, 2, 3, 4, 5, 6}});
  EXPECT_EQ(message({{"x", path("i.npy")}}),
            "--input x=" + path("i.npy") + ": the file holds i32 values, but input 'x' is f32");
  EXPECT_EQ(message({{"y", path("x.npy")}}),
            "--input y=" + path("x.npy") + ": the bundle has no input 'y' (did you mean 'x'?)");
  write_npy(path("ok.npy"), HostTensor{DType::kF16, {2, 3}, {1, 2, 3, 4, 5, 6}});
  EXPECT_EQ(message({{"x", path("ok.npy")}}), "no error");  // f16 file into an f32 input
}

// ---- host reference executor ---------------------------------------------------------------

TEST_F(RunFiles, HostExecutorMatchesHandComputedValues) {
  Bundle bundle = tiny_bundle();
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {"B=2"}), "t");
  write_npy(path("x.npy"), HostTensor{DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}});
  write_safetensors(path("w.safetensors"), {{"h.weight", HostTensor{DType::kF32, {3}, {2, 3, 4}}}});
  DataOptions options;
  options.input_files = {{"x", path("x.npy")}};
  options.weights_path = path("w.safetensors");
  RunData data = prepare_data(bound, options);
  std::map<std::string, HostTensor> values = run_host(bound, test_registry(), data);
  // h = x * [2, 3, 4] + [0.5, 1, 1.5]; s = h + x; out = flatten(s).
  EXPECT_EQ(values.at("h").data, std::vector<double>({2.5, 7, 13.5, 8.5, 16, 25.5}));
  EXPECT_EQ(values.at("s").data, std::vector<double>({3.5, 9, 16.5, 12.5, 21, 31.5}));
  EXPECT_EQ(values.at("out").shape, std::vector<int64_t>({6}));
  EXPECT_EQ(values.at("out").data, values.at("s").data);
}

TEST(HostExecutor, RoundsOutputsToTheirDtype) {
  Bundle bundle = tiny_bundle();
  for (BundleTensor& t : bundle.tensors) t.dtype = DType::kBF16;
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {"B=1"}), "t");
  RunData data;
  data.inputs["x"] = HostTensor{DType::kBF16, {1, 3}, {1, 1, 1}};
  data.params["h.weight"] = HostTensor{DType::kF32, {3}, {1.0 / 3, 1, 1}};
  data.params["h.bias"] = HostTensor{DType::kF32, {3}, {0, 0, 0}};
  HostTensor h = reference_node(bound, test_registry(), 0, {data.inputs["x"]}, data.params);
  EXPECT_EQ(h.dtype, DType::kBF16);
  EXPECT_EQ(h.data[0], bf16_bits_to_float(float_to_bf16_bits(1.0f / 3)));
}

TEST(HostExecutor, UnknownOpIsAnError) {
  Bundle bundle = tiny_bundle();
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "tiny.teeny");
  try {
    run_host(bound, Registry(), prepare_data(bound, DataOptions{}));
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "bundle tiny.teeny: node 'h' uses op 'test.affine', which this teeny does not know");
  }
}

// ---- comparison ----------------------------------------------------------------------------

TEST(Compare, TolerancesDependOnDtype) {
  HostTensor expected{DType::kF32, {3}, {1.0, -2.0, 0.0}};
  HostTensor close{DType::kF32, {3}, {1.0009, -2.0019, 0.00009}};
  EXPECT_TRUE(compare_values(close, expected, tolerance_for(DType::kF32)).ok());
  HostTensor far{DType::kF32, {3}, {1.0012, -2.0, 0.0}};
  Comparison c = compare_values(far, expected, tolerance_for(DType::kF32));
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.worst_index, 0);
  EXPECT_NEAR(c.max_abs, 0.0012, 1e-12);
  EXPECT_NEAR(c.max_rel, 0.0012, 1e-12);
  // One bf16 ulp at 1.0 is 2^-7: fine for bf16, far too much for f32.
  HostTensor ulp{DType::kBF16, {3}, {1.0078125, -2.0, 0.0}};
  EXPECT_TRUE(compare_values(ulp, expected, tolerance_for(DType::kBF16)).ok());
  EXPECT_FALSE(compare_values(ulp, expected, tolerance_for(DType::kF32)).ok());
  HostTensor ids{DType::kI32, {1}, {3}};
  EXPECT_FALSE(compare_values(ids, HostTensor{DType::kI32, {1}, {4}}, tolerance_for(DType::kI32)).ok());
}

TEST(Compare, NanMatchesOnlyNan) {
  HostTensor nan{DType::kF32, {2}, {NAN, 1}};
  EXPECT_TRUE(compare_values(nan, nan, tolerance_for(DType::kF32)).ok());
  HostTensor number{DType::kF32, {2}, {0, 1}};
  EXPECT_EQ(compare_values(nan, number, tolerance_for(DType::kF32)).mismatches, 1);
  EXPECT_EQ(compare_values(number, nan, tolerance_for(DType::kF32)).mismatches, 1);
}

TEST(Compare, ReportNamesTheFirstDivergingNode) {
  CheckReport report;
  Comparison good;
  good.count = 4;
  good.max_abs = 1e-7;
  good.max_rel = 2e-7;
  Comparison bad;
  bad.count = 4;
  bad.mismatches = 2;
  bad.max_abs = 0.5;
  bad.max_rel = 0.25;
  bad.worst_index = 3;
  bad.worst_got = 1.5;
  bad.worst_expected = 2;
  report.nodes = {{"fc1", "linear", "", DType::kF32, {2, 2}, good},
                  {"sub", "test.sub", "", DType::kF32, {2, 2}, bad},
                  {"act", "relu", "", DType::kF32, {2, 2}, bad}};
  report.first_failure = 1;
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(cli::format_check_report(report),
            "node  op        dtype  shape      max abs     max rel  result\n"
            "fc1   linear    f32    [2, 2]   1.000e-07   2.000e-07  ok\n"
            "sub   test.sub  f32    [2, 2]   5.000e-01   2.500e-01  MISMATCH\n"
            "act   relu      f32    [2, 2]   5.000e-01   2.500e-01  MISMATCH\n"
            "check: FAILED: 2 of 3 nodes differ from the host reference; first diverging node 'sub' "
            "(test.sub): 2 of 4 elements outside atol 0.0001 + rtol 0.001*|expected|; worst at [1, 1]: "
            "gpu 1.5 vs reference 2\n");
  report.nodes.resize(1);
  report.first_failure = -1;
  EXPECT_TRUE(report.ok());
  EXPECT_NE(cli::format_check_report(report).find("check: ok: all 1 nodes match the host reference\n"),
            std::string::npos);

  // An update node's checks, one per param it writes, count as one node.
  report.nodes = {{"fc1", "linear", "", DType::kF32, {2, 2}, good},
                  {"sgd_w", "optim.sgd", "w", DType::kF32, {2, 2}, good},
                  {"sgd_w", "optim.sgd", "sgd_w.momentum_buffer", DType::kF32, {2, 2}, bad}};
  report.first_failure = 2;
  EXPECT_EQ(cli::format_check_report(report),
            "node                            op         dtype  shape      max abs     max rel  result\n"
            "fc1                             linear     f32    [2, 2]   1.000e-07   2.000e-07  ok\n"
            "sgd_w -> w                      optim.sgd  f32    [2, 2]   1.000e-07   2.000e-07  ok\n"
            "sgd_w -> sgd_w.momentum_buffer  optim.sgd  f32    [2, 2]   5.000e-01   2.500e-01  MISMATCH\n"
            "check: FAILED: 1 of 2 nodes differ from the host reference; first diverging node 'sgd_w -> "
            "sgd_w.momentum_buffer' (optim.sgd): 2 of 4 elements outside atol 0.0001 + rtol 0.001*|expected|; worst "
            "at [1, 1]: gpu 1.5 vs reference 2\n");
}

// ---- the driver-absent path ----------------------------------------------------------------

TEST(Driver, MissingLibraryIsAPlainGpuError) {
  try {
    cuda::Driver::load("libteeny-no-such-driver.so.1");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kGpu);
    EXPECT_EQ(error.message(),
              "no CUDA driver found (libteeny-no-such-driver.so.1): libteeny-no-such-driver.so.1: "
              "cannot open shared object file: No such file or directory");
  }
}

using testing::Command;
using testing::run_teeny;

TEST_F(RunFiles, TeenyRunWithoutADriverExitsThreeWithAPlainMessage) {
  void* driver = dlopen(cuda::kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (driver) {
    dlclose(driver);
    GTEST_SKIP() << "this machine has a CUDA driver; the driver-absent path cannot be shown here";
  }
  write_bundle(tiny_bundle(), path("tiny.teeny"));
  Command run = run_teeny("run " + path("tiny.teeny"));
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err,
            "teeny: note: 1 trained parameter(s) not loaded from weights are zero (use --weights "
            "FILE.safetensors, or --init random): h.weight\n"
            "teeny: error: no CUDA driver found (libcuda.so.1): libcuda.so.1: cannot open shared "
            "object file: No such file or directory\n");
}

TEST_F(RunFiles, TeenyRunReportsBundleErrorsBeforeLookingForAGpu) {
  write_bundle(tiny_bundle(), path("tiny.teeny"));
  Command run = run_teeny("run " + path("tiny.teeny") + " --bind B=0");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "teeny: error: --bind B=0: B must be in [1, 64]\n");
  Command cpu = run_teeny("run " + path("tiny.teeny") + " --device cpu");
  EXPECT_EQ(cpu.exit_code, 1);
  EXPECT_NE(cpu.err.find("teeny: error: bundle " + path("tiny.teeny") +
                         ": node 'h' uses op 'test.affine', which this teeny does not know\n"),
            std::string::npos)
      << cpu.err;
  Command mixed = run_teeny("run " + path("tiny.teeny") + " --device cpu --check");
  EXPECT_EQ(mixed.exit_code, 1);
  EXPECT_EQ(mixed.out, "");
  EXPECT_EQ(mixed.err, "teeny: error: --check runs on the GPU; it cannot be combined with --device cpu\n");
}

}  // namespace
}  // namespace teeny
