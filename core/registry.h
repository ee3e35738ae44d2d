// The op registry: an explicit list (ops/ops.inc) turned into a lookup table. A Registry is
// a value passed to the spec parser and compiler, so tests can add test-only ops.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/op.h"

namespace teeny {

struct Graph;

// A graph-level rewrite run by compile before lowering (unless --no-fuse), e.g. fusing
// conv2d -> batchnorm2d -> silu into conv2d_bn_silu. Lives with the ops it names, in ops/.
struct GraphPass {
  std::string name;
  std::string doc;
  // Rewrites `graph` in place (types re-inferred by the pass); returns how many rewrites.
  std::function<int(Graph& graph, const class Registry& registry)> apply;
  // Runs before a training graph is differentiated, so the op it forms is differentiated instead
  // of the nodes it replaces: for a fused op whose backward costs no more than theirs. Other
  // passes run after, and leave alone the tensors the backward reads.
  bool before_training = false;
};

class Registry {
 public:
  // Throws teeny::Error on a duplicate name or an op missing infer/reference.
  void add(OpDef def);
  const OpDef* find(const std::string& name) const;  // nullptr if unknown
  std::vector<std::string> names() const;            // sorted
  const std::vector<OpDef>& ops() const { return ops_; }

  void add_pass(GraphPass pass);
  const std::vector<GraphPass>& passes() const { return passes_; }

  // The kernel headers (ops/kernels/*.cuh) kernels include; NVRTC gets them in memory. Throws
  // teeny::Error on a duplicate name.
  void add_kernel_header(KernelHeader header);
  const std::vector<KernelHeader>& kernel_headers() const { return kernel_headers_; }

 private:
  std::vector<OpDef> ops_;
  std::map<std::string, size_t> index_;
  std::vector<GraphPass> passes_;
  std::vector<KernelHeader> kernel_headers_;
};

}  // namespace teeny
