// `teeny inspect BUNDLE [--bind D=N]... [--device-sms N] [--device-smem BYTES] [--device-l2 BYTES]
// [--node NODE] [--ptx NODE|KERNEL] [--format table|json]`: show what a bundle will launch,
// evaluated under the bindings; --ptx prints a kernel's PTX. Grids and split counts that depend
// on the GPU are expressions over the device symbols: the --device-* flags bind them, else the
// GPU when there is one, else they stay symbolic.
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/table.h"
#include "cli/usage.h"
#include "core/binding.h"
#include "core/bundle.h"
#include "core/driver.h"
#include "core/inspect.h"

namespace teeny::cli {
namespace {

using nlohmann::json;

struct InspectFlags {
  std::string bundle;
  std::vector<std::string> binds;
  std::optional<int64_t> device_sms, device_smem, device_l2;
  std::string node;
  std::string ptx;
  std::string format = "table";
};

// The flags' device symbols; without any, GPU 0's facts when there is a GPU; else none.
InspectDevice inspected_device(const InspectFlags& flags) {
  InspectDevice device;
  const std::pair<const char*, const std::optional<int64_t>&> given[] = {
      {kSmsSymbol, flags.device_sms}, {kSmemPerBlockSymbol, flags.device_smem}, {kL2BytesSymbol, flags.device_l2}};
  for (const auto& [symbol, value] : given) {
    if (value) device.symbols[symbol] = *value;
  }
  if (!device.symbols.empty()) {
    device.source = "--device-* flags";
  } else if (const cuda::Driver* driver = cuda::Driver::find()) {
    std::shared_ptr<cuda::Device> gpu = cuda::Device::open(*driver);
    device.symbols = device_bindings(gpu->facts());
    device.source = fmt::format("GPU {} ({})", gpu->ordinal(), gpu->name());
  }
  return device;
}

// ---- JSON -------------------------------------------------------------------------------------

// {"expr": "ceil_div(B, 64)", "value": 1}, "needs": [device symbols] or "error" in place of "value".
json expr_json(const InspectedExpr& e) {
  json out = {{"expr", e.expr}};
  if (e.value) out["value"] = *e.value;
  if (!e.needs.empty()) out["needs"] = e.needs;
  if (!e.error.empty()) out["error"] = e.error;
  return out;
}

json shape_json(const InspectedShape& s) {
  json out = {{"expr", s.expr}};
  if (s.value) out["value"] = *s.value;
  if (!s.error.empty()) out["error"] = s.error;
  return out;
}

json tensor_json(const InspectedTensor& t) {
  json out = {
      {"name", t.name}, {"dtype", t.dtype}, {"shape", shape_json(t.shape)}, {"row_stride", expr_json(t.row_stride)}};
  if (!t.alias_of.empty()) out["alias_of"] = t.alias_of;
  return out;
}

json param_json(const InspectedParam& p) {
  json out = {{"name", p.name},
              {"slot", p.slot},
              {"dtype", p.dtype},
              {"shape", shape_json(p.shape)},
              {"bytes", expr_json(p.bytes)},
              {"init", p.init},
              {"init_bytes", p.init_bytes}};
  if (p.init_offset) out["init_offset"] = *p.init_offset;
  return out;
}

json scratch_json(const InspectedScratch& s) {
  return {{"name", s.name}, {"dtype", s.dtype}, {"elements", expr_json(s.elements)}, {"bytes", expr_json(s.bytes)}};
}

json arg_json(const InspectedArg& a) {
  json out = {{"position", a.position}, {"name", a.name}, {"kind", a.kind},     {"c_type", a.c_type},
              {"ptx_type", a.ptx_type}, {"size", a.size}, {"offset", a.offset}, {"bound_to", a.bound_to}};
  if (a.scalar) {
    out["value"] = a.scalar->value           ? json(*a.scalar->value)
                   : a.scalar->needs.empty() ? json(a.scalar->error)
                                             : json(nullptr);
    if (!a.scalar->needs.empty()) out["needs"] = a.scalar->needs;
  } else if (a.constant) {
    out["value"] = *a.constant;
  } else {
    out["value"] = a.value;
  }
  if (a.map) {
    const InspectedTensorMap& m = *a.map;
    out["map"] = {{"of", m.of},
                  {"cols", expr_json(m.cols)},
                  {"rows", expr_json(m.rows)},
                  {"row_stride", expr_json(m.row_stride)},
                  {"box", {m.box_cols, m.box_rows}},
                  {"swizzle", m.swizzle}};
  }
  return out;
}

json launch_json(const InspectedLaunch& l) {
  json args = json::array();
  for (const InspectedArg& a : l.args) args.push_back(arg_json(a));
  json out = {{"index", l.index},
              {"kernel", l.kernel},
              {"entry", l.entry},
              {"target", l.target},
              {"source", l.source},
              {"block", l.block},
              {"grid", {expr_json(l.grid[0]), expr_json(l.grid[1]), expr_json(l.grid[2])}},
              {"dynamic_smem", expr_json(l.dynamic_smem)},
              {"args", args},
              {"cost", {{"bytes", expr_json(l.bytes)}, {"flops", expr_json(l.flops)}}},
              {"when", expr_json(l.when)}};
  if (l.reqntid) out["reqntid"] = *l.reqntid;
  if (l.maxntid) out["maxntid"] = *l.maxntid;
  return out;
}

json node_json(const InspectedNode& n) {
  json params = json::array(), scratch = json::array(), launches = json::array();
  for (const InspectedParam& p : n.params) params.push_back(param_json(p));
  for (const InspectedScratch& s : n.scratch) scratch.push_back(scratch_json(s));
  for (const InspectedLaunch& l : n.launches) launches.push_back(launch_json(l));
  json out = {{"name", n.name},
              {"op", n.op},
              {"attrs", n.attrs},
              {"inputs", n.inputs},
              {"output", tensor_json(n.output)},
              {"params", params},
              {"scratch", scratch},
              {"launches", launches}};
  if (!n.fused_from.empty()) out["fused_from"] = n.fused_from;
  if (n.role != "forward") out["role"] = n.role;
  if (!n.grad_of.empty()) out["grad_of"] = n.grad_of;
  if (!n.param_refs.empty()) out["param_refs"] = n.param_refs;
  if (!n.backward.empty()) out["backward"] = n.backward;
  if (!n.variants.empty()) {
    json variants = json::array();
    for (const InspectedVariant& v : n.variants)
      variants.push_back({{"variant", v.variant}, {"why", v.why}, {"when", expr_json(v.when)}});
    out["variants"] = std::move(variants);
  }
  return out;
}

json render_json(const Inspection& view) {
  json dims = json::array();
  for (const InspectedDim& d : view.dims) {
    json dim = {{"name", d.name}, {"min", d.min}, {"max", d.max}, {"default", d.default_value}};
    if (d.bound) dim["bound"] = *d.bound;
    if (d.fixed) dim["fixed"] = *d.fixed;
    dims.push_back(std::move(dim));
  }
  json device = {{"source", view.device.source.empty() ? json(nullptr) : json(view.device.source)},
                 {"symbols", view.device.symbols},
                 {"unbound", view.unbound_device_symbols}};
  json nodes = json::array();
  for (const InspectedNode& n : view.nodes) nodes.push_back(node_json(n));
  return {{"graph", view.graph},
          {"spec", view.spec},
          {"tuning", view.tuning},
          {"format_version", view.format_version},
          {"teeny_version", view.teeny_version},
          {"nvrtc_version", view.nvrtc_version},
          {"arch", view.arch},
          {"nvrtc_options", view.nvrtc_options},
          {"dims", dims},
          {"device", device},
          {"inputs", view.inputs},
          {"outputs", view.outputs},
          {"summary",
           {{"nodes", view.node_count},
            {"kernels", view.kernel_count},
            {"launches", view.launch_count},
            {"params", view.param_count},
            {"param_bytes", expr_json(view.param_bytes)},
            {"params_bin_bytes", view.params_bin_bytes},
            {"cost", {{"bytes", expr_json(view.bytes)}, {"flops", expr_json(view.flops)}}}}},
          {"nodes", nodes}};
}

// ---- table ------------------------------------------------------------------------------------

// Just the value: "1", "needs SMS" while symbolic, or "error: ...".
std::string value_text(const InspectedExpr& e) {
  if (e.value) return std::to_string(*e.value);
  if (!e.needs.empty()) return fmt::format("needs {}", fmt::join(e.needs, ", "));
  return "error: " + e.error;
}

// "ceil_div(B, 64) = 1", just "1" for a constant, or the expression alone while it needs device
// symbols (the header says how to bind them).
std::string expr_text(const InspectedExpr& e) {
  if (!e.needs.empty()) return e.expr;
  const std::string value = value_text(e);
  return e.expr == value ? value : fmt::format("{} = {}", e.expr, value);
}

std::string shape_text(const InspectedShape& s) {
  const std::string value = s.value ? teeny::shape_text(*s.value) : "error: " + s.error;
  return s.expr == value ? value : fmt::format("{} = {}", s.expr, value);
}

std::string device_line(const Inspection& view) {
  if (!view.device.source.empty()) {
    return fmt::format("device: {} ({})\n", bindings_text(view.device.symbols), view.device.source);
  }
  if (view.unbound_device_symbols.empty()) return "";
  return fmt::format(
      "device: none (no GPU found): expressions over {} stay symbolic; --device-sms N, "
      "--device-smem BYTES and --device-l2 BYTES evaluate them\n",
      fmt::join(view.unbound_device_symbols, ", "));
}

std::string header(const Inspection& view, const std::string& path) {
  std::string out = fmt::format("bundle {}: graph '{}', arch {}, NVRTC {}, teeny {}\n", path, view.graph, view.arch,
                                view.nvrtc_version, view.teeny_version);
  std::vector<std::string> dims;
  for (const InspectedDim& d : view.dims) {
    dims.push_back(fmt::format("{}={}{}", d.name, d.bound ? std::to_string(*d.bound) : "?", d.fixed ? " (fixed)" : ""));
  }
  if (!dims.empty()) out += fmt::format("bindings: {}\n", fmt::join(dims, ", "));
  if (!view.tuning.empty()) out += fmt::format("tuning: {}\n", view.tuning);
  out += device_line(view);
  out += fmt::format("{} nodes, {} kernels, {} launches, {} params ({} bytes), {} bytes of host init data\n",
                     view.node_count, view.kernel_count, view.launch_count, view.param_count,
                     expr_text(view.param_bytes), view.params_bin_bytes);
  // The symbolic total is a long sum; its value is what people read (the JSON has both).
  out += fmt::format("cost: {} bytes, {} FLOPs\n", value_text(view.bytes), value_text(view.flops));
  return out;
}

std::string launch_table(const InspectedLaunch& l) {
  std::string bounds;
  if (l.reqntid) bounds += fmt::format(", .reqntid [{}]", fmt::join(*l.reqntid, ", "));
  if (l.maxntid) bounds += fmt::format(", .maxntid [{}]", fmt::join(*l.maxntid, ", "));
  std::string out =
      fmt::format("  launch {}: kernel {}, entry {}, {} ({})\n", l.index, l.kernel, l.entry, l.target, l.source);
  std::vector<std::string> grid;
  for (const InspectedExpr& g : l.grid) grid.push_back(expr_text(g));
  if (l.when.expr != "1") {
    out += fmt::format("    when {}{}\n", expr_text(l.when), l.when.value == 0 ? ": does not run at this binding" : "");
  }
  out += fmt::format("    block [{}]{}  grid [{}]  dynamic smem {}\n", fmt::join(l.block, ", "), bounds,
                     fmt::join(grid, ", "), expr_text(l.dynamic_smem));
  std::vector<Row> rows{{"POS", "NAME", "C TYPE", "PTX", "SIZE", "OFFSET", "BOUND TO", "VALUE"}};
  for (const InspectedArg& a : l.args) {
    const std::string value = a.scalar ? value_text(*a.scalar) : a.value;
    rows.push_back({std::to_string(a.position), a.name, a.c_type, a.ptx_type, std::to_string(a.size),
                    std::to_string(a.offset), a.bound_to, value});
  }
  out += format_table(rows, "    ");
  out += fmt::format("    cost: {} bytes, {} FLOPs\n", expr_text(l.bytes), expr_text(l.flops));
  return out;
}

// " [backward of fc1]", " [update of fc1.weight]", " [update]"; "" for a forward node.
std::string role_text(const InspectedNode& node) {
  if (node.role == "forward") return "";
  return node.grad_of.empty() ? fmt::format(" [{}]", node.role) : fmt::format(" [{} of {}]", node.role, node.grad_of);
}

std::string node_table(const InspectedNode& node) {
  const InspectedTensor& o = node.output;
  std::string out =
      fmt::format("\nnode {} ({}){}  inputs: {}\n", node.name, node.op, role_text(node), fmt::join(node.inputs, ", "));
  if (o.name.empty()) {
    out += "  no output: updates its params in place\n";
  } else {
    out += fmt::format("  output {} {} {}, row stride {}{}\n", o.name, o.dtype, shape_text(o.shape),
                       expr_text(o.row_stride),
                       o.alias_of.empty() ? "" : fmt::format(" (view: buffer of {})", o.alias_of));
  }
  for (const auto& [slot, param] : node.param_refs) out += fmt::format("  param {} is {}\n", slot, param);
  if (!node.backward.empty()) out += fmt::format("  backward: {}\n", fmt::join(node.backward, ", "));
  if (!node.fused_from.empty()) out += fmt::format("  fused from [{}]\n", fmt::join(node.fused_from, ", "));
  for (const InspectedVariant& v : node.variants) {
    const std::string where = v.when.expr == "1" ? "" : fmt::format(" where {}", expr_text(v.when));
    out += fmt::format("  variant {}{}: {}\n", v.variant.empty() ? "(heuristic)" : v.variant, where, v.why);
  }
  if (!node.params.empty()) {
    std::vector<Row> rows{{"PARAM", "DTYPE", "SHAPE", "BYTES", "INIT", "INIT BYTES"}};
    for (const InspectedParam& p : node.params) {
      rows.push_back({p.name, p.dtype, shape_text(p.shape), expr_text(p.bytes), p.init, std::to_string(p.init_bytes)});
    }
    out += format_table(rows, "  ");
  }
  if (!node.scratch.empty()) {
    std::vector<Row> rows{{"SCRATCH", "DTYPE", "ELEMENTS", "BYTES"}};
    for (const InspectedScratch& s : node.scratch) {
      rows.push_back({s.name, s.dtype, expr_text(s.elements), expr_text(s.bytes)});
    }
    out += format_table(rows, "  ");
  }
  if (node.launches.empty()) out += "  no kernel (a view)\n";
  for (const InspectedLaunch& l : node.launches) out += launch_table(l);
  return out;
}

std::string render_table(const Inspection& view, const std::string& path) {
  std::string out = header(view, path);
  for (const InspectedNode& node : view.nodes) out += node_table(node);
  return out;
}

void inspect(const InspectFlags& flags) {
  Bundle bundle = read_bundle(flags.bundle);
  if (!flags.ptx.empty()) {
    std::cout << bundle_ptx(bundle, flags.ptx);
    return;
  }
  const Bindings dims = bundle_bindings(bundle, flags.binds);
  bind_bundle(bundle, dims, flags.bundle);  // sizes and memory within the limits, as run checks them
  const Inspection view = inspect_bundle(bundle, dims, inspected_device(flags),
                                         flags.node.empty() ? std::nullopt : std::optional<std::string>(flags.node));
  std::cout << (flags.format == "json" ? render_json(view).dump(2) + "\n" : render_table(view, flags.bundle));
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto flags = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show a bundle's kernels, argument layouts, grids, params and costs");
  cmd->add_option("BUNDLE", flags->bundle, "bundle directory")->required();
  cmd->add_option("--bind", flags->binds, "bind a dim for the values shown: D=N (repeatable)")->allow_extra_args(false);
  cmd->add_option("--device-sms", flags->device_sms,
                  "evaluate for a GPU with N SMs (the device symbol SMS; default: this machine's GPU, if any)")
      ->check(positive_number());
  cmd->add_option("--device-smem", flags->device_smem,
                  "evaluate for a GPU whose blocks may opt in to BYTES of shared memory (SMEM_PER_BLOCK)")
      ->check(positive_number());
  cmd->add_option("--device-l2", flags->device_l2, "evaluate for a GPU with BYTES of L2 cache (L2_BYTES)")
      ->check(positive_number());
  cmd->add_option("--node", flags->node, "show only this node");
  cmd->add_option("--ptx", flags->ptx, "print the PTX of a node's kernel(s) or of a kernel by name");
  cmd->add_option("--format", flags->format, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->callback([flags] { inspect(*flags); });
}

}  // namespace teeny::cli
