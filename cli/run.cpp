// `teeny run BUNDLE ...`: load a bundle, run it on the GPU (or the host reference executor with
// --device cpu), write outputs as .npy, and with --check compare every node to the reference.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "cli/check_report.h"
#include "cli/commands.h"
#include "cli/pairs.h"
#include "cli/table.h"
#include "cli/usage.h"
#include "core/bundle.h"
#include "core/compare.h"
#include "core/driver.h"
#include "core/executor.h"
#include "core/host_executor.h"
#include "core/npy.h"

namespace teeny::cli {
namespace {

struct RunFlags {
  std::string bundle;
  std::vector<std::string> binds;
  std::string device = "gpu";
  std::vector<std::string> inputs;
  uint64_t seed = 0;
  std::string weights;
  std::string init = "zero";
  std::vector<std::string> outputs;
  std::string output_dir;
  bool check = false;
  bool cuda_graph = false;
  int iterations = 1;
};

std::string summary(const HostTensor& values) {
  if (values.data.empty()) return "";
  double low = values.data[0], high = values.data[0], sum = 0;
  for (double v : values.data) {
    low = std::min(low, v);
    high = std::max(high, v);
    sum += v;
  }
  return fmt::format("min {:.6g}  max {:.6g}  mean {:.6g}", low, high, sum / static_cast<double>(values.data.size()));
}

void run_bundle(const RunFlags& flags) {
  if (flags.device == "cpu" && (flags.check || flags.cuda_graph)) {
    throw Error(fmt::format("{} runs on the GPU; it cannot be combined with --device cpu",
                            flags.check ? "--check" : "--cuda-graph"));
  }
  Bundle bundle = read_bundle(flags.bundle);
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, flags.binds), flags.bundle);

  // An output may go both to its --output file and into --output-dir.
  std::multimap<std::string, std::string> output_files;
  for (const auto& pair : parse_pairs(flags.outputs, "--output", "NAME=FILE.npy")) {
    output_files.insert(pair);
  }
  for (const auto& [name, path] : output_files) {
    if (std::find(bundle.outputs.begin(), bundle.outputs.end(), name) == bundle.outputs.end()) {
      throw Error(fmt::format("--output {}={}: the bundle has no output '{}'{}", name, path, name,
                              did_you_mean(name, bundle.outputs)))
          .note(fmt::format("the bundle's outputs: {}", fmt::join(bundle.outputs, ", ")));
    }
  }
  DataOptions data_options;
  data_options.seed = flags.seed;
  data_options.input_files = parse_pairs(flags.inputs, "--input", "NAME=FILE.npy");
  data_options.weights_path = flags.weights;
  data_options.fill = flags.init == "random" ? ParamFill::kRandom : ParamFill::kZero;
  RunData data = prepare_data(bound, data_options);
  for (const std::string& note : data.notes) std::cerr << "teeny: note: " << note << "\n";

  std::vector<std::string> bound_dims;
  for (const auto& [name, value] : bound.bindings) bound_dims.push_back(fmt::format("{}={}", name, value));
  std::string out = fmt::format("bundle {} (graph '{}'){}\n", flags.bundle, bundle.graph_name,
                                bound_dims.empty() ? "" : fmt::format(", {}", fmt::join(bound_dims, ", ")));

  std::map<std::string, HostTensor> results;
  std::unique_ptr<CheckReport> report;
  if (flags.device == "cpu") {
    std::map<std::string, HostTensor> values = run_host(bound, registry(), data);
    for (const std::string& name : bundle.outputs) results[name] = values.at(name);
    out += fmt::format("ran {} nodes on the host reference executor\n", bundle.nodes.size());
  } else {
    const cuda::Driver& driver = cuda::Driver::get();
    std::shared_ptr<cuda::Device> device = cuda::Device::open(driver);
    bind_launches(bound, device->facts());
    GpuExecutor executor(device, bound);
    executor.upload(data);
    RunTiming timing = executor.run(flags.iterations, flags.cuda_graph);
    for (const std::string& name : bundle.outputs) results[name] = executor.read(name);
    const MemoryPlan& plan = bound.plan;
    out += fmt::format("device {} (sm_{}{}, {} SMs), driver {}.{}\n", device->name(), device->cc_major(),
                       device->cc_minor(), device->sm_count(), driver.version() / 1000, driver.version() % 1000 / 10);
    out += fmt::format(
        "memory: activations {} planned by liveness (naive {}; {} of {} buffers "
        "share bytes), parameters {}\n",
        cuda::format_bytes(plan.arena_bytes), cuda::format_bytes(plan.naive_bytes), plan.shared, plan.buffers,
        cuda::format_bytes(executor.params_bytes()));
    out += fmt::format("ran {} launches x {} iteration(s){}: {:.3f} ms, {:.3f} ms per iteration\n",
                       bound.launches.size(), timing.iterations, timing.cuda_graph ? " as one CUDA graph" : "",
                       timing.total_ms, timing.total_ms / timing.iterations);
    if (flags.check) {
      // A training step changes the params: the checked step's outputs are not the run's.
      report = std::make_unique<CheckReport>(
          check_against_reference(executor, registry(), bundle.loss.empty() ? results : decltype(results){}));
    }
  }

  if (!flags.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(flags.output_dir, ec);
    if (ec) throw Error(fmt::format("--output-dir {}: {}", flags.output_dir, ec.message()));
    for (const std::string& name : bundle.outputs) {
      output_files.emplace(name, (std::filesystem::path(flags.output_dir) / (name + ".npy")).string());
    }
  }
  std::vector<Row> rows{{"OUTPUT", "DTYPE", "SHAPE", "VALUES", "FILE"}};
  for (const std::string& name : bundle.outputs) {
    const HostTensor& values = results.at(name);
    std::vector<std::string> files;
    for (auto [it, end] = output_files.equal_range(name); it != end; ++it) {
      write_npy(it->second, values);
      files.push_back(it->second);
    }
    std::string file = fmt::format("{}", fmt::join(files, ", "));
    if (!files.empty() && values.dtype != npy_storage_dtype(values.dtype)) file += " (bf16 stored as f32)";
    rows.push_back(
        {name, dtype_name(values.dtype), fmt::format("[{}]", fmt::join(values.shape, ", ")), summary(values), file});
  }
  out += "\n" + format_table(rows, "  ");
  if (report) out += "\n" + format_check_report(*report);
  std::cout << out;
  if (report && !report->ok()) {
    throw Error(report->first_failure >= 0
                    ? fmt::format("--check: node '{}' is the first to differ from the host reference",
                                  report->nodes[report->first_failure].node)
                    : std::string("--check: the full run's outputs differ from the node-by-node run"),
                ExitCode::kCheckMismatch);
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run",
                                     "Run a compiled bundle on the GPU (or the host "
                                     "reference), write outputs, check against the reference");
  cmd->add_option("BUNDLE", flags->bundle, "bundle directory (from teeny compile)")->required();
  cmd->add_option("--bind", flags->binds, "bind a dim: D=N (repeatable; default: the spec's)")->allow_extra_args(false);
  cmd->add_option("--device", flags->device, "gpu (default) or cpu (the host reference executor)")
      ->check(CLI::IsMember({"gpu", "cpu"}));
  cmd->add_option("--input", flags->inputs, "an input from a .npy file: NAME=FILE.npy (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--seed", flags->seed,
                  "seed for random inputs (floats uniform in [-1, 1), ids in [0, num_embeddings)) "
                  "and --init random");
  cmd->add_option("--weights", flags->weights, "trained parameters by <node>.<slot> (.safetensors)");
  cmd->add_option("--init", flags->init, "trained parameters not in --weights: zero (default) or random")
      ->check(CLI::IsMember({"zero", "random"}));
  cmd->add_option("--output", flags->outputs, "write a graph output: NAME=FILE.npy (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--output-dir", flags->output_dir, "write every graph output as DIR/<name>.npy");
  cmd->add_flag("--check", flags->check,
                "compare every node's GPU output with the host reference (exit code 2 on mismatch)");
  cmd->add_flag("--cuda-graph", flags->cuda_graph, "capture the launches once as a CUDA graph and replay it");
  cmd->add_option("--iterations", flags->iterations, "how many times to run the graph (default 1)")
      ->check(positive_number());
  cmd->callback([flags] { run_bundle(*flags); });
}

}  // namespace teeny::cli
