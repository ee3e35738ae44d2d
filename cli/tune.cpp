// `teeny tune GRAPH [--bind D=N]... [-o FILE] [--l2 cold|warm]`: measure every kernel variant of
// each tunable node on the GPU and record the fastest that passes its check in a tuning file
// (core/tune.h), which `teeny compile --tuning FILE` uses. Records already in FILE for this GPU
// are kept, and problems they cover are not measured again.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/usage.h"
#include "core/tune.h"

namespace teeny::cli {
namespace {

struct TuneFlags {
  std::string graph;
  std::string output;
  std::string arch = "sm_90";
  std::vector<std::string> binds;
  std::string l2 = "cold";
  int iterations = 30;
  int check_rows = 32;
  bool no_fuse = false;
  int jobs = 0;
  uint64_t seed = 0;
};

// A directory for the candidates' bundles, removed with everything in it when done.
class WorkDir {
 public:
  WorkDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "teeny-tune-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw Error(fmt::format("cannot create a directory like {}", pattern));
    path_ = pattern;
  }
  ~WorkDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The file's records so far (resuming), or a new file for this GPU.
TuningFile existing_or_new(const std::string& path, const std::string& gpu, const std::string& arch) {
  if (!std::filesystem::exists(path)) return TuningFile{gpu, arch, {}, path};
  TuningFile file = load_tuning(path);
  if (file.gpu != gpu || file.arch != arch) {
    throw Error(fmt::format("-o {}: the file holds records of {} ({}), not of this {} ({}); a tuning file is one GPU's",
                            path, file.gpu, file.arch, gpu, arch));
  }
  return file;
}

std::string variant_time(const TuningRecord& record, const std::string& variant) {
  for (const TuningCandidate& c : record.candidates) {
    if (c.variant == variant) return fmt::format("{:.2f} us", c.median_us);
  }
  return "";
}

void run_tune(const TuneFlags& flags) {
  const auto start = std::chrono::steady_clock::now();
  Graph graph = load_graph(flags.graph, registry());
  TuneOptions options;
  options.compile.arch = flags.arch;
  options.compile.fuse = !flags.no_fuse;
  options.compile.jobs = flags.jobs;
  options.compile.fixed = bind_dims(graph.dims, flags.binds);
  options.cold_l2 = flags.l2 == "cold";
  options.iterations = flags.iterations;
  options.check_rows = flags.check_rows;
  options.seed = flags.seed;
  const std::string output = flags.output.empty() ? graph.name + ".tuning.json" : flags.output;
  const Graph prepared = prepare_graph(std::move(graph), registry(), options.compile);
  const std::vector<TuneProblem> problems = tune_problems(prepared);
  if (problems.empty()) throw Error(fmt::format("{}: no node of the graph is tunable", flags.graph));

  std::shared_ptr<cuda::Device> device = cuda::Device::open(cuda::Driver::get());
  const std::string arch = fmt::format("sm_{}{}", device->cc_major(), device->cc_minor());
  if (arch != flags.arch) {
    throw Error(fmt::format("--arch {}: the GPU is {} ({}); tune measures on the GPU it compiles for", flags.arch,
                            device->name(), arch));
  }
  TuningFile file = existing_or_new(output, device->name(), arch);
  WorkDir work;
  options.work_dir = work.path();
  std::cout << fmt::format("tuning {} problem{} of '{}' on {} (L2 {}) into {}\n", problems.size(),
                           problems.size() == 1 ? "" : "s", flags.graph, device->name(), flags.l2, output);
  std::vector<const TuneProblem*> to_tune;
  for (const TuneProblem& problem : problems) {
    const TuningRecord* done = find_record(file, problem.op, problem.dtype, problem.dims);
    if (done == nullptr || !record_covers(*done, problem, options.cold_l2)) to_tune.push_back(&problem);
  }
  size_t candidates = 0;
  for (const TuneProblem* problem : to_tune) candidates += problem->variants.size();
  if (!to_tune.empty()) {
    std::cout << fmt::format("measuring {} candidates of {} problem{} ...\n", candidates, to_tune.size(),
                             to_tune.size() == 1 ? "" : "s")
              << std::flush;
  }
  std::vector<TuningRecord> records =
      to_tune.empty() ? std::vector<TuningRecord>{} : tune(to_tune, registry(), options, device);
  for (size_t i = 0; i < problems.size(); ++i) {
    const TuneProblem& problem = problems[i];
    const std::string what =
        fmt::format("[{}/{}] {} {} {} (nodes {})", i + 1, problems.size(), problem.op, dtype_name(problem.dtype),
                    dims_text(point_ranges(problem.dims)), fmt::join(problem.nodes, ", "));
    const auto tuned = std::find(to_tune.begin(), to_tune.end(), &problem);
    if (tuned == to_tune.end()) {
      const TuningRecord& done = *find_record(file, problem.op, problem.dtype, problem.dims);
      std::cout << fmt::format("{}: already tuned: {} ({})\n", what, done.variant, variant_time(done, done.variant));
      continue;
    }
    TuningRecord& record = records[static_cast<size_t>(tuned - to_tune.begin())];
    size_t rejected = 0;
    for (const TuningCandidate& c : record.candidates) rejected += c.rejected.empty() ? 0 : 1;
    std::cout << fmt::format("{}: {} of {} ({}){}\n", what, record.variant, record.candidates.size(),
                             variant_time(record, record.variant),
                             rejected ? fmt::format(", {} rejected", rejected) : "");
    upsert_record(file, std::move(record));
  }
  if (!to_tune.empty()) write_tuning(file, output);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("wrote {} ({} records) in {:.1f} s\n", output, file.records.size(), seconds);
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto flags = std::make_shared<TuneFlags>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "Measure every kernel variant of each tunable node on the GPU; record the fastest in a tuning file");
  cmd->add_option("GRAPH", flags->graph, "graph spec (.yaml)")->required();
  cmd->add_option("--bind", flags->binds, "the dims to tune at: D=N (repeatable; others take their defaults)")
      ->allow_extra_args(false);
  cmd->add_option("-o,--output", flags->output, "tuning file, created or updated (default: <graph name>.tuning.json)");
  cmd->add_option("--arch", flags->arch, "GPU architecture (must be the GPU's)")->capture_default_str();
  cmd->add_option("--l2", flags->l2, "cold: L2 flushed before each launch (default); warm: back to back")
      ->check(CLI::IsMember({"cold", "warm"}));
  cmd->add_option("--iterations", flags->iterations, "timed iterations per candidate")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--check-rows", flags->check_rows, "output rows each candidate is checked on against the reference")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_flag("--no-fuse", flags->no_fuse, "skip graph fusion passes (tune the unfused nodes)");
  cmd->add_option("-j,--jobs", flags->jobs, "parallel NVRTC compilations (default: one per CPU)")
      ->check(non_negative_number());
  cmd->add_option("--seed", flags->seed, "random inputs and params")->capture_default_str();
  cmd->callback([flags] { run_tune(*flags); });
}

}  // namespace teeny::cli
