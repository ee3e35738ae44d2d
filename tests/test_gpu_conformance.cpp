// The one conformance test (in the spirit of ggml's test-backend-ops): every registered op's
// OpDef::conformance_cases, run on the GPU and compared node by node with the host
// reference, over each case's bindings (awkward widths 1, 3, 17, 1000, 4097; batch 1 and
// large; every dtype the op supports); and a tunable op's cases once per kernel variant it offers
// (tests/conformance_variants.h), since `teeny tune` may record any of them.
//
// Tolerances are core/compare.h's, per output dtype (|gpu - ref| <= atol + rtol * |ref|):
//   f32 atol 1e-4 rtol 1e-3;  f16 atol 1e-3 rtol 5e-3;  bf16 atol 1e-2 rtol 1.6e-2;  i32 exact.
// The reference of each node is computed from the GPU's own inputs to that node, so a failure
// names the op that made it; the full (non node-by-node) run must agree with it too.
//
// CPU suite ConformanceCases: every op provides cases and every case's graph parses.
// GPU suite GpuConformance: skips with the reason when there is no CUDA driver or device.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/check_report.h"
#include "core/autodiff.h"
#include "core/compare.h"
#include "core/compile.h"
#include "core/driver.h"
#include "core/executor.h"
#include "core/graph.h"
#include "ops/ops.h"
#include "tests/conformance_variants.h"
#include "tests/gpu_test_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::registry;

struct Job {
  const OpDef* op = nullptr;
  ConformanceCase c;
  std::string label() const { return fmt::format("{} [{}]", op->name, c.label); }
};

// The names in the comma-separated environment variable `variable` (none where unset).
std::set<std::string> names_in(const char* variable) {
  std::set<std::string> names;
  if (const char* list = std::getenv(variable)) {
    std::stringstream stream(list);
    for (std::string name; std::getline(stream, name, ',');) names.insert(name);
  }
  return names;
}

// Every registered op's cases, or with TEENY_CONFORMANCE_OPS=name,name,... only those ops'
// (for iterating on a few kernels; the test is only complete without it).
std::vector<Job> all_jobs() {
  const std::set<std::string> only = names_in("TEENY_CONFORMANCE_OPS");
  std::vector<Job> jobs;
  for (const OpDef& op : registry().ops()) {
    if (!op.conformance_cases || (!only.empty() && !only.count(op.name))) continue;
    for (ConformanceCase& c : op.conformance_cases()) jobs.push_back({&op, std::move(c)});
  }
  return jobs;
}

TEST(ConformanceCases, EveryRegisteredOpProvidesCases) {
  std::vector<std::string> missing;
  for (const OpDef& op : registry().ops()) {
    if (op.update) continue;  // no output tensor to compare: tests/test_optim_ops.cpp checks them
    if (!op.conformance_cases || op.conformance_cases().empty()) missing.push_back(op.name);
  }
  EXPECT_TRUE(missing.empty()) << "ops without OpDef::conformance_cases: "
                               << fmt::format("{}", fmt::join(missing, ", "));
}

TEST(ConformanceCases, EveryCaseGraphParsesAndNamesItsOp) {
  for (const Job& job : all_jobs()) {
    SCOPED_TRACE(job.label());
    try {
      Graph graph = parse_graph(job.c.graph, job.label(), registry());
      add_training(graph, registry());  // an update op's cases run it in a training step
      const bool uses_op =
          std::any_of(graph.nodes.begin(), graph.nodes.end(), [&](const Node& n) { return n.op == job.op; });
      EXPECT_TRUE(uses_op) << "the case never runs " << job.op->name << ":\n" << job.c.graph;
      for (const Bindings& b : job.c.bindings)
        EXPECT_NO_THROW(bind_dims(graph.dims,
                                  [&] {
                                    std::vector<std::string> binds;
                                    for (const auto& [dim, value] : b)
                                      binds.push_back(fmt::format("{}={}", dim, value));
                                    return binds;
                                  }()))
            << bindings_text(b);
    } catch (const Error& e) {
      ADD_FAILURE() << e.render() << "\n" << job.c.graph;
    }
  }
}

// One compiled case: a job built with the op's heuristic (variant "", no nodes, the job's
// bindings) or with a variant of its tunable nodes.
struct Unit {
  const Job* job = nullptr;
  op_testing::VariantCase build;
  const std::string& variant() const { return build.variant; }
  std::string label() const { return variant().empty() ? job->label() : job->label() + " variant " + variant(); }
  std::string tally() const { return variant().empty() ? job->op->name : job->op->name + " " + variant(); }
};

// Compiles every unit in parallel (most cases hold one kernel, so NVRTC's own per-graph
// parallelism would leave the cores idle); a unit that fails to compile keeps its error instead.
std::vector<std::optional<Bundle>> compile_units(const std::vector<Unit>& units, const std::string& cache,
                                                 std::vector<std::string>& errors) {
  std::vector<std::optional<Bundle>> bundles(units.size());
  errors.assign(units.size(), "");
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < units.size(); i = next++) {
      try {
        const Graph graph = parse_graph(units[i].job->c.graph, units[i].job->label(), registry());
        CompileOptions options;
        options.cache_dir = cache;
        options.jobs = 1;
        options.variants = units[i].build.nodes;
        options.fixed = units[i].build.fixed;
        bundles[i] = compile_graph(graph, registry(), options);
      } catch (const Error& e) {
        errors[i] = e.render();
      }
    }
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  const unsigned workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (unsigned t = 0; t < workers; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  std::printf("compiled %zu cases in %.1f s\n", units.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return bundles;
}

// Runs `bundle` once at `b` on random data and checks every node against its host reference:
// what went wrong, or "".
std::string run_and_check(const std::shared_ptr<cuda::Device>& device, const Bundle& bundle, const Bindings& b,
                          uint64_t seed, const std::string& where) {
  try {
    std::vector<std::string> binds;
    for (const auto& [dim, value] : b) binds.push_back(fmt::format("{}={}", dim, value));
    BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, binds), where);
    DataOptions data_options;
    data_options.seed = seed;
    data_options.fill = ParamFill::kRandom;
    const RunData data = prepare_data(bound, data_options);
    bind_launches(bound, device->facts());
    GpuExecutor executor(device, bound);
    executor.upload(data);
    executor.run(1, false);
    executor.synchronize("conformance run of " + where);
    // A training step changes the params, so the checked step's loss is not the first run's.
    std::map<std::string, HostTensor> outputs;
    if (bundle.loss.empty())
      for (const std::string& name : bundle.outputs) outputs[name] = executor.read(name);
    const CheckReport report = check_against_reference(executor, registry(), outputs);
    return report.ok() ? "" : cli::format_check_report(report);
  } catch (const Error& e) {
    return e.render();
  }
}

// Compiles and checks every unit, printing a line per tally (op, or op and variant) as soon as its
// last unit is checked (a tally's units are consecutive), so a run stopped by a short GPU lease
// still shows which passed.
void conform(const std::shared_ptr<cuda::Device>& device, const std::vector<Unit>& units) {
  ASSERT_FALSE(units.empty());
  // TEENY_TEST_NVRTC_CACHE, where set, is kept (CompileGraphs fills one with every case's kernels
  // on a machine without a GPU, so a short GPU lease need not compile them); else a scratch cache.
  const char* shared = std::getenv("TEENY_TEST_NVRTC_CACHE");
  const bool keep_cache = shared != nullptr && *shared != '\0';
  const std::filesystem::path cache =
      keep_cache ? std::filesystem::path(shared)
                 : std::filesystem::temp_directory_path() / fmt::format("teeny_conformance_{}", getpid());
  std::vector<std::string> compile_errors;
  const std::vector<std::optional<Bundle>> bundles = compile_units(units, cache.string(), compile_errors);

  struct Tally {
    int cases = 0, runs = 0, failures = 0;
    double seconds = 0;  // running and checking, compile excluded: shows where the test's time goes
  };
  std::map<std::string, Tally> tally;
  const auto print_tally = [&](const std::string& name) {
    const Tally& t = tally[name];
    std::printf("%-30s %6d %6d %9d %9.1f\n", name.c_str(), t.cases, t.runs, t.failures, t.seconds);
    std::fflush(stdout);
  };
  std::printf("%-30s %6s %6s %9s %9s\n", "op", "cases", "runs", "failures", "seconds");
  for (size_t i = 0; i < units.size(); ++i) {
    const Unit& unit = units[i];
    if (i > 0 && units[i - 1].tally() != unit.tally()) print_tally(units[i - 1].tally());
    Tally& t = tally[unit.tally()];
    ++t.cases;
    if (!bundles[i]) {
      ++t.failures;
      ADD_FAILURE() << unit.label() << ": compile failed:\n" << compile_errors[i];
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    const std::vector<Bindings>& bindings = unit.build.bindings;
    const std::vector<Bindings> runs = bindings.empty() ? std::vector<Bindings>{Bindings{}} : bindings;
    for (const Bindings& b : runs) {
      const std::string where = fmt::format("{} with {}", unit.label(), bindings_text(b));
      ++t.runs;
      const std::string failure = run_and_check(device, *bundles[i], b, 1234 + i, where);
      if (!failure.empty()) {
        ++t.failures;
        ADD_FAILURE() << where << ":\n" << failure;
      }
    }
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::error_code ec;
  if (!keep_cache) std::filesystem::remove_all(cache, ec);
  print_tally(units.back().tally());
}

TEST(GpuConformance, EveryRegisteredOpMatchesItsReference) {
  TEENY_GPU_OR_SKIP(device);
  const std::vector<Job> jobs = all_jobs();
  std::vector<Unit> units;
  for (const Job& job : jobs) units.push_back({&job, {"", {}, job.c.bindings}});
  conform(device, units);
  for (const OpDef& op : registry().ops())
    if (std::none_of(jobs.begin(), jobs.end(), [&](const Job& j) { return j.op == &op; }))
      std::printf("%-30s (no conformance cases)\n", op.name.c_str());
}

// Each tunable op's cases once per kernel variant its nodes offer (tests/conformance_variants.h):
// whichever variant `teeny tune` records, compile may build it. TEENY_CONFORMANCE_VARIANTS=a,b
// narrows it to those variants.
TEST(GpuConformance, EveryVariantOfATunableOpMatchesItsReference) {
  TEENY_GPU_OR_SKIP(device);
  const std::set<std::string> only = names_in("TEENY_CONFORMANCE_VARIANTS");
  const std::vector<Job> jobs = all_jobs();
  std::vector<Unit> units;
  for (const Job& job : jobs) {
    if (!job.op->tuning.variants) continue;
    const Graph graph = parse_graph(job.c.graph, job.label(), registry());
    for (op_testing::VariantCase& v : op_testing::variant_cases(*job.op, graph, job.c.bindings, CompileOptions{}))
      if (only.empty() || only.count(v.variant)) units.push_back({&job, std::move(v)});
  }
  // A tally per op and variant.
  std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.tally() < b.tally(); });
  conform(device, units);
}

}  // namespace
}  // namespace teeny
