// `teeny tune`: picks each tunable node's kernel variant (OpDef::tuning) by measuring them all on
// the GPU. Every distinct problem of a graph at one binding (op, dtype and tuning dims; nodes
// alike share one) becomes nodes of one graph, one per variant, reading the problem's inputs; the
// graph is compiled once (a variant that fails to compile is rejected alone), run once with random
// data to check each variant's output against the host reference (rows sampled where the op
// allows), and profiled with CUPTI, the L2 flushed before each launch (cold) or not (warm). The fastest variant
// that passes is the problem's record (core/tuning.h), with every candidate's time or rejection.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/compile.h"
#include "core/driver.h"
#include "core/graph.h"
#include "core/profiler.h"
#include "core/tuning.h"

namespace teeny {

struct TuneOptions {
  CompileOptions compile;  // arch, fusion, NVRTC jobs and cache; `fixed` binds every dim
  bool cold_l2 = true;
  int iterations = 30;   // timed, after a short warm-up
  int check_rows = 32;   // output rows compared with the reference, where the op allows sampling
  uint64_t seed = 0;     // random inputs and params
  std::string work_dir;  // where the candidates' bundles are written
};

// One distinct tunable problem of the graph.
struct TuneProblem {
  const Node* node = nullptr;      // the first node with it, in the prepared graph
  std::vector<std::string> nodes;  // every node with it
  std::string op;
  DType dtype = DType::kF32;
  std::vector<std::pair<std::string, int64_t>> dims;
  std::vector<std::string> variants;
};

// Dims of single values as ranges, for a record.
std::vector<std::pair<std::string, DimRange>> point_ranges(const std::vector<std::pair<std::string, int64_t>>& dims);

// The tunable problems of `prepared` (prepare_graph with every dim fixed), in graph order.
std::vector<TuneProblem> tune_problems(const Graph& prepared);

// Whether `record` already holds a measurement of every variant of `problem` under `cold_l2`
// (a resumed tune skips it).
bool record_covers(const TuningRecord& record, const TuneProblem& problem, bool cold_l2);

// Each node's time in one profiled run: the sum of its launches' medians (a variant's zeroing or
// split-sum launch counts with its GEMM), and the iterations timed.
std::map<std::string, std::pair<double, int>> node_times(const ProfileRun& run);

// Measures every variant of every problem on `device`, all in one bundle (compiled in one parallel
// NVRTC pass, checked in one run, timed in one CUPTI session), and returns their records in order.
// Throws Error where the measurement cannot be trusted or a problem has no variant that passes.
std::vector<TuningRecord> tune(const std::vector<const TuneProblem*>& problems, const Registry& registry,
                               const TuneOptions& options, const std::shared_ptr<cuda::Device>& device);

}  // namespace teeny
