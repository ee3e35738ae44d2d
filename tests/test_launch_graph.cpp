// core/launch_graph.h: launch dependencies from the bytes launches touch, and their spread over
// streams. CompileGraphs checks the same on every example graph's bundle against a brute force.
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "core/launch_graph.h"
#include "tests/launch_order_check.h"

namespace teeny {
namespace {

LaunchAccess reads(uint64_t begin, uint64_t end, size_t space = kArenaSpace) { return {space, begin, end, false}; }
LaunchAccess writes(uint64_t begin, uint64_t end, size_t space = kArenaSpace) { return {space, begin, end, true}; }

using Deps = std::vector<std::vector<size_t>>;

TEST(LaunchDependencies, LastWriterAndReadersSince) {
  const Deps deps = launch_dependencies({
      {writes(0, 100)},                     // 0: a
      {reads(0, 100), writes(100, 200)},    // 1: b from a
      {reads(0, 100), writes(200, 300)},    // 2: c from a
      {reads(100, 300), writes(300, 400)},  // 3: d from b and c
      {writes(50, 60)},                     // 4: over part of a, read by 1 and 2
      {reads(0, 10)},                       // 5: a part 4 did not write
      {reads(0, 100, 1), writes(0, 8, 2)},  // 6: other spaces, same offsets
      {reads(55, 58), writes(0, 0)},        // 7: inside what 4 wrote; an empty access
  });
  EXPECT_EQ(deps[0], (std::vector<size_t>{}));
  EXPECT_EQ(deps[1], (std::vector<size_t>{0}));
  EXPECT_EQ(deps[2], (std::vector<size_t>{0}));
  EXPECT_EQ(deps[3], (std::vector<size_t>{2, 1}));
  EXPECT_EQ(deps[4], (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(deps[5], (std::vector<size_t>{0}));
  EXPECT_EQ(deps[6], (std::vector<size_t>{}));
  EXPECT_EQ(deps[7], (std::vector<size_t>{4}));
}

TEST(LaunchDependencies, ALaunchDoesNotDependOnItself) {
  // Reading and writing the same bytes (an accumulation), then a reader of them.
  const Deps deps = launch_dependencies({{writes(0, 64)}, {reads(0, 64), writes(0, 64)}, {reads(0, 32)}});
  EXPECT_EQ(deps[1], (std::vector<size_t>{0}));
  EXPECT_EQ(deps[2], (std::vector<size_t>{1}));
}

TEST(PlanStreams, AChainStaysOnOneStream) {
  const StreamPlan plan = plan_streams({{}, {0}, {1}, {2}}, 8);
  EXPECT_EQ(plan.stream, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(plan.streams_used, 1);
  for (const auto& waits : plan.waits) EXPECT_TRUE(waits.empty());
}

TEST(PlanStreams, IndependentLaunchesGoSideBySideAndJoin) {
  // 0 feeds 1..4, which are independent; 5 reads all four.
  const StreamPlan plan = plan_streams({{}, {0}, {0}, {0}, {0}, {4, 3, 2, 1}}, 8);
  EXPECT_EQ(plan.stream, (std::vector<int>{0, 0, 1, 2, 3, 3}));
  EXPECT_EQ(plan.waits, (Deps{{}, {}, {0}, {0}, {0}, {1, 2, 3}}));
  EXPECT_EQ(plan.recorded, (std::vector<bool>{true, true, true, true, false, false}));
  EXPECT_EQ(plan.streams_used, 4);
}

TEST(PlanStreams, MoreIndependentLaunchesThanStreamsQueueOnTheIdlest) {
  const StreamPlan plan = plan_streams({{}, {}, {}, {}, {}}, 2);
  EXPECT_EQ(plan.stream, (std::vector<int>{0, 1, 0, 1, 0}));
  for (const auto& waits : plan.waits) EXPECT_TRUE(waits.empty());
}

TEST(PlanStreams, AWaitIsLeftOutWhereTheStreamAlreadyOrdersIt) {
  // 2 follows 1 on stream 1 and waits for 0; 4 follows 2 there, so needs no wait for 0; 3 has
  // no dependency and takes the empty stream.
  const StreamPlan plan = plan_streams({{}, {}, {1, 0}, {}, {2, 0}}, 3);
  EXPECT_EQ(plan.stream, (std::vector<int>{0, 1, 1, 2, 1}));
  EXPECT_EQ(plan.waits, (Deps{{}, {}, {0}, {}, {}}));
}

TEST(PlanStreams, RandomGraphsKeepEveryDependencyOrdered) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 60;
    Deps deps(n);
    for (size_t j = 1; j < n; ++j)
      for (size_t i = 0; i < j; ++i)
        if (rng() % 8 == 0) deps[j].insert(deps[j].begin(), i);
    const int streams = 1 + static_cast<int>(rng() % 6);
    const StreamPlan plan = plan_streams(deps, streams);
    SCOPED_TRACE(fmt::format("trial {}: {} launches on {} streams", trial, n, streams));
    const std::vector<std::vector<bool>> before = testing::ordered_before(plan);
    for (size_t j = 0; j < n; ++j)
      for (size_t d : deps[j]) EXPECT_TRUE(before[j][d]) << d << " before " << j;
  }
}

}  // namespace
}  // namespace teeny
