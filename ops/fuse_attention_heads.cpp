// Graph pass: merge_heads(sdpa(split_heads(a), split_heads(b), split_heads(c))), with the
// merge's `heads` H on a, H / kv_groups (sdpa's) on b and c, and each split_heads and the sdpa
// output used once, becomes one fused.sdpa_heads node on a, b, c (grouped-query attention when
// kv_groups > 1). It takes the merge_heads node's name (so its consumers and the graph outputs
// are unchanged), the sdpa node's source positions (errors about causal or scale point there)
// and lists the five nodes it replaced in Node::fused_from.
#include <algorithm>
#include <array>

#include "core/graph.h"
#include "ops/ops.h"
#include "ops/pass_util.h"
#include "ops/sdpa.h"

namespace teeny::ops {
namespace {

Node fuse(const std::array<const Node*, 3>& splits, const Node& sdpa, const Node& merge, const OpDef& fused,
          const GraphUses& uses) {
  Node node;
  node.name = merge.name;
  node.op = &fused;
  node.pos = sdpa.pos;
  node.key_pos = sdpa.key_pos;
  nlohmann::json attrs = sdpa.ctx.attrs.json();  // causal, kv_groups, and scale and window when given
  attrs["heads"] = merge.ctx.attrs.integer("heads");
  node.ctx.node = merge.name;
  node.ctx.attrs = Attrs(std::move(attrs));
  for (const Node* split : splits) {
    node.inputs.push_back(split->inputs.at(0));
    node.ctx.inputs.push_back(split->ctx.inputs.at(0));
  }
  node.ctx.requested_dtype = merge.ctx.requested_dtype;
  node.ctx.output = fused.infer(node.ctx);
  std::vector<const Node*> originals = {splits[0], splits[1], splits[2], &sdpa, &merge};
  std::sort(originals.begin(), originals.end(),
            [&](const Node* x, const Node* y) { return uses.position(*x) < uses.position(*y); });
  node.fused_from = fused_from(originals);
  return node;
}

int fuse_attention_heads(Graph& graph, const Registry& registry) {
  const OpDef& fused = fused_op(registry, "fuse_attention_heads", "fused.sdpa_heads");
  return fuse_patterns(graph, "merge_heads", [&](const Node& merge, const GraphUses& uses) -> std::optional<Fusion> {
    const int64_t heads = merge.ctx.attrs.integer("heads");
    const Node* sdpa = uses.single_use_producer(merge.inputs.at(0), "sdpa");
    if (sdpa == nullptr) return std::nullopt;
    const int64_t groups = kv_groups(sdpa->ctx.attrs);
    if (heads % groups != 0) return std::nullopt;
    std::array<const Node*, 3> splits{};
    for (size_t i = 0; i < 3; ++i) {
      const int64_t split_heads = i == 0 ? heads : heads / groups;  // q's, then k's and v's
      splits[i] = uses.single_use_producer(sdpa->inputs.at(i), "split_heads");
      if (splits[i] == nullptr || splits[i]->ctx.attrs.integer("heads") != split_heads ||
          splits[i]->ctx.inputs.at(0).shape.size() != 3)
        return std::nullopt;
    }
    return Fusion{fuse(splits, *sdpa, merge, fused, uses), {splits[0], splits[1], splits[2], sdpa}};
  });
}

}  // namespace

// Before training: fused.sdpa_heads' backward reads and writes the heads in place too, so a
// trained attention block copies no head either way.
GraphPass fuse_attention_heads_pass() {
  return GraphPass{"fuse_attention_heads",
                   "split_heads x3 -> sdpa -> merge_heads, heads H on q and the merge, H / kv_groups on k and v, "
                   "intermediates used once, into one fused.sdpa_heads node that reads and writes the heads in place",
                   fuse_attention_heads, true};
}

}  // namespace teeny::ops
