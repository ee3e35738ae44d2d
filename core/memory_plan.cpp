#include "core/memory_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace teeny {

namespace {

// a + b: an arena that would reach 2^64 bytes (2^24 tensors of 1 TiB) is an error, not an
// offset that wraps.
uint64_t checked_add(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) throw Error("memory plan: the activations need 2^64 bytes or more");
  return sum;
}

uint64_t align_up(uint64_t value, uint64_t alignment) {
  return checked_add(value, alignment - 1) / alignment * alignment;
}

struct Root {
  std::string name;
  uint64_t bytes = 0;
  int first = 0, last = 0;
  uint64_t offset = 0;
};

// The roots placed so far, by lifetime, to find those live at some step of a given lifetime in
// time that grows with how many are, not with how many were placed (scanning every placed root
// made planning a 10^5-node chain quadratic). A segment tree over the steps: a root is stored on
// the tree nodes that tile its lifetime; two lifetimes share a step exactly when a node tiling
// one is the same as, above or below a node tiling the other.
class LiveRoots {
 public:
  LiveRoots(size_t roots, int first_step, int last_step) : first_step_(first_step), seen_(roots, 0) {
    while (leaves_ < static_cast<size_t>(last_step - first_step + 1)) leaves_ *= 2;
    stored_.resize(2 * leaves_);
    in_subtree_.resize(2 * leaves_, 0);
  }

  void add(size_t root, int first, int last) {
    for (size_t node : tiling(first, last)) {
      stored_[node].push_back(root);
      for (size_t up = node; up > 0; up /= 2) ++in_subtree_[up];
    }
  }

  // Every root added whose lifetime shares a step with [first, last], each once.
  std::vector<size_t> live_with(int first, int last) {
    ++query_;
    std::vector<size_t> found;
    auto report = [&](size_t node) {
      for (size_t root : stored_[node]) {
        if (seen_[root] == query_) continue;
        seen_[root] = query_;
        found.push_back(root);
      }
    };
    std::vector<size_t> below;
    for (size_t node : tiling(first, last)) {
      for (size_t up = node / 2; up > 0; up /= 2) report(up);
      below.push_back(node);
      while (!below.empty()) {
        size_t v = below.back();
        below.pop_back();
        if (in_subtree_[v] == 0) continue;
        report(v);
        if (v < leaves_) {
          below.push_back(2 * v);
          below.push_back(2 * v + 1);
        }
      }
    }
    return found;
  }

 private:
  // The tree nodes whose step ranges tile [first, last] (node 1 is the root; leaves start at leaves_).
  std::vector<size_t> tiling(int first, int last) const {
    std::vector<size_t> nodes;
    size_t lo = static_cast<size_t>(first - first_step_) + leaves_;
    size_t hi = static_cast<size_t>(last - first_step_) + leaves_ + 1;  // exclusive
    for (; lo < hi; lo /= 2, hi /= 2) {
      if (lo & 1) nodes.push_back(lo++);
      if (hi & 1) nodes.push_back(--hi);
    }
    return nodes;
  }

  int first_step_;
  size_t leaves_ = 1;
  std::vector<std::vector<size_t>> stored_;  // per tree node: the roots it helps tile
  std::vector<size_t> in_subtree_;           // per tree node: roots stored at it or below
  std::vector<uint32_t> seen_;               // per root: the last query that found it
  uint32_t query_ = 0;
};

// How many of `roots` share a byte with another, in any lifetime.
int count_shared(const std::vector<Root>& roots, uint64_t alignment) {
  std::vector<size_t> by_offset(roots.size());
  for (size_t i = 0; i < by_offset.size(); ++i) by_offset[i] = i;
  std::sort(by_offset.begin(), by_offset.end(), [&](size_t a, size_t b) { return roots[a].offset < roots[b].offset; });
  auto end = [&](size_t i) { return roots[i].offset + align_up(std::max<uint64_t>(roots[i].bytes, 1), alignment); };
  int shared = 0;
  uint64_t furthest_end = 0;  // of the roots before, in offset order
  for (size_t k = 0; k < by_offset.size(); ++k) {
    const size_t i = by_offset[k];
    const bool overlaps_earlier = k > 0 && furthest_end > roots[i].offset;
    const bool overlaps_next = k + 1 < by_offset.size() && roots[by_offset[k + 1]].offset < end(i);
    if (overlaps_earlier || overlaps_next) ++shared;
    furthest_end = std::max(furthest_end, end(i));
  }
  return shared;
}

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
  int first_step = 0, last_step = 0;
  for (const Root& root : roots) {
    first_step = std::min(first_step, root.first);
    last_step = std::max(last_step, root.last);
  }
  LiveRoots placed(roots.size(), first_step, last_step);
  for (size_t index : order) {
    Root& root = roots[index];
    const uint64_t size = align_up(std::max<uint64_t>(root.bytes, 1), alignment);
    std::vector<size_t> live = placed.live_with(root.first, root.last);
    std::sort(live.begin(), live.end(), [&](size_t a, size_t b) { return roots[a].offset < roots[b].offset; });
    uint64_t offset = 0;
    for (size_t other_index : live) {
      const Root& other = roots[other_index];
      const uint64_t other_end = other.offset + align_up(std::max<uint64_t>(other.bytes, 1), alignment);
      if (checked_add(offset, size) <= other.offset) break;  // fits in the gap before `other`
      offset = std::max(offset, other_end);
    }
    root.offset = offset;
    placed.add(index, root.first, root.last);
    plan.arena_bytes = std::max(plan.arena_bytes, checked_add(offset, size));
    plan.naive_bytes = checked_add(plan.naive_bytes, size);
  }

  plan.buffers = static_cast<int>(roots.size());
  plan.shared = count_shared(roots, alignment);
  for (const auto& [name, root_index] : root_of_entry) plan.offsets[name] = roots[root_index].offset;
  return plan;
}

}  // namespace teeny
