// Which launches of a bundle may run at the same time, and on which streams to enqueue them so
// that they do. A bundle's launches are a sequence, but many do not touch each other's memory:
// a training step's weight gradients beside the input-gradient chain, its per-param updates, a
// block's q, k and v projections. Small launches leave most of the GPU idle, so a CUDA graph
// that runs independent launches side by side finishes sooner than the sequence.
//
// Dependencies come from the bytes each launch reads and writes, after memory planning: two
// launches are ordered when one writes bytes the other reads or writes. That covers the data
// flow and the planner's reuse of bytes (a later tensor placed over a dead one) alike, and it
// needs no knowledge of any op. Everything here is on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/binding.h"

namespace teeny {

// Bytes [begin, end) of one memory space (kArenaSpace, or 1 + a param's index) that a launch
// reads or writes.
struct LaunchAccess {
  size_t space = 0;
  uint64_t begin = 0, end = 0;
  bool write = false;
};
inline constexpr size_t kArenaSpace = 0;

// What `launch` reads and writes: its inputs and params read; its outputs, scratch buffers and
// params written through param_out args are taken as read and written (a kernel may accumulate
// into them).
std::vector<LaunchAccess> launch_accesses(const BoundBundle& bound, const BoundLaunch& launch);

// Per launch, the earlier launches it must follow (indices into `accesses`, descending): for
// every byte it touches, the last launch that wrote it, and where it writes, every launch that
// read it since. Any other conflict is ordered through these.
std::vector<std::vector<size_t>> launch_dependencies(const std::vector<std::vector<LaunchAccess>>& accesses);

// Launches spread over `streams` streams (stream 0 the caller's; the others start after
// everything enqueued on it before, and it waits for all of them at the end). A launch goes on
// a stream that is empty or whose last launch it follows anyway (the most recent such, so that
// it usually follows its latest dependency on its own stream), else on the stream idle longest
// (an order the data does not need, which costs only concurrency). `waits`: the launches on
// other streams it waits for (an event recorded after each), leaving out those already ordered
// before it. Order is tracked exactly, with a vector clock per launch.
struct StreamPlan {
  std::vector<int> stream;                 // per launch
  std::vector<std::vector<size_t>> waits;  // per launch, ascending
  std::vector<bool> recorded;              // per launch: another launch waits for it
  int streams_used = 1;
};
StreamPlan plan_streams(const std::vector<std::vector<size_t>>& dependencies, int streams);

}  // namespace teeny
