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

Bundle compile_variants(const TuneProblem& problem, const std::vector<std::string>& variants, const Registry& registry,
                        const TuneOptions& options) {
  Graph graph;
  graph.name = fmt::format("tune_{}", problem.op);
  std::map<std::string, std::string> variants_of;
  add_replicas(graph, variants_of, problem, variants, "");
  return compile_replicas(std::move(graph), std::move(variants_of), registry, options);
}

// The variants that compile, and why each of the others does not (rejected[variant]).
Bundle compile_candidates(const TuneProblem& problem, std::vector<std::string>& variants,
                          std::map<std::string, std::string>& rejected, const Registry& registry,
                          const TuneOptions& options) {
  try {
    return compile_variants(problem, variants, registry, options);
  } catch (const Error&) {
    // Find the ones that fail alone, then compile the rest together.
    std::vector<std::string> compiled;
    for (const std::string& variant : variants) {
      try {
        compile_variants(problem, {variant}, registry, options);
        compiled.push_back(variant);
      } catch (const Error& error) {
        rejected[variant] = "compile: " + error.message();
      }
    }
    variants = compiled;
    if (variants.empty()) throw Error("no variant compiles");
    return compile_variants(problem, variants, registry, options);
  }
}

// Output rows spread evenly over [0, rows), the first and last among them.
std::vector<int64_t> sample_rows(int64_t rows, int count) {
  std::vector<int64_t> out;
  const int64_t n = std::min<int64_t>(rows, count);
  for (int64_t i = 0; i < n; ++i) out.push_back(n == 1 ? 0 : i * (rows - 1) / (n - 1));
  return out;
}

// Runs every variant once on the same random inputs and params and compares each output with the
// reference, on sampled rows where the op's inputs give them (OpTuning::row_inputs).
void check_variants(const Bundle& bundle, const std::string& path, const std::vector<std::string>& variants,
                    std::map<std::string, std::string>& rejected, const Registry& registry, const TuneOptions& options,
                    const std::shared_ptr<cuda::Device>& device) {
  BoundBundle bound = bind_bundle(bundle, {}, path);
  bind_launches(bound, device->facts());
  DataOptions data_options;
  data_options.seed = options.seed;
  data_options.fill = ParamFill::kRandom;
  RunData data = prepare_data(bound, data_options);
  // Every variant gets the first one's params, so one reference serves them all.
  for (size_t v = 1; v < variants.size(); ++v) {
    for (const BundleParam& param : bundle.params) {
      if (param.node != replica_name(v)) continue;
      data.params[param.name] = data.params.at(replica_name(0) + "." + param.slot);
    }
  }
  GpuExecutor executor(device, bound);
  executor.upload(data);
  executor.run(1, false);

  std::vector<HostTensor> inputs;
  for (const std::string& input : bundle.nodes[0].inputs) inputs.push_back(data.inputs.at(input));
  const OpDef* op = registry.find(bundle.nodes[0].op);
  const int64_t rows = bound.tensor(replica_name(0)).rows;
  const bool sampled = op != nullptr && !op->tuning.row_inputs.empty();
  const std::vector<int64_t> checked = sample_rows(rows, sampled ? options.check_rows : static_cast<int>(rows));
  const HostTensor reference = sampled ? reference_rows(bound, registry, 0, inputs, data.params, checked)
                                       : reference_node(bound, registry, 0, inputs, data.params);
  for (size_t v = 0; v < variants.size(); ++v) {
    HostTensor output = executor.read(replica_name(v));
    if (sampled) output = select_rows(output, checked);
    const Comparison result = compare_values(output, reference, tolerance_for(output.dtype));
    if (!result.ok()) {
      rejected[variants[v]] = fmt::format("numerics: {} of {} checked values off the reference (max rel error {:.3g})",
                                          result.mismatches, result.count, result.max_rel);
    }
  }
}

// Each variant's median time: the sum of its node's launches' medians.
std::map<std::string, std::pair<double, int>> time_variants(const std::string& path,
                                                            const std::vector<std::string>& variants,
                                                            const TuneOptions& options) {
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
  std::map<std::string, std::pair<double, int>> times;
  for (const LaunchStats& launch : run.launches) {
    for (size_t v = 0; v < variants.size(); ++v) {
      if (launch.facts.node != replica_name(v)) continue;
      auto& [us, iterations] = times[variants[v]];
      us += launch.duration_us.median;
      iterations = run.iterations;
    }
  }
  return times;
}

}  // namespace

std::vector<std::pair<std::string, DimRange>> point_ranges(const std::vector<std::pair<std::string, int64_t>>& dims) {
  std::vector<std::pair<std::string, DimRange>> out;
  for (const auto& [name, value] : dims) out.push_back({name, {value, value}});
  return out;
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
    problems.push_back(std::move(problem));
  }
  return problems;
}

void precompile(const std::vector<const TuneProblem*>& problems, const Registry& registry, const TuneOptions& options) {
  Graph graph;
  graph.name = "tune";
  std::map<std::string, std::string> variants_of;
  for (size_t p = 0; p < problems.size(); ++p)
    add_replicas(graph, variants_of, *problems[p], problems[p]->variants, fmt::format("p{}_", p));
  try {
    compile_replicas(std::move(graph), std::move(variants_of), registry, options);
  } catch (const Error&) {
    // tune_problem compiles each problem again and rejects what fails there, with the reason.
  }
}

bool record_covers(const TuningRecord& record, const TuneProblem& problem, bool cold_l2) {
  if (record.l2 != (cold_l2 ? "cold" : "warm")) return false;
  return std::all_of(problem.variants.begin(), problem.variants.end(), [&](const std::string& variant) {
    return std::any_of(record.candidates.begin(), record.candidates.end(),
                       [&](const TuningCandidate& c) { return c.variant == variant; });
  });
}

TuningRecord tune_problem(const TuneProblem& problem, const Registry& registry, const TuneOptions& options,
                          const std::shared_ptr<cuda::Device>& device) {
  std::vector<std::string> variants = problem.variants;
  std::map<std::string, std::string> rejected;
  const Bundle bundle = compile_candidates(problem, variants, rejected, registry, options);
  const std::string path = (std::filesystem::path(options.work_dir) / "candidates.teeny").string();
  write_bundle(bundle, path);
  check_variants(bundle, path, variants, rejected, registry, options, device);
  const auto times = time_variants(path, variants, options);

  TuningRecord record;
  record.op = problem.op;
  record.dtype = problem.dtype;
  record.dims = point_ranges(problem.dims);
  record.l2 = options.cold_l2 ? "cold" : "warm";
  double best = 0;
  for (const std::string& variant : problem.variants) {
    TuningCandidate candidate{variant, 0, 0, ""};
    if (auto why = rejected.find(variant); why != rejected.end()) {
      candidate.rejected = why->second;
    } else {
      std::tie(candidate.median_us, candidate.iterations) = times.at(variant);
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

}  // namespace teeny
