#include "core/memory_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace teeny {

namespace {

uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

struct Root {
  std::string name;
  uint64_t bytes = 0;
  int first = 0, last = 0;
  uint64_t offset = 0;
};

}  // namespace

MemoryPlan plan_memory(const std::vector<PlanEntry>& entries, uint64_t alignment) {
  // Resolve every view to the non-view entry owning its bytes, and widen that owner's
  // lifetime to cover the view's.
  std::map<std::string, size_t> root_of_entry;  // entry name -> index in roots
  std::vector<Root> roots;
  for (const PlanEntry& entry : entries) {
    if (root_of_entry.count(entry.name)) {
      throw Error(fmt::format("memory plan: tensor '{}' appears twice", entry.name));
    }
    if (entry.alias_of.empty()) {
      root_of_entry[entry.name] = roots.size();
      roots.push_back({entry.name, entry.bytes, entry.first_step, entry.last_step});
      continue;
    }
    auto source = root_of_entry.find(entry.alias_of);
    if (source == root_of_entry.end()) {
      throw Error(fmt::format("memory plan: view '{}' aliases '{}', which is not an earlier tensor", entry.name,
                              entry.alias_of));
    }
    Root& root = roots[source->second];
    if (entry.bytes > root.bytes) {
      throw Error(fmt::format("memory plan: view '{}' ({} bytes) is larger than '{}' ({} bytes)", entry.name,
                              entry.bytes, root.name, root.bytes));
    }
    root.first = std::min(root.first, entry.first_step);
    root.last = std::max(root.last, entry.last_step);
    root_of_entry[entry.name] = source->second;
  }

  std::vector<size_t> order(roots.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Deterministic: size descending, then earlier first use, then declaration order.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (roots[a].bytes != roots[b].bytes) return roots[a].bytes > roots[b].bytes;
    return roots[a].first < roots[b].first;
  });

  MemoryPlan plan;
  std::vector<size_t> placed;  // indices into roots, kept sorted by offset
  for (size_t index : order) {
    Root& root = roots[index];
    const uint64_t size = align_up(std::max<uint64_t>(root.bytes, 1), alignment);
    uint64_t offset = 0;
    for (size_t other_index : placed) {
      const Root& other = roots[other_index];
      const bool live_together = root.first <= other.last && other.first <= root.last;
      if (!live_together) continue;
      const uint64_t other_end = other.offset + align_up(std::max<uint64_t>(other.bytes, 1), alignment);
      if (offset + size <= other.offset) break;  // fits in the gap before `other`
      offset = std::max(offset, other_end);
    }
    root.offset = offset;
    placed.insert(std::upper_bound(placed.begin(), placed.end(), index,
                                   [&](size_t a, size_t b) { return roots[a].offset < roots[b].offset; }),
                  index);
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    plan.naive_bytes += size;
  }

  plan.buffers = static_cast<int>(roots.size());
  for (size_t a = 0; a < roots.size(); ++a) {
    const uint64_t a_end = roots[a].offset + align_up(std::max<uint64_t>(roots[a].bytes, 1), alignment);
    for (size_t b = 0; b < roots.size(); ++b) {
      if (a == b) continue;
      const uint64_t b_end = roots[b].offset + align_up(std::max<uint64_t>(roots[b].bytes, 1), alignment);
      if (roots[a].offset < b_end && roots[b].offset < a_end) {
        ++plan.shared;
        break;
      }
    }
  }
  for (const auto& [name, root_index] : root_of_entry) plan.offsets[name] = roots[root_index].offset;
  return plan;
}

}  // namespace teeny
