#include "cli/profile_report.h"

#include <map>

#include <fmt/format.h>

#include "cli/table.h"
#include "core/expr.h"
#include "core/input_file.h"
#include "core/json_field.h"
#include "core/report.h"

namespace teeny::cli {
namespace {

std::string dims3(const std::array<int64_t, 3>& v) { return fmt::format("{}x{}x{}", v[0], v[1], v[2]); }
std::string dims3(const std::array<int, 3>& v) { return fmt::format("{}x{}x{}", v[0], v[1], v[2]); }

// "13.0" from 13000.
std::string cuda_version_str(int version) { return fmt::format("{}.{}", version / 1000, (version % 1000) / 10); }

std::string fixed(double value, int decimals) { return fmt::format("{:.{}f}", value, decimals); }

// The ceiling a launch's %peak is taken against.
const char* compute_unit(const LaunchFacts& f) { return f.tensor_cores ? "tensor16" : "fp32"; }

std::string environment_lines(const ProfileReport& report) {
  const Environment& e = report.environment;
  std::string out;
  out += fmt::format("GPU: {} (sm_{}{}, {} SMs, SM clock {:.0f} MHz, memory clock {:.0f} MHz, {}-bit bus, L2 {})\n",
                     e.gpu_name, e.cc_major, e.cc_minor, e.sm_count, e.sm_clock_mhz, e.memory_clock_mhz,
                     e.memory_bus_bits, fmt::format("{:.1f} MiB", static_cast<double>(e.l2_bytes) / (1 << 20)));
  out += fmt::format("versions: driver CUDA {}, built with CUDA headers {}, NVRTC {}, {}\n",
                     cuda_version_str(e.driver_version), cuda_version_str(e.cuda_headers_version), e.nvrtc_version,
                     e.cupti_version);
  const std::string tensor = e.peaks.tensor16_gflops > 0
                                 ? fmt::format(", {:.0f} GFLOP/s f16/bf16 tensor", e.peaks.tensor16_gflops)
                                 : ", f16/bf16 tensor peak unknown for this GPU";
  out += fmt::format("peaks: {:.0f} GB/s, {:.0f} GFLOP/s FP32{} ({})\n", e.peaks.bandwidth_gbps, e.peaks.fp32_gflops,
                     tensor, e.peaks.source);
  out += fmt::format("timing: {}; mode: {}{}\n", e.timing_method, e.mode, e.cuda_graph ? ", CUDA graph replay" : "");
  return out;
}

// A training bundle's launches by pass (forward, backward, update): how many, and their kernel
// medians summed.
struct PassTotal {
  int launches = 0;
  double kernel_sum_us = 0;
};
std::map<NodeRole, PassTotal> pass_totals(const ProfileRun& run) {
  std::map<NodeRole, PassTotal> totals;
  for (const LaunchStats& l : run.launches) {
    PassTotal& total = totals[l.facts.role];
    ++total.launches;
    total.kernel_sum_us += l.duration_us.median;
  }
  return totals;
}

// "by pass: forward 3 launches 12.00 us (40.0%), ..." when there is more than the forward pass.
std::string pass_line(const ProfileRun& run) {
  const std::map<NodeRole, PassTotal> totals = pass_totals(run);
  if (totals.size() < 2 && totals.count(NodeRole::kForward)) return "";
  std::vector<std::string> parts;
  for (const auto& [role, total] : totals)
    parts.push_back(fmt::format("{} {} launch{} {:.2f} us ({:.1f}%)", node_role_name(role), total.launches,
                                total.launches == 1 ? "" : "es", total.kernel_sum_us,
                                run.kernel_sum_us > 0 ? 100 * total.kernel_sum_us / run.kernel_sum_us : 0.0));
  return fmt::format("by pass (kernel medians summed): {}\n", fmt::join(parts, ", "));
}

std::string run_table(const ProfileReport& report, const ProfileRun& run) {
  std::string out = fmt::format("\n== {} ({}) ==\n", report.graph_name, bindings_text(run.bindings));
  out += fmt::format("{} timed iterations after {} warm-up ({:.2f} s); timing: {}\n", run.iterations,
                     run.warmup_iterations, run.warmup_seconds, report.environment.timing_method);
  std::vector<Row> rows{{"#", "node", "kernel", "grid", "block", "median_us", "min_us", "p90_us", "share%", "GB/s",
                         "%bw", "GFLOP/s", "%peak", "of", "regs", "smem", "occ%"}};
  for (const LaunchStats& l : run.launches) {
    const LaunchFacts& f = l.facts;
    rows.push_back({std::to_string(f.index), f.node, f.kernel, dims3(f.grid), dims3(f.block),
                    fixed(l.duration_us.median, 2), fixed(l.duration_us.min, 2), fixed(l.duration_us.p90, 2),
                    fixed(100 * l.share, 1), fixed(l.gbps, 1), fixed(l.pct_peak_bandwidth, 1), fixed(l.gflops, 1),
                    fixed(l.pct_peak_compute, 1), compute_unit(f), std::to_string(f.registers),
                    fmt::format("{}+{}", f.static_smem_bytes, f.dynamic_smem_bytes), fixed(100 * f.occupancy, 0)});
  }
  constexpr Align L = Align::kLeft, R = Align::kRight;
  out += format_table(rows, "", {R, L, L, L, L, R, R, R, R, R, R, R, R, L, R, R, R});
  const Summary& g = run.gpu_time_us;
  out += fmt::format(
      "end-to-end GPU time per iteration (first kernel start to last kernel end): median {:.2f} us, "
      "min {:.2f}, p90 {:.2f}, max {:.2f}; sum of kernel medians {:.2f} us\n",
      g.median, g.min, g.p90, g.max, run.kernel_sum_us);
  out += pass_line(run);
  out += fmt::format("host enqueue time per iteration: median {:.2f} us, p90 {:.2f}\n", run.enqueue_us.median,
                     run.enqueue_us.p90);
  out += fmt::format("noise: relative IQR {:.1f}% end-to-end\n", 100 * g.rel_iqr);
  out += fmt::format("SM clock measured: {:.0f} MHz before the timed iterations, {:.0f} MHz after\n",
                     run.sm_clock_before_mhz, run.sm_clock_after_mhz);
  if (run.excluded_records > 0)
    out += fmt::format("excluded: {} kernel records not launched by teeny (L2 flush)\n", run.excluded_records);
  for (const std::string& w : run.warnings) out += "warning: " + w + "\n";
  if (!run.untrusted.empty()) {
    out += "NOT TRUSTED: the records do not match the launches:\n";
    for (const std::string& reason : run.untrusted) out += "  - " + reason + "\n";
  }
  return out;
}

nlohmann::json passes_json(const ProfileRun& run) {
  nlohmann::json passes = nlohmann::json::object();
  for (const auto& [role, total] : pass_totals(run))
    passes[node_role_name(role)] = {{"launches", total.launches}, {"kernel_sum_median_us", total.kernel_sum_us}};
  return passes;
}

nlohmann::json summary_json(const Summary& s) {
  return {{"count", s.count}, {"min_us", s.min}, {"median_us", s.median}, {"mean_us", s.mean},   {"p90_us", s.p90},
          {"max_us", s.max},  {"q1_us", s.q1},   {"q3_us", s.q3},         {"rel_iqr", s.rel_iqr}};
}

// The summary with the samples it summarises, in iteration order, for `teeny compare`.
nlohmann::json timing_json(const Summary& s, const std::vector<double>& samples_us) {
  nlohmann::json out = summary_json(s);
  out["samples_us"] = samples_us;
  return out;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

std::string format_profile_table(const ProfileReport& report) {
  std::string out = fmt::format("teeny profile: {} ({})\n", report.graph_name, report.bundle_path);
  out += environment_lines(report);
  for (const ProfileRun& run : report.runs) out += run_table(report, run);
  const std::vector<ScalingRow> rows = scaling_rows(report);
  if (!rows.empty()) {
    out += fmt::format("\n== scaling over {} ==\n", report.sweep_dim);
    std::vector<Row> table{{report.sweep_dim, "gpu_median_us", fmt::format("us_per_{}", report.sweep_dim),
                            "time_vs_first", "GB/s", "GFLOP/s", "trusted"}};
    for (size_t i = 0; i < rows.size(); ++i) {
      const ScalingRow& r = rows[i];
      table.push_back({std::to_string(r.value), fixed(r.gpu_median_us, 2), fixed(r.us_per_unit, 3),
                       fixed(r.time_vs_first, 2) + "x", fixed(r.gbps, 1), fixed(r.gflops, 1),
                       report.runs[i].untrusted.empty() ? "yes" : "NO"});
    }
    constexpr Align R = Align::kRight;
    out += format_table(table, "", {R, R, R, R, R, R, Align::kLeft});
  }
  return out;
}

nlohmann::json profile_json(const ProfileReport& report) {
  const Environment& e = report.environment;
  nlohmann::json env = {
      {"gpu_name", e.gpu_name},
      {"compute_capability", fmt::format("{}.{}", e.cc_major, e.cc_minor)},
      {"sm_count", e.sm_count},
      {"driver_cuda_version", cuda_version_str(e.driver_version)},
      {"cuda_headers_version", cuda_version_str(e.cuda_headers_version)},
      {"nvrtc_version", e.nvrtc_version},
      {"cupti_version", e.cupti_version},
      {"sm_clock_mhz", e.sm_clock_mhz},
      {"memory_clock_mhz", e.memory_clock_mhz},
      {"memory_bus_bits", e.memory_bus_bits},
      {"l2_bytes", e.l2_bytes},
      {"peak_bandwidth_gbps", e.peaks.bandwidth_gbps},
      {"peak_fp32_gflops", e.peaks.fp32_gflops},
      {"peak_tensor16_gflops", e.peaks.tensor16_gflops},
      {"peaks_source", e.peaks.source},
      {"timing_method", e.timing_method},
      {"cupti", e.cupti},
      {"mode", e.mode},
      {"cuda_graph", e.cuda_graph},
  };
  nlohmann::json runs = nlohmann::json::array();
  for (const ProfileRun& run : report.runs) {
    nlohmann::json launches = nlohmann::json::array();
    for (const LaunchStats& l : run.launches) {
      const LaunchFacts& f = l.facts;
      launches.push_back({
          {"index", f.index},
          {"node", f.node},
          {"pass", node_role_name(f.role)},
          {"kernel", f.kernel},
          {"entry", f.entry},
          {"grid", f.grid},
          {"block", f.block},
          {"ptx_sha256", f.ptx_sha256},
          {"kernel_source", f.kernel_source},
          {"duration", timing_json(l.duration_us, l.samples_us)},
          {"share_pct", 100 * l.share},
          {"bytes", f.bytes},
          {"flops", f.flops},
          {"gbps", l.gbps},
          {"gflops", l.gflops},
          {"pct_peak_bandwidth", l.pct_peak_bandwidth},
          {"pct_peak_compute", l.pct_peak_compute},
          {"compute_unit", compute_unit(f)},
          {"registers_per_thread", f.registers},
          {"static_smem_bytes", f.static_smem_bytes},
          {"dynamic_smem_bytes", f.dynamic_smem_bytes},
          {"active_blocks_per_sm", f.active_blocks_per_sm},
          {"occupancy_pct", 100 * f.occupancy},
      });
    }
    runs.push_back({
        {"bindings", run.bindings},
        {"trusted", run.untrusted.empty()},
        {"untrusted_reasons", run.untrusted},
        {"warnings", run.warnings},
        {"timing_method", e.timing_method},
        {"warmup_iterations", run.warmup_iterations},
        {"warmup_s", run.warmup_seconds},
        {"iterations", run.iterations},
        {"excluded_records", run.excluded_records},
        {"sm_clock_before_mhz", run.sm_clock_before_mhz},
        {"sm_clock_after_mhz", run.sm_clock_after_mhz},
        {"gpu_time", timing_json(run.gpu_time_us, run.gpu_time_samples_us)},
        {"enqueue_time", summary_json(run.enqueue_us)},
        {"kernel_sum_median_us", run.kernel_sum_us},
        {"passes", passes_json(run)},
        {"launches", launches},
    });
  }
  nlohmann::json out = {{"bundle", report.bundle_path},
                        {"graph", report.graph_name},
                        {"environment", env},
                        {"sweep_dim", report.sweep_dim.empty() ? nlohmann::json() : nlohmann::json(report.sweep_dim)},
                        {"runs", runs}};
  if (!report.sweep_dim.empty()) {
    nlohmann::json scaling = nlohmann::json::array();
    for (const ScalingRow& r : scaling_rows(report))
      scaling.push_back({{"value", r.value},
                         {"gpu_median_us", r.gpu_median_us},
                         {"us_per_unit", r.us_per_unit},
                         {"time_vs_first", r.time_vs_first},
                         {"gbps", r.gbps},
                         {"gflops", r.gflops}});
    out["scaling"] = scaling;
  }
  return out;
}

std::string format_profile_csv(const ProfileReport& report) {
  const Environment& e = report.environment;
  std::string out =
      "bindings,trusted,timing_method,mode,cuda_graph,index,node,kernel,grid_x,grid_y,grid_z,"
      "block_x,block_y,block_z,count,min_us,median_us,mean_us,p90_us,max_us,rel_iqr,share_pct,"
      "bytes,flops,gbps,gflops,pct_peak_bandwidth,pct_peak_compute,compute_unit,registers_per_thread,"
      "static_smem_bytes,dynamic_smem_bytes,occupancy_pct\n";
  for (const ProfileRun& run : report.runs) {
    for (const LaunchStats& l : run.launches) {
      const LaunchFacts& f = l.facts;
      const Summary& d = l.duration_us;
      out += fmt::format(
          "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.5f},"
          "{:.3f},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{},{},{},{},{:.1f}\n",
          csv_field(bindings_text(run.bindings)), run.untrusted.empty() ? "true" : "false", csv_field(e.timing_method),
          e.mode, e.cuda_graph ? "true" : "false", f.index, csv_field(f.node), csv_field(f.kernel), f.grid[0],
          f.grid[1], f.grid[2], f.block[0], f.block[1], f.block[2], d.count, d.min, d.median, d.mean, d.p90, d.max,
          d.rel_iqr, 100 * l.share, f.bytes, f.flops, l.gbps, l.gflops, l.pct_peak_bandwidth, l.pct_peak_compute,
          compute_unit(f), f.registers, f.static_smem_bytes, f.dynamic_smem_bytes, 100 * f.occupancy);
    }
  }
  return out;
}

namespace {

// Summary and samples from a "duration" or "gpu_time" object; none when it has no samples.
std::vector<double> samples_of(const JsonField& timing, Summary& summary) {
  if (!timing.has("samples_us")) return {};
  std::vector<double> samples = timing["samples_us"].numbers();
  if (!samples.empty()) summary = summarize(samples);
  return samples;
}

LaunchStats launch_from_json(const JsonField& j) {
  LaunchStats l;
  l.facts.index = static_cast<int>(j["index"].integer());
  l.facts.node = j["node"].str();
  l.facts.kernel = j["kernel"].str();
  if (j.has("ptx_sha256")) l.facts.ptx_sha256 = j["ptx_sha256"].str();
  l.samples_us = samples_of(j["duration"], l.duration_us);
  return l;
}

ProfileRun run_from_json(const JsonField& j) {
  ProfileRun run;
  const JsonField bindings = j["bindings"];
  if (!bindings.value().is_object()) bindings.fail("expected an object of dims");
  for (const auto& [dim, value] : bindings.value().items()) run.bindings[dim] = bindings[dim.c_str()].integer();
  run.untrusted = j["untrusted_reasons"].strings();
  if (!j["trusted"].boolean() && run.untrusted.empty()) run.untrusted.push_back("marked not trusted");
  run.warnings = j["warnings"].strings();
  if (j.has("sm_clock_before_mhz")) run.sm_clock_before_mhz = j["sm_clock_before_mhz"].number();
  if (j.has("sm_clock_after_mhz")) run.sm_clock_after_mhz = j["sm_clock_after_mhz"].number();
  run.gpu_time_samples_us = samples_of(j["gpu_time"], run.gpu_time_us);
  run.iterations = static_cast<int>(run.gpu_time_samples_us.size());
  for (const JsonField& launch : j["launches"].items()) run.launches.push_back(launch_from_json(launch));
  return run;
}

}  // namespace

ProfileReport read_profile_json(const std::string& path) {
  const nlohmann::json doc = parse_json_text(read_input_file(path, "profile"), path);
  const JsonField j(doc, path);
  ProfileReport report;
  report.bundle_path = j["bundle"].str();
  report.graph_name = j["graph"].str();
  const JsonField env = j["environment"];
  report.environment.gpu_name = env["gpu_name"].str();
  report.environment.timing_method = env["timing_method"].str();
  report.environment.mode = env["mode"].str();
  report.environment.cuda_graph = env["cuda_graph"].boolean();
  for (const JsonField& run : j["runs"].items()) report.runs.push_back(run_from_json(run));
  return report;
}

}  // namespace teeny::cli
