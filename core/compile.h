// teeny compile: graph -> lowering -> deduplicated kernels -> NVRTC -> verification -> Bundle.
//
// Verification is the point of this file: every launch's argument list is checked against the
// kernel's parameters (from which compile generates the entry; NVRTC then checks the call into the
// kernel's template) and the PTX `.visible .entry` parameter list (count, size, alignment); tensor-map arguments
// against the pointer they view and TMA's limits; the block against `.reqntid` / `.maxntid`; host init bytes against
// shape × dtype size. A mismatch is an error naming the op, node, launch, argument position, what was expected and what
// was found.
#pragma once

#include <string>
#include <vector>

#include "core/bundle.h"
#include "core/graph.h"
#include "core/ptx.h"
#include "core/registry.h"
#include "core/tuning.h"

namespace teeny {

struct CompileOptions {
  std::string arch = "sm_90";
  // Dims fixed at compile time (compile --bind): substituted into every shape before
  // lowering, so kernels may specialise on them. Must be declared dims, within range.
  Bindings fixed;
  bool fuse = true;  // run registry.passes() (--no-fuse turns them off)
  int jobs = 0;      // NVRTC threads; 0: one per hardware thread
  bool use_cache = true;
  std::string cache_dir;  // empty: TEENY_CACHE_DIR, else ~/.cache/teeny
  std::vector<std::string> extra_nvrtc_options;
  // Kernel choices measured by `teeny tune`: where a record applies, a tunable node builds the
  // recorded variant (core/lowering_choice.h). nullopt: every op's heuristic.
  std::optional<TuningFile> tuning;
  // Node name -> the variant it builds at every binding (`teeny tune` measuring candidates).
  std::map<std::string, std::string> variants;
};

struct CompileStats {
  int passes_applied = 0;             // rewrites made by graph passes
  int kernels = 0;                    // unique kernels in the bundle
  int compiled = 0;                   // of those, compiled by NVRTC now
  int cached = 0;                     // of those, read from the kernel cache
  std::vector<std::string> warnings;  // e.g. a cache entry that could not be written
};

Bundle compile_graph(const Graph& graph, const Registry& registry, const CompileOptions& options,
                     CompileStats* stats = nullptr);
// The same without copying `graph`, which passes and --bind rewrite as they compile it.
Bundle compile_graph(Graph&& graph, const Registry& registry, const CompileOptions& options,
                     CompileStats* stats = nullptr);

// The graph as compile_graph lowers it: fusion passes applied (options.fuse), the fixed dims
// substituted, each node's context given the target SM.
Graph prepare_graph(Graph graph, const Registry& registry, const CompileOptions& options);

// ---- pieces of verification, exposed for tests --------------------------------------------

// Why `block` cannot launch `entry` (not a CUDA block, not its .reqntid, over its .maxntid), or "".
std::string block_problem(const std::array<int, 3>& block, const PtxEntry& entry);

// The translation unit compile generates for a kernel with a `function`: its header's #include and
// an entry named `entry` taking `kernel.params` and forwarding them, in order, to the function.
std::string kernel_translation_unit(const KernelSource& kernel, const std::string& entry);

}  // namespace teeny
