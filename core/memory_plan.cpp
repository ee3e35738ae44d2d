#include "core/memory_plan.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

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
  std::string_view name;
  uint64_t bytes = 0;
  int first = 0, last = 0;
  uint64_t offset = 0;
};

// Byte ranges [begin, end) of some roots, merged where they overlap or touch. Most tree nodes
// hold one or two: those are kept in place, more in a map.
class ByteRanges {
 public:
  bool empty() const { return count_ == 0 && !many_; }

  void add(uint64_t begin, uint64_t end) {
    if (many_) {
      add_to(*many_, begin, end);
      return;
    }
    for (size_t i = 0; i < count_; ++i)
      if (few_[i].begin <= begin && end <= few_[i].end) return;  // already covered, as near the tree's root
    Range merged[kFew + 1];
    size_t count = 0;
    bool placed = false;
    for (size_t i = 0; i < count_; ++i) {
      const Range& r = few_[i];
      if (r.end < begin) {
        merged[count++] = r;
      } else if (end < r.begin) {
        if (!placed) merged[count++] = {begin, end};
        placed = true;
        merged[count++] = r;
      } else {  // overlapping or touching: one range
        begin = std::min(begin, r.begin);
        end = std::max(end, r.end);
      }
    }
    if (!placed) merged[count++] = {begin, end};
    if (count <= kFew) {
      std::copy(merged, merged + count, few_);
      count_ = count;
      return;
    }
    many_ = std::make_unique<std::map<uint64_t, uint64_t>>();
    for (size_t i = 0; i < count; ++i) many_->emplace(merged[i].begin, merged[i].end);
    count_ = 0;
  }

  // The end of the first range that overlaps [begin, end), if one does.
  std::optional<uint64_t> blocking(uint64_t begin, uint64_t end) const {
    if (many_) {
      auto next = many_->upper_bound(begin);
      if (next != many_->begin() && std::prev(next)->second > begin) return std::prev(next)->second;
      if (next != many_->end() && next->first < end) return next->second;
      return std::nullopt;
    }
    for (size_t i = 0; i < count_; ++i)
      if (few_[i].end > begin && few_[i].begin < end) return few_[i].end;
    return std::nullopt;
  }

 private:
  struct Range {
    uint64_t begin = 0, end = 0;
  };
  static constexpr size_t kFew = 2;

  static void add_to(std::map<uint64_t, uint64_t>& ranges, uint64_t begin, uint64_t end) {
    auto next = ranges.upper_bound(begin);  // the first range beginning after `begin`
    if (next != ranges.begin()) {
      auto before = std::prev(next);
      if (before->second >= end) return;  // already covered
      if (before->second >= begin) {
        begin = before->first;
        ranges.erase(before);
      }
    }
    while (next != ranges.end() && next->first <= end) {
      end = std::max(end, next->second);
      next = ranges.erase(next);
    }
    ranges.emplace_hint(next, begin, end);
  }

  Range few_[kFew];  // sorted, when many_ is not set
  size_t count_ = 0;
  std::unique_ptr<std::map<uint64_t, uint64_t>> many_;
};

// The bytes of the roots placed so far, by lifetime, to find the lowest offset clear of every
// one live at some step of a given lifetime without visiting each (visiting each live root made
// planning quadratic where many tensors stay live, as a graph's outputs do). A segment tree over
// the steps: a root is stored on the tree nodes that tile its lifetime; two lifetimes share a step
// exactly when a node tiling one is the same as, above or below a node tiling the other. Each
// tree node keeps the merged bytes of the roots stored on it, and of those stored on it or below.
class PlacedBytes {
 public:
  PlacedBytes(int first_step, int last_step) : first_step_(first_step) {
    while (leaves_ < static_cast<size_t>(last_step - first_step + 1)) leaves_ *= 2;
    own_.resize(2 * leaves_);
    subtree_.resize(2 * leaves_);
  }

  void add(int first, int last, uint64_t begin, uint64_t end) {
    for_tiling(first, last, [&](size_t node) {
      own_[node].add(begin, end);
      for (size_t up = node; up > 0; up /= 2) subtree_[up].add(begin, end);
    });
  }

  // The lowest offset at which `size` bytes are clear of every root placed with a lifetime that
  // shares a step with [first, last]. Each range that overlaps a candidate moves it past that
  // range's end, where the lowest clear offset must be; it stops where none does.
  uint64_t lowest_clear(int first, int last, uint64_t size) const {
    std::vector<const ByteRanges*> live;
    for_tiling(first, last, [&](size_t node) {
      if (!subtree_[node].empty()) live.push_back(&subtree_[node]);
      for (size_t up = node / 2; up > 0; up /= 2)
        if (!own_[up].empty()) live.push_back(&own_[up]);
    });
    uint64_t offset = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (const ByteRanges* ranges : live) {
        if (std::optional<uint64_t> end = ranges->blocking(offset, checked_add(offset, size))) {
          offset = *end;
          moved = true;
        }
      }
    }
    return offset;
  }

 private:
  // Calls visit(node) for each tree node of the tiling of [first, last] (node 1 is the root;
  // leaves start at leaves_).
  template <typename Visit>
  void for_tiling(int first, int last, const Visit& visit) const {
    size_t lo = static_cast<size_t>(first - first_step_) + leaves_;
    size_t hi = static_cast<size_t>(last - first_step_) + leaves_ + 1;  // exclusive
    for (; lo < hi; lo /= 2, hi /= 2) {
      if (lo & 1) visit(lo++);
      if (hi & 1) visit(--hi);
    }
  }

  int first_step_;
  size_t leaves_ = 1;
  std::vector<ByteRanges> own_;      // per tree node: the roots stored on it
  std::vector<ByteRanges> subtree_;  // per tree node: the roots stored on it or below
};

// The first 8 bytes of `name`, zero-padded, as a big-endian number: where two names' prefixes
// differ, they compare as the names do.
uint64_t name_prefix(const std::string& name) {
  uint64_t prefix = 0;
  for (size_t i = 0; i < 8; ++i) prefix = prefix << 8 | (i < name.size() ? static_cast<unsigned char>(name[i]) : 0);
  return prefix;
}

// The indices of `entries` sorted by name, then index. By prefix first: a sort comparing the
// names themselves, each a call and a cache miss, took most of planning a 10^5-node chain.
std::vector<size_t> sorted_by_name(const std::vector<PlanEntry>& entries) {
  std::vector<std::pair<uint64_t, size_t>> keyed(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) keyed[i] = {name_prefix(entries[i].name), i};
  std::sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    const int order = entries[a.second].name.compare(entries[b.second].name);
    return order != 0 ? order < 0 : a.second < b.second;
  });
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = keyed[i].second;
  return order;
}

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
  // Entries by name, then position: to find a name, and the offsets' own order.
  const std::vector<size_t> by_name = sorted_by_name(entries);
  std::vector<bool> repeated(entries.size(), false);  // per entry: an earlier one has its name
  for (size_t k = 1; k < by_name.size(); ++k)
    repeated[by_name[k]] = entries[by_name[k]].name == entries[by_name[k - 1]].name;
  // The first entry named `name`, or npos.
  auto first_named = [&](const std::string& name) {
    auto it = std::lower_bound(by_name.begin(), by_name.end(), name,
                               [&](size_t entry, const std::string& n) { return entries[entry].name < n; });
    return it != by_name.end() && entries[*it].name == name ? *it : std::string::npos;
  };

  // Resolve every view to the non-view entry owning its bytes, and widen that owner's
  // lifetime to cover the view's.
  std::vector<size_t> root_of(entries.size());  // per entry: its index in roots
  std::vector<Root> roots;
  for (size_t i = 0; i < entries.size(); ++i) {
    const PlanEntry& entry = entries[i];
    if (repeated[i]) throw Error(fmt::format("memory plan: tensor '{}' appears twice", entry.name));
    if (entry.alias_of.empty()) {
      root_of[i] = roots.size();
      roots.push_back({entry.name, entry.bytes, entry.first_step, entry.last_step});
      continue;
    }
    const size_t source = first_named(entry.alias_of);
    if (source == std::string::npos || source >= i) {
      throw Error(fmt::format("memory plan: view '{}' aliases '{}', which is not an earlier tensor", entry.name,
                              entry.alias_of));
    }
    Root& root = roots[root_of[source]];
    if (entry.bytes > root.bytes) {
      throw Error(fmt::format("memory plan: view '{}' ({} bytes) is larger than '{}' ({} bytes)", entry.name,
                              entry.bytes, root.name, root.bytes));
    }
    root.first = std::min(root.first, entry.first_step);
    root.last = std::max(root.last, entry.last_step);
    root_of[i] = root_of[source];
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
  PlacedBytes placed(first_step, last_step);
  for (size_t index : order) {
    Root& root = roots[index];
    const uint64_t size = align_up(std::max<uint64_t>(root.bytes, 1), alignment);
    root.offset = placed.lowest_clear(root.first, root.last, size);
    const uint64_t end = checked_add(root.offset, size);
    placed.add(root.first, root.last, root.offset, end);
    plan.arena_bytes = std::max(plan.arena_bytes, end);
    plan.naive_bytes = checked_add(plan.naive_bytes, size);
  }

  plan.buffers = static_cast<int>(roots.size());
  plan.shared = count_shared(roots, alignment);
  // Into the map in its own order, each at its end.
  for (size_t i : by_name) plan.offsets.emplace_hint(plan.offsets.end(), entries[i].name, roots[root_of[i]].offset);
  return plan;
}

}  // namespace teeny
