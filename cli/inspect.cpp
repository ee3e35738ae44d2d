// `teeny inspect BUNDLE [--bind D=N]... [--node NODE] [--ptx NODE|KERNEL] [--format table|json]`:
// show what a bundle will launch, evaluated under the bindings; --ptx prints a kernel's PTX.
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/table.h"
#include "core/bundle.h"
#include "core/executor.h"
#include "core/inspect.h"

namespace teeny::cli {
namespace {

using nlohmann::json;

struct InspectFlags {
  std::string bundle;
  std::vector<std::string> binds;
  std::string node;
  std::string ptx;
  std::string format = "table";
};

std::string text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::vector<std::string> items;
    for (const json& item : value) items.push_back(text(item));
    return fmt::format("[{}]", fmt::join(items, ", "));
  }
  return value.dump();
}

// "ceil_div(B, 64) = 1", or just "1" when the expression is a constant.
std::string expr_text(const json& e) {
  std::string value = e.contains("value") ? text(e["value"]) : "error: " + text(e["error"]);
  std::string expr = text(e["expr"]);
  return expr == value ? value : fmt::format("{} = {}", expr, value);
}

std::string render_table(const json& view, const std::string& path) {
  std::string out = fmt::format("bundle {}: graph '{}', arch {}, NVRTC {}, teeny {}\n", path, text(view["graph"]),
                                text(view["arch"]), text(view["nvrtc_version"]), text(view["teeny_version"]));
  std::vector<std::string> dims;
  for (const json& d : view["dims"]) {
    dims.push_back(fmt::format("{}={}{}", text(d["name"]), text(d["bound"]), d.contains("fixed") ? " (fixed)" : ""));
  }
  if (!dims.empty()) out += fmt::format("bindings: {}\n", fmt::join(dims, ", "));
  const json& s = view["summary"];
  out += fmt::format("{} nodes, {} kernels, {} launches, {} params ({} bytes), {} bytes of host init data\n",
                     text(s["nodes"]), text(s["kernels"]), text(s["launches"]), text(s["params"]),
                     expr_text(s["param_bytes"]), text(s["params_bin_bytes"]));
  // The symbolic total is a long sum; its value is what people read (the JSON has both).
  auto value = [](const json& e) { return e.contains("value") ? text(e["value"]) : "error: " + text(e["error"]); };
  out += fmt::format("cost: {} bytes, {} FLOPs\n", value(s["cost"]["bytes"]), value(s["cost"]["flops"]));

  for (const json& node : view["nodes"]) {
    const json& o = node["output"];
    out += fmt::format("\nnode {} ({})  inputs: {}\n", text(node["name"]), text(node["op"]),
                       fmt::join(node["inputs"].get<std::vector<std::string>>(), ", "));
    out += fmt::format("  output {} {} {}, row stride {}{}\n", text(o["name"]), text(o["dtype"]),
                       expr_text(o["shape"]), expr_text(o["row_stride"]),
                       o.contains("alias_of") ? fmt::format(" (view: buffer of {})", text(o["alias_of"])) : "");
    if (node.contains("fused_from")) out += fmt::format("  fused from {}\n", text(node["fused_from"]));
    if (!node["params"].empty()) {
      std::vector<Row> rows{{"PARAM", "DTYPE", "SHAPE", "BYTES", "INIT", "INIT BYTES"}};
      for (const json& p : node["params"]) {
        rows.push_back({text(p["name"]), text(p["dtype"]), expr_text(p["shape"]), expr_text(p["bytes"]),
                        text(p["init"]), text(p["init_bytes"])});
      }
      out += format_table(rows, "  ");
    }
    if (node["launches"].empty()) out += "  no kernel (a view)\n";
    for (const json& l : node["launches"]) {
      std::string bounds;
      if (l.contains("reqntid")) bounds += fmt::format(", .reqntid {}", text(l["reqntid"]));
      if (l.contains("maxntid")) bounds += fmt::format(", .maxntid {}", text(l["maxntid"]));
      out += fmt::format("  launch {}: kernel {}, entry {}, {} ({})\n", text(l["index"]), text(l["kernel"]),
                         text(l["entry"]), text(l["target"]), text(l["source"]));
      std::vector<std::string> grid;
      for (const json& g : l["grid"]) grid.push_back(expr_text(g));
      out += fmt::format("    block {}{}  grid [{}]  dynamic smem {}\n", text(l["block"]), bounds,
                         fmt::join(grid, ", "), expr_text(l["dynamic_smem"]));
      std::vector<Row> rows{{"POS", "NAME", "C TYPE", "PTX", "SIZE", "OFFSET", "BOUND TO", "VALUE"}};
      for (const json& a : l["args"]) {
        rows.push_back({text(a["position"]), text(a["name"]), text(a["c_type"]), text(a["ptx_type"]),
                        text(a["size"]), text(a["offset"]), text(a["bound_to"]), text(a["value"])});
      }
      out += format_table(rows, "    ");
      out += fmt::format("    cost: {} bytes, {} FLOPs\n", expr_text(l["cost"]["bytes"]),
                         expr_text(l["cost"]["flops"]));
    }
  }
  return out;
}

void run_inspect(const InspectFlags& flags) {
  Bundle bundle = read_bundle(flags.bundle);
  if (!flags.ptx.empty()) {
    std::cout << bundle_ptx(bundle, flags.ptx);
    return;
  }
  Bindings bindings = bundle_bindings(bundle, flags.binds);
  json view = inspect_bundle(bundle, bindings,
                             flags.node.empty() ? std::nullopt : std::optional<std::string>(flags.node));
  std::cout << (flags.format == "json" ? view.dump(2) + "\n" : render_table(view, flags.bundle));
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto flags = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show a bundle's kernels, argument layouts, grids, params and costs");
  cmd->add_option("BUNDLE", flags->bundle, "bundle directory")->required();
  cmd->add_option("--bind", flags->binds, "bind a dim for the values shown: D=N (repeatable)")->allow_extra_args(false);
  cmd->add_option("--node", flags->node, "show only this node");
  cmd->add_option("--ptx", flags->ptx, "print the PTX of a node's kernel(s) or of a kernel by name");
  cmd->add_option("--format", flags->format, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->callback([flags] { run_inspect(*flags); });
}

}  // namespace teeny::cli
