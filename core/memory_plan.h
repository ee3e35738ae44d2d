// Activation memory planning by liveness: every activation gets an offset in one arena, and
// tensors whose lifetimes do not overlap share bytes. Views alias their source's bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace teeny {

inline constexpr uint64_t kArenaAlignment = 256;  // cuMemAlloc's own alignment; fits any vector access

struct PlanEntry {
  std::string name;
  uint64_t bytes = 0;
  // Steps are node indices. A tensor occupies its bytes from the step that writes it through
  // the last step that reads it, inclusive: a node's output never shares bytes with its own
  // inputs, so no kernel has to be safe in place.
  int first_step = 0;
  int last_step = 0;
  // A view: shares the bytes of this (earlier) entry and extends that entry's lifetime.
  std::string alias_of;
};

struct MemoryPlan {
  std::map<std::string, uint64_t> offsets;  // every entry, views included
  uint64_t arena_bytes = 0;                 // planned: the highest end offset
  uint64_t naive_bytes = 0;                 // one aligned buffer per non-view tensor, no reuse
  int buffers = 0;                          // non-view tensors
  int shared = 0;                           // non-view tensors placed over bytes another one also uses
};

// Greedy by size: the largest tensor first, each at the lowest aligned offset that does not
// overlap a placed tensor with an overlapping lifetime. Throws Error on an unknown alias.
MemoryPlan plan_memory(const std::vector<PlanEntry>& entries, uint64_t alignment = kArenaAlignment);

}  // namespace teeny
