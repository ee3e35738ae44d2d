#include "core/tune.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "core/binding.h"
#include "core/compare.h"
#include "core/executor.h"
#include "core/host_executor.h"
#include "core/profiler.h"
#include "core/run_data.h"

namespace teeny {
namespace {

std::string replica_name(size_t index) { return fmt::format("v{}", index); }

// Appends one node per variant (`prefix`v0, v1, ...), each reading the problem node's inputs as
// contiguous graph inputs (`prefix`in0, in1, ...); `variants_of` gets each node's variant.
void add_replicas(Graph& graph, std::map<std::string, std::string>& variants_of, const TuneProblem& problem,
                  const std::vector<std::string>& variants, const std::string& prefix) {
  const Node& node = *problem.node;
  std::vector<std::string> inputs;
  std::vector<TensorType> types;
  for (size_t i = 0; i < node.ctx.inputs.size(); ++i) {
    inputs.push_back(fmt::format("{}in{}", prefix, i));
    types.push_back(contiguous(node.ctx.inputs[i].dtype, node.ctx.inputs[i].shape));
    graph.inputs.push_back({inputs.back(), types.back(), {}});
  }
  for (size_t v = 0; v < variants.size(); ++v) {
    Node replica;
    replica.name = prefix + replica_name(v);
    replica.op = node.op;
    replica.inputs = inputs;
    replica.ctx = node.ctx;
    replica.ctx.node = replica.name;
    replica.ctx.inputs = types;
    variants_of[replica.name] = variants[v];
    graph.outputs.push_back(replica.name);
    graph.nodes.push_back(std::move(replica));
  }
}

// Compiles replicas as they are: every dim already a constant, no fusion, no tuning file.
Bundle compile_replicas(Graph graph, std::map<std::string, std::string> variants_of, const Registry& registry,
                        const TuneOptions& options) {
  CompileOptions compile = options.compile;
  compile.fixed.clear();
  compile.fuse = false;
  compile.tuning.reset();
  compile.variants = std::move(variants_of);
  return compile_graph(std::move(graph), registry, compile);
}

// A problem's candidates: those still in the running, and why each of the others is out.
struct Candidates {
  std::vector<std::string> variants;
  std::map<std::string, std::string> rejected;
};

std::string prefix(size_t problem) { return fmt::format("p{}_", problem); }

// Every problem's candidates, one graph.
Bundle compile_candidates(const std::vector<const TuneProblem*>& problems, const std::vector<Candidates>& candidates,
                          const Registry& registry, const TuneOptions& options) {
  Graph graph;
  graph.name = "tune";
  std::map<std::string, std::string> variants_of;
  for (size_t p = 0; p < problems.size(); ++p)
    add_replicas(graph, variants_of, *problems[p], candidates[p].variants, prefix(p));
  return compile_replicas(std::move(graph), std::move(variants_of), registry, options);
}

// Compiles every candidate together; where that fails, each alone first, rejecting those that
// fail (with the reason).
Bundle compile_all(const std::vector<const TuneProblem*>& problems, std::vector<Candidates>& candidates,
                   const Registry& registry, const TuneOptions& options) {
  try {
    return compile_candidates(problems, candidates, registry, options);
  } catch (const Error&) {
    for (size_t p = 0; p < problems.size(); ++p) {
      std::vector<std::string> compiled;
      for (const std::string& variant : candidates[p].variants) {
        try {
          compile_candidates({problems[p]}, {Candidates{{variant}, {}}}, registry, options);
          compiled.push_back(variant);
        } catch (const Error& error) {
          candidates[p].rejected[variant] = "compile: " + error.message();
        }
      }
      candidates[p].variants = compiled;
    }
    return compile_candidates(problems, candidates, registry, options);
  }
}

// Output rows spread evenly over [0, rows), the first and last among them.
std::vector<int64_t> sample_rows(int64_t rows, int count) {
  std::vector<int64_t> out;
  const int64_t n = std::min<int64_t>(rows, count);
  for (int64_t i = 0; i < n; ++i) out.push_back(n == 1 ? 0 : i * (rows - 1) / (n - 1));
  return out;
}

size_t node_index(const Bundle& bundle, const std::string& name) {
  for (size_t i = 0; i < bundle.nodes.size(); ++i) {
    if (bundle.nodes[i].name == name) return i;
  }
  throw Error(fmt::format("the candidates' bundle has no node '{}'", name));
}

// Compares each of a problem's candidates, run on the same inputs and params, with the reference,
// on sampled rows where the op's reference can compute them alone (OpTuning::row_inputs,
// OpTuning::reference_rows).
void check_problem(const BoundBundle& bound, const GpuExecutor& executor, const RunData& data, size_t p,
                   Candidates& candidates, const Registry& registry, const TuneOptions& options) {
  const Bundle& bundle = *bound.bundle;
  const std::string first = prefix(p) + replica_name(0);
  const size_t index = node_index(bundle, first);
  std::vector<HostTensor> inputs;
  for (const std::string& input : bundle.nodes[index].inputs) inputs.push_back(data.inputs.at(input));
  const OpDef* op = registry.find(bundle.nodes[index].op);
  const int64_t rows = bound.tensor(first).rows;
  const bool sampled = op != nullptr && (!op->tuning.row_inputs.empty() || op->tuning.reference_rows);
  const std::vector<int64_t> checked = sample_rows(rows, sampled ? options.check_rows : static_cast<int>(rows));
  const HostTensor reference = sampled ? reference_rows(bound, registry, index, inputs, data.params, checked)
                                       : reference_node(bound, registry, index, inputs, data.params);
  for (size_t v = 0; v < candidates.variants.size(); ++v) {
    HostTensor output = executor.read(prefix(p) + replica_name(v));
    if (sampled) output = select_rows(output, checked);
    const Comparison result = compare_values(output, reference, tolerance_for(output.dtype));
    if (!result.ok()) {
      candidates.rejected[candidates.variants[v]] =
          fmt::format("numerics: {} of {} checked values off the reference (max rel error {:.3g})", result.mismatches,
                      result.count, result.max_rel);
    }
  }
}

// Runs every candidate once with random inputs and params (a problem's candidates all get its first
// one's params, so one reference serves them) and checks each.
void check_all(const Bundle& bundle, const std::string& path, std::vector<Candidates>& candidates,
               const Registry& registry, const TuneOptions& options, const std::shared_ptr<cuda::Device>& device) {
  BoundBundle bound = bind_bundle(bundle, {}, path);
  bind_launches(bound, device->facts());
  DataOptions data_options;
  data_options.seed = options.seed;
  data_options.fill = ParamFill::kRandom;
  RunData data = prepare_data(bound, data_options);
  for (const BundleParam& param : bundle.params) {
    const std::string problem = param.node.substr(0, param.node.find('_') + 1);
    data.params[param.name] = data.params.at(problem + replica_name(0) + "." + param.slot);
  }
  GpuExecutor executor(device, bound);
  executor.upload(data);
  executor.run(1, false);
  for (size_t p = 0; p < candidates.size(); ++p)
    check_problem(bound, executor, data, p, candidates[p], registry, options);
}

// Each node's median time (the sum of its launches' medians) and the iterations timed, in one
// CUPTI session: CUPTI 13.0 names the kernels of modules loaded after others were unloaded by the
// unloaded ones' names, so the candidates are not profiled bundle after bundle in one process.
std::map<std::string, std::pair<double, int>> time_all(const std::string& path, const TuneOptions& options) {
  ProfileOptions profile;
  profile.warmup_iterations = 3;
  profile.warmup_min_seconds = 0.05;
  profile.iterations = options.iterations;
  profile.min_seconds = 0;
  profile.mode = options.cold_l2 ? ProfileMode::kIsolated : ProfileMode::kSequence;
  profile.seed = options.seed;
  const ProfileReport report = profile_bundle(path, {{}}, "", profile);
  const ProfileRun& run = report.runs.at(0);
  if (!run.untrusted.empty()) {
    Error error("the candidates' timings cannot be trusted");
    for (const std::string& reason : run.untrusted) error.note(reason);
    throw error;
  }
  return node_times(run);
}

// The problem's record: every candidate's time or rejection, the fastest measured one the winner.
TuningRecord record_of(const TuneProblem& problem, size_t p, const Candidates& candidates,
                       const std::map<std::string, std::pair<double, int>>& times, bool cold_l2) {
  TuningRecord record;
  record.op = problem.op;
  record.dtype = problem.dtype;
  record.dims = point_ranges(problem.dims);
  record.l2 = cold_l2 ? "cold" : "warm";
  double best = 0;
  for (const std::string& variant : problem.variants) {
    TuningCandidate candidate{variant, 0, 0, ""};
    const auto position = std::find(candidates.variants.begin(), candidates.variants.end(), variant);
    if (auto why = candidates.rejected.find(variant); why != candidates.rejected.end()) {
      candidate.rejected = why->second;
    } else if (position != candidates.variants.end()) {
      const std::string node = prefix(p) + replica_name(static_cast<size_t>(position - candidates.variants.begin()));
      std::tie(candidate.median_us, candidate.iterations) = times.at(node);
      if (record.variant.empty() || candidate.median_us < best) {
        record.variant = variant;
        best = candidate.median_us;
      }
    }
    record.candidates.push_back(std::move(candidate));
  }
  if (record.variant.empty()) {
    Error error(fmt::format("{} {} {}: no variant passes its check", problem.op, dtype_name(problem.dtype),
                            dims_text(record.dims)));
    for (const TuningCandidate& c : record.candidates) error.note(fmt::format("{}: {}", c.variant, c.rejected));
    throw error;
  }
  return record;
}

}  // namespace

std::vector<std::pair<std::string, DimRange>> point_ranges(const std::vector<std::pair<std::string, int64_t>>& dims) {
  std::vector<std::pair<std::string, DimRange>> out;
  for (const auto& [name, value] : dims) out.push_back({name, {value, value}});
  return out;
}

std::map<std::string, std::pair<double, int>> node_times(const ProfileRun& run) {
  std::map<std::string, std::pair<double, int>> times;
  for (const LaunchStats& launch : run.launches) {
    auto& [us, iterations] = times[launch.facts.owner];
    us += launch.duration_us.median;
    iterations = run.iterations;
  }
  return times;
}

std::vector<TuneProblem> tune_problems(const Graph& prepared) {
  std::vector<TuneProblem> problems;
  for (const Node& node : prepared.nodes) {
    if (!node.op->tuning.variants) continue;
    std::vector<std::pair<std::string, int64_t>> dims;
    for (const auto& [name, value] : node.op->tuning.dims(node.ctx)) {
      if (!value.is_const())
        throw Error(fmt::format("node '{}': tuning dim {} = {} is not bound", node.name, name, value.str()));
      dims.emplace_back(name, *value.const_value());
    }
    const DType dtype = node.ctx.output.dtype;
    auto same = std::find_if(problems.begin(), problems.end(), [&](const TuneProblem& p) {
      return p.op == node.op->name && p.dtype == dtype && p.dims == dims;
    });
    if (same != problems.end()) {
      same->nodes.push_back(node.name);
      continue;
    }
    TuneProblem problem{&node, {node.name}, node.op->name, dtype, dims, {}};
    for (const OpVariant& variant : node.op->tuning.variants(node.ctx)) {
      const bool fits = std::all_of(variant.limits.begin(), variant.limits.end(), [&](const auto& limit) {
        auto dim = std::find_if(dims.begin(), dims.end(), [&](const auto& d) { return d.first == limit.first; });
        return dim == dims.end() || limit.second.contains(dim->second);
      });
      if (fits) problem.variants.push_back(variant.name);
    }
    if (problem.variants.empty()) continue;  // no variant of the op fits these dims: nothing to choose
    problems.push_back(std::move(problem));
  }
  return problems;
}

bool record_covers(const TuningRecord& record, const TuneProblem& problem, bool cold_l2) {
  if (record.l2 != (cold_l2 ? "cold" : "warm")) return false;
  return std::all_of(problem.variants.begin(), problem.variants.end(), [&](const std::string& variant) {
    return std::any_of(record.candidates.begin(), record.candidates.end(),
                       [&](const TuningCandidate& c) { return c.variant == variant; });
  });
}

std::vector<TuningRecord> tune(const std::vector<const TuneProblem*>& problems, const Registry& registry,
                               const TuneOptions& options, const std::shared_ptr<cuda::Device>& device) {
  std::vector<Candidates> candidates;
  for (const TuneProblem* problem : problems) candidates.push_back({problem->variants, {}});
  const Bundle bundle = compile_all(problems, candidates, registry, options);
  const std::string path = (std::filesystem::path(options.work_dir) / "candidates.teeny").string();
  write_bundle(bundle, path);
  check_all(bundle, path, candidates, registry, options, device);
  const auto times = time_all(path, options);
  std::vector<TuningRecord> records;
  for (size_t p = 0; p < problems.size(); ++p)
    records.push_back(record_of(*problems[p], p, candidates[p], times, options.cold_l2));
  return records;
}

}  // namespace teeny
