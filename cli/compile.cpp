// `teeny compile GRAPH [-o BUNDLE] [--arch sm_90] [--bind D=N]... [--tuning FILE|none] [--no-fuse] [-j N]`: lower a
// graph to verified PTX kernels and write the bundle directory.
#include <chrono>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/usage.h"
#include "core/binding.h"
#include "core/compile.h"
#include "core/executor.h"
#include "core/graph.h"
#include "core/tuning.h"

namespace teeny::cli {
namespace {

struct CompileFlags {
  std::string graph;
  std::string output;
  std::string arch = "sm_90";
  std::vector<std::string> binds;
  bool no_fuse = false;
  int jobs = 0;
  std::string tuning;  // a file, "none", or "": the built-in one for the arch
};

// The tuning file compile uses: --tuning FILE (for the target arch), none, or the built-in one.
std::optional<TuningFile> compile_tuning(const std::string& flag, const std::string& arch) {
  if (flag == "none") return std::nullopt;
  if (flag.empty()) return builtin_tuning(arch);
  TuningFile file = load_tuning(flag);
  if (file.arch != arch) {
    throw Error(
        fmt::format("--tuning {}: the file's records are for {} ({}), not --arch {}", flag, file.arch, file.gpu, arch));
  }
  return file;
}

void run_compile(const CompileFlags& flags) {
  Graph graph = load_graph(flags.graph, registry());
  CompileOptions options;
  options.arch = flags.arch;
  options.fuse = !flags.no_fuse;
  options.jobs = flags.jobs;
  options.tuning = compile_tuning(flags.tuning, flags.arch);
  // bind_dims validates names and ranges; only the dims named on the command line are fixed.
  Bindings bound = bind_dims(graph.dims, flags.binds);
  for (const std::string& bind : flags.binds) {
    std::string name = bind.substr(0, bind.find('='));
    options.fixed[name] = bound.at(name);
  }

  auto start = std::chrono::steady_clock::now();
  CompileStats stats;
  Bundle bundle = compile_graph(std::move(graph), registry(), options, &stats);
  std::string path = flags.output.empty() ? bundle.graph_name + ".teeny" : flags.output;
  // Sizes and memory at the default binding (and the fixed dims), checked as a run checks them.
  Bindings bindings = bundle_bindings(bundle, {});
  const BoundBundle checked = bind_bundle(bundle, bindings, path);
  write_bundle(bundle, path);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (const std::string& warning : stats.warnings) std::cerr << "teeny: warning: " << warning << "\n";
  uint64_t param_bytes = 0;  // within kMaxBindingBytes: bind_bundle checked
  for (const BoundParam& param : checked.params) param_bytes += param.bytes;
  std::string binding_text;
  for (const auto& [name, value] : bindings)
    binding_text += fmt::format("{}{}={}", binding_text.empty() ? "" : ", ", name, value);

  std::string out = fmt::format("compiled '{}' -> {} in {:.2f} s\n", flags.graph, path, seconds);
  out += fmt::format("  {} nodes, {} kernels ({} compiled, {} cached), {} launches", bundle.nodes.size(), stats.kernels,
                     stats.compiled, stats.cached, bundle.launches.size());
  if (stats.passes_applied > 0)
    out += fmt::format(", {} fusion rewrite{}", stats.passes_applied, stats.passes_applied == 1 ? "" : "s");
  out += fmt::format("\n  {} params: {} bytes{}, {} bytes of host init data\n", bundle.params.size(), param_bytes,
                     binding_text.empty() ? "" : " at " + binding_text, bundle.param_bytes.size());
  out += fmt::format("  arch {}, NVRTC {}\n", bundle.arch, bundle.nvrtc_version);
  std::cout << out;
}

}  // namespace

void add_compile_command(CLI::App& app) {
  auto flags = std::make_shared<CompileFlags>();
  CLI::App* cmd = app.add_subcommand("compile", "Compile a graph spec to a bundle of verified PTX kernels");
  cmd->add_option("GRAPH", flags->graph, "graph spec (.yaml)")->required();
  cmd->add_option("-o,--output", flags->output, "bundle directory (default: <graph name>.teeny)");
  cmd->add_option("--arch", flags->arch, "GPU architecture for NVRTC")->capture_default_str();
  cmd->add_option("--bind", flags->binds, "fix a dim at compile time so kernels specialise: D=N (repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--no-fuse", flags->no_fuse, "skip graph fusion passes");
  cmd->add_option("--tuning", flags->tuning,
                  "kernel choices measured by `teeny tune` (FILE), or none (default: the built-in file for the arch)");
  cmd->add_option("-j,--jobs", flags->jobs, "parallel NVRTC compilations (default: one per CPU)")
      ->check(non_negative_number());
  cmd->callback([flags] { run_compile(*flags); });
}

}  // namespace teeny::cli
