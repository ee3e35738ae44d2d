// The one conformance test (in the spirit of ggml's test-backend-ops): every registered op's
// OpDef::conformance_cases, run on the GPU and compared node by node with the host
// reference, over each case's bindings (awkward widths 1, 3, 17, 1000, 4097; batch 1 and
// large; every dtype the op supports).
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

// Every registered op's cases, or with TEENY_CONFORMANCE_OPS=name,name,... only those ops'
// (for iterating on a few kernels; the test is only complete without it).
std::vector<Job> all_jobs() {
  std::set<std::string> only;
  if (const char* list = std::getenv("TEENY_CONFORMANCE_OPS")) {
    std::stringstream names(list);
    for (std::string name; std::getline(names, name, ',');) only.insert(name);
  }
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

TEST(GpuConformance, EveryRegisteredOpMatchesItsReference) {
  TEENY_GPU_OR_SKIP(device);

  const std::vector<Job> jobs = all_jobs();
  ASSERT_FALSE(jobs.empty());
  // TEENY_TEST_NVRTC_CACHE, where set, is kept (CompileGraphs fills one with every case's kernels
  // on a machine without a GPU, so a short GPU lease need not compile them); else a scratch cache.
  const char* shared = std::getenv("TEENY_TEST_NVRTC_CACHE");
  const bool keep_cache = shared != nullptr && *shared != '\0';
  const std::filesystem::path cache =
      keep_cache ? std::filesystem::path(shared)
                 : std::filesystem::temp_directory_path() / fmt::format("teeny_conformance_{}", getpid());

  // Compile every case first, in parallel (most cases hold one kernel, so NVRTC's own
  // per-graph parallelism would leave the cores idle).
  std::vector<std::optional<Bundle>> bundles(jobs.size());
  std::vector<std::string> compile_errors(jobs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      try {
        const Graph graph = parse_graph(jobs[i].c.graph, jobs[i].label(), registry());
        CompileOptions options;
        options.cache_dir = cache.string();
        options.jobs = 1;
        bundles[i] = compile_graph(graph, registry(), options);
      } catch (const Error& e) {
        compile_errors[i] = e.render();
      }
    }
  };
  const auto compile_start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  const unsigned workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (unsigned t = 0; t < workers; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  std::printf("compiled %zu cases in %.1f s\n", jobs.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count());

  struct OpTally {
    int cases = 0, runs = 0, failures = 0;
    double seconds = 0;  // running and checking, compile excluded: shows where the test's time goes
  };
  std::map<std::string, OpTally> tally;
  // Each op's line as soon as its last case is checked (its cases are consecutive), so a run
  // stopped by a short GPU lease still shows which ops passed.
  const auto print_tally = [&](const std::string& op) {
    const OpTally& t = tally[op];
    std::printf("%-22s %6d %6d %9d %9.1f\n", op.c_str(), t.cases, t.runs, t.failures, t.seconds);
    std::fflush(stdout);
  };
  std::printf("%-22s %6s %6s %9s %9s\n", "op", "cases", "runs", "failures", "seconds");
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    if (i > 0 && jobs[i - 1].op != job.op) print_tally(jobs[i - 1].op->name);
    OpTally& t = tally[job.op->name];
    ++t.cases;
    if (!bundles[i]) {
      ++t.failures;
      ADD_FAILURE() << job.label() << ": compile failed:\n" << compile_errors[i];
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    const std::vector<Bindings> runs = job.c.bindings.empty() ? std::vector<Bindings>{Bindings{}} : job.c.bindings;
    for (const Bindings& b : runs) {
      const std::string where = fmt::format("{} with {}", job.label(), bindings_text(b));
      ++t.runs;
      try {
        std::vector<std::string> binds;
        for (const auto& [dim, value] : b) binds.push_back(fmt::format("{}={}", dim, value));
        BoundBundle bound = bind_bundle(*bundles[i], bundle_bindings(*bundles[i], binds), job.label());
        DataOptions data_options;
        data_options.seed = 1234 + i;
        data_options.fill = ParamFill::kRandom;
        const RunData data = prepare_data(bound, data_options);
        bind_launches(bound, device->facts());
        GpuExecutor executor(device, bound);
        executor.upload(data);
        executor.run(1, false);
        executor.synchronize("conformance run of " + where);
        // A training step changes the params, so the checked step's loss is not the first run's.
        std::map<std::string, HostTensor> outputs;
        if (bundles[i]->loss.empty())
          for (const std::string& name : bundles[i]->outputs) outputs[name] = executor.read(name);
        const CheckReport report = check_against_reference(executor, registry(), outputs);
        if (!report.ok()) {
          ++t.failures;
          ADD_FAILURE() << where << ":\n" << cli::format_check_report(report);
        }
      } catch (const Error& e) {
        ++t.failures;
        ADD_FAILURE() << where << ": " << e.render();
      }
    }
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::error_code ec;
  if (!keep_cache) std::filesystem::remove_all(cache, ec);

  print_tally(jobs.back().op->name);
  for (const OpDef& op : registry().ops())
    if (!tally.count(op.name)) std::printf("%-22s (no conformance cases)\n", op.name.c_str());
}

}  // namespace
}  // namespace teeny
