// `teeny check GRAPH [--bind D=N]...`: validate a spec and show every tensor's inferred
// symbolic type and its concrete shape under the bindings.
#include <iostream>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/table.h"
#include "core/graph.h"

namespace teeny::cli {
namespace {

struct CheckFlags {
  std::string graph;
  std::vector<std::string> binds;
};

std::string concrete(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string symbolic(const TensorType& type) {
  std::string text = shape_str(type.shape);
  if (is_padded(type)) text += fmt::format(" (row stride {})", type.row_stride.str());
  return text;
}

void run_check(const CheckFlags& flags) {
  Graph graph = load_graph(flags.graph, registry());
  Bindings bindings = bind_dims(graph.dims, flags.binds);
  auto shapes = bind_shapes(graph, bindings);

  std::string out = fmt::format("graph '{}' ({}): OK\n", graph.name, flags.graph);
  if (!graph.dims.empty()) {
    std::vector<Row> rows{{"DIM", "RANGE", "DEFAULT", "BOUND"}};
    for (const DimDecl& dim : graph.dims) {
      int64_t bound = bindings.at(dim.name);
      rows.push_back({dim.name, fmt::format("[{}, {}]", dim.min, dim.max), std::to_string(dim.default_value),
                      bound == dim.default_value ? std::to_string(bound) : fmt::format("{} (--bind)", bound)});
    }
    out += "\ndims\n" + format_table(rows, "  ");
  }

  std::vector<Row> inputs{{"INPUT", "DTYPE", "SHAPE", "BOUND"}};
  for (const GraphInput& input : graph.inputs)
    inputs.push_back({input.name, dtype_name(input.type.dtype), symbolic(input.type), concrete(shapes.at(input.name))});
  out += "\ninputs\n" + format_table(inputs, "  ");

  std::vector<Row> nodes{{"NODE", "OP", "INPUTS", "DTYPE", "SHAPE", "BOUND", "PARAMS"}};
  for (const Node& node : graph.nodes) {
    std::vector<std::string> params;
    if (node.op->params)
      for (const ParamSpec& param : node.op->params(node.ctx))
        params.push_back(fmt::format("{} {}", param.slot, shape_str(param.shape)));
    nodes.push_back({node.name, node.op->name, fmt::format("{}", fmt::join(node.inputs, ", ")),
                     dtype_name(node.ctx.output.dtype), symbolic(node.ctx.output), concrete(shapes.at(node.name)),
                     fmt::format("{}", fmt::join(params, ", "))});
  }
  out += "\nnodes\n" + format_table(nodes, "  ");

  std::vector<Row> outputs{{"OUTPUT", "DTYPE", "SHAPE", "BOUND"}};
  std::unordered_map<std::string, const TensorType*> types;  // Graph::find_tensor scans the nodes
  for (const GraphInput& input : graph.inputs) types.emplace(input.name, &input.type);
  for (const Node& node : graph.nodes) types.emplace(node.name, &node.ctx.output);
  for (const std::string& name : graph.outputs) {
    const TensorType& type = *types.at(name);
    outputs.push_back({name, dtype_name(type.dtype), symbolic(type), concrete(shapes.at(name))});
  }
  out += "\noutputs\n" + format_table(outputs, "  ");
  std::cout << out;
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto flags = std::make_shared<CheckFlags>();
  CLI::App* cmd =
      app.add_subcommand("check", "Validate a graph spec and print every node's inferred output shape and dtype");
  cmd->add_option("GRAPH", flags->graph, "graph spec (.yaml)")->required();
  cmd->add_option("--bind", flags->binds, "bind a dim for the concrete shapes: D=N (repeatable)")
      ->allow_extra_args(false);
  cmd->callback([flags] { run_check(*flags); });
}

}  // namespace teeny::cli
