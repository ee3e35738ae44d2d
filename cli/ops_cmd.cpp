// `teeny ops [NAME] [--format table|json]`: the registered ops with their inputs, attrs,
// params and docs.
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"

namespace teeny::cli {
namespace {

struct OpsFlags {
  std::string name;
  std::string format = "table";
};

std::string value_text(const nlohmann::json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::vector<std::string> input_names(const OpDef& op) {
  std::vector<std::string> names;
  for (const InputSpec& input : op.inputs) names.push_back(input.name);
  if (op.variadic && !names.empty()) names.back() += "...";
  for (size_t k = names.size() - static_cast<size_t>(op.optional_inputs); k < names.size(); ++k) names[k] += "?";
  return names;
}

std::vector<std::string> dtype_list(const OpDef& op) {
  std::vector<std::string> names;
  for (DType type : op.dtypes) names.push_back(dtype_name(type));
  return names;
}

// "out_features" (required), "bias=true" (default), "scale?" (optional, no default).
std::string attr_summary(const AttrSpec& attr) {
  if (attr.default_value) return fmt::format("{}={}", attr.name, value_text(*attr.default_value));
  return attr.optional ? attr.name + "?" : attr.name;
}

nlohmann::json op_json(const OpDef& op) {
  nlohmann::json inputs = nlohmann::json::array();
  for (const InputSpec& input : op.inputs) inputs.push_back({{"name", input.name}, {"doc", input.doc}});
  nlohmann::json attrs = nlohmann::json::array();
  for (const AttrSpec& attr : op.attrs) {
    nlohmann::json entry = {{"name", attr.name},
                            {"type", attr_type_name(attr.type)},
                            {"doc", attr.doc},
                            {"required", !attr.default_value && !attr.optional}};
    if (attr.default_value) entry["default"] = *attr.default_value;
    if (!attr.choices.empty()) entry["choices"] = attr.choices;
    if (attr.min_value) entry["min"] = *attr.min_value;
    if (attr.min_exclusive) entry["min_exclusive"] = true;
    if (attr.max_value) entry["max"] = *attr.max_value;
    attrs.push_back(entry);
  }
  nlohmann::json out = {{"name", op.name},          {"doc", op.doc},           {"inputs", inputs},
                        {"variadic", op.variadic},  {"attrs", attrs},          {"params", op.param_slots},
                        {"dtypes", dtype_list(op)}, {"source", op.source_file}};
  if (op.variadic) out["min_inputs"] = op.min_inputs;
  if (op.optional_inputs > 0) out["optional_inputs"] = op.optional_inputs;
  return out;
}

std::string op_details(const OpDef& op) {
  std::string out = fmt::format("{}: {}\n", op.name, op.doc);
  out += fmt::format("  source:  {}\n", op.source_file);
  out += fmt::format("  dtypes:  {}\n", fmt::join(dtype_list(op), ", "));
  std::vector<Row> inputs;
  for (const InputSpec& input : op.inputs) inputs.push_back({input.name, input.doc});
  if (op.variadic)
    out += fmt::format("  inputs ({} or more; the last repeats):\n", op.min_inputs);
  else if (op.optional_inputs == 1)
    out += "  inputs (the last one optional):\n";
  else if (op.optional_inputs > 1)
    out += fmt::format("  inputs (the last {} optional):\n", op.optional_inputs);
  else
    out += "  inputs:\n";
  out += format_table(inputs, "    ");
  if (op.attrs.empty()) {
    out += "  attrs:   none\n";
  } else {
    std::vector<Row> attrs{{"NAME", "TYPE", "DEFAULT", "DOC"}};
    for (const AttrSpec& attr : op.attrs) {
      std::string type = attr_type_name(attr.type);
      if (!attr.choices.empty()) type += fmt::format(" ({})", fmt::join(attr.choices, "|"));
      std::string fallback = attr.default_value ? value_text(*attr.default_value)
                             : attr.optional    ? "(optional)"
                                                : "(required)";
      std::string doc = attr.doc;
      if (std::string domain = attr_domain_text(attr); !domain.empty()) doc += "; " + domain;
      attrs.push_back({attr.name, type, fallback, doc});
    }
    out += "  attrs:\n" + format_table(attrs, "    ");
  }
  out += fmt::format("  params:  {}\n",
                     op.param_slots.empty() ? "none" : fmt::format("{}", fmt::join(op.param_slots, ", ")));
  return out;
}

void run_ops(const OpsFlags& flags) {
  const Registry& ops = registry();
  std::vector<const OpDef*> selected;
  if (flags.name.empty()) {
    for (const std::string& name : ops.names()) selected.push_back(ops.find(name));
  } else {
    const OpDef* op = ops.find(flags.name);
    if (!op)
      throw Error(fmt::format("unknown op '{}'{}", flags.name, did_you_mean(flags.name, ops.names())))
          .note("`teeny ops` lists the registered ops");
    selected.push_back(op);
  }

  if (flags.format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const OpDef* op : selected) out.push_back(op_json(*op));
    std::cout << (flags.name.empty() ? out : out.at(0)).dump(2) << "\n";
  } else if (!flags.name.empty()) {
    std::cout << op_details(*selected.front());
  } else {
    std::vector<Row> rows{{"OP", "INPUTS", "ATTRS", "PARAMS", "DOC"}};
    for (const OpDef* op : selected) {
      std::vector<std::string> attrs;
      for (const AttrSpec& attr : op->attrs) attrs.push_back(attr_summary(attr));
      rows.push_back({op->name, fmt::format("{}", fmt::join(input_names(*op), ", ")),
                      fmt::format("{}", fmt::join(attrs, ", ")), fmt::format("{}", fmt::join(op->param_slots, ", ")),
                      first_line(op->doc)});
    }
    std::cout << format_table(rows);
  }
}

}  // namespace

void add_ops_command(CLI::App& app) {
  auto flags = std::make_shared<OpsFlags>();
  CLI::App* cmd = app.add_subcommand("ops", "List the registered ops, or show one");
  cmd->add_option("NAME", flags->name, "show only this op");
  cmd->add_option("--format", flags->format, "output format")->check(CLI::IsMember({"table", "json"}));
  cmd->callback([flags] { run_ops(*flags); });
}

}  // namespace teeny::cli
