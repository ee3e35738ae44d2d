#include "core/launch_graph.h"

#include <algorithm>
#include <functional>
#include <map>

namespace teeny {
namespace {

// Per memory space, who touched its bytes last: disjoint segments by start.
struct Segment {
  uint64_t end = 0;
  std::ptrdiff_t writer = -1;   // the last launch that wrote it
  std::vector<size_t> readers;  // launches that read it since
};
using Segments = std::map<uint64_t, Segment>;

// Makes a segment start at `at` where one covers it.
void split_at(Segments& segments, uint64_t at) {
  auto it = segments.upper_bound(at);
  if (it == segments.begin()) return;
  --it;
  if (it->first == at || it->second.end <= at) return;
  Segment tail = it->second;
  it->second.end = at;
  segments.emplace(at, std::move(tail));
}

// Calls `visit` on every segment of [begin, end), creating the untouched ones.
void for_each_segment(Segments& segments, uint64_t begin, uint64_t end, const std::function<void(Segment&)>& visit) {
  split_at(segments, begin);
  split_at(segments, end);
  uint64_t at = begin;
  auto it = segments.lower_bound(begin);
  while (at < end) {
    if (it == segments.end() || it->first > at) {
      const uint64_t gap_end = it == segments.end() ? end : std::min(end, it->first);
      it = segments.emplace_hint(it, at, Segment{gap_end, -1, {}});
    }
    visit(it->second);
    at = it->second.end;
    ++it;
  }
}

}  // namespace

std::vector<LaunchAccess> launch_accesses(const BoundBundle& bound, const BoundLaunch& launch) {
  std::vector<LaunchAccess> accesses;
  for (const BoundArg& arg : launch.args) {
    switch (arg.kind) {
      case ArgKind::kInput:
      case ArgKind::kOutput:
      case ArgKind::kScratch: {
        const uint64_t offset = bound.plan.offsets.at(arg.target);
        accesses.push_back({kArenaSpace, offset, offset + bound.tensor(arg.target).bytes, arg.kind != ArgKind::kInput});
        break;
      }
      case ArgKind::kParam:
      case ArgKind::kParamOut:
        accesses.push_back(
            {1 + bound.param_index.at(arg.target), 0, bound.param(arg.target).bytes, arg.kind == ArgKind::kParamOut});
        break;
      case ArgKind::kTensorMap:  // a view of another pointer argument of the launch
      case ArgKind::kI32:
      case ArgKind::kI64:
      case ArgKind::kF32:
        break;
    }
  }
  return accesses;
}

std::vector<std::vector<size_t>> launch_dependencies(const std::vector<std::vector<LaunchAccess>>& accesses) {
  std::map<size_t, Segments> spaces;
  std::vector<std::vector<size_t>> dependencies(accesses.size());
  for (size_t j = 0; j < accesses.size(); ++j) {
    std::vector<size_t>& deps = dependencies[j];
    for (const LaunchAccess& access : accesses[j]) {
      if (access.begin >= access.end) continue;
      for_each_segment(spaces[access.space], access.begin, access.end, [&](Segment& segment) {
        if (segment.writer >= 0 && static_cast<size_t>(segment.writer) != j) deps.push_back(segment.writer);
        if (access.write) {
          for (size_t reader : segment.readers)
            if (reader != j) deps.push_back(reader);
          segment.writer = static_cast<std::ptrdiff_t>(j);
          segment.readers.clear();
        } else if (segment.writer != static_cast<std::ptrdiff_t>(j) &&
                   (segment.readers.empty() || segment.readers.back() != j)) {
          segment.readers.push_back(j);
        }
      });
    }
    std::sort(deps.begin(), deps.end(), std::greater<>());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  }
  return dependencies;
}

StreamPlan plan_streams(const std::vector<std::vector<size_t>>& dependencies, int streams) {
  const size_t n = dependencies.size();
  const size_t k = static_cast<size_t>(std::max(streams, 1));
  using Clock = std::vector<std::ptrdiff_t>;  // per stream: its latest launch ordered before, -1 none
  StreamPlan plan{std::vector<int>(n), std::vector<std::vector<size_t>>(n), std::vector<bool>(n), 1};
  std::vector<Clock> clocks(n);
  std::vector<std::ptrdiff_t> tail(k, -1);  // per stream: its last launch
  std::vector<Clock> stream_clock(k, Clock(k, -1));
  for (size_t j = 0; j < n; ++j) {
    // What the dependencies order before j; a stream whose last launch is among it adds no order.
    Clock needed(k, -1);
    for (size_t d : dependencies[j])
      for (size_t s = 0; s < k; ++s) needed[s] = std::max(needed[s], clocks[d][s]);
    size_t chosen = k;
    for (size_t s = 0; s < k; ++s) {
      const bool free = tail[s] < 0 || needed[s] >= tail[s];
      if (free && (chosen == k || tail[s] > tail[chosen])) chosen = s;
    }
    if (chosen == k) chosen = static_cast<size_t>(std::min_element(tail.begin(), tail.end()) - tail.begin());
    Clock clock = stream_clock[chosen];
    for (size_t d : dependencies[j]) {  // descending: waiting for the latest often orders the rest
      const size_t on = static_cast<size_t>(plan.stream[d]);
      if (clock[on] >= static_cast<std::ptrdiff_t>(d)) continue;
      plan.waits[j].push_back(d);
      plan.recorded[d] = true;
      for (size_t s = 0; s < k; ++s) clock[s] = std::max(clock[s], clocks[d][s]);
    }
    std::sort(plan.waits[j].begin(), plan.waits[j].end());
    clock[chosen] = static_cast<std::ptrdiff_t>(j);
    clocks[j] = clock;
    stream_clock[chosen] = clock;
    tail[chosen] = static_cast<std::ptrdiff_t>(j);
    plan.stream[j] = static_cast<int>(chosen);
    plan.streams_used = std::max(plan.streams_used, static_cast<int>(chosen) + 1);
  }
  return plan;
}

}  // namespace teeny
