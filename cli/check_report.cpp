#include "cli/check_report.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "cli/table.h"
#include "core/expr.h"

namespace teeny::cli {
namespace {

std::string flat_to_index(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_text(index);
}

std::string describe_failure(const NodeCheck& check, const char* against) {
  const Tolerance tolerance = tolerance_for(check.dtype);
  return fmt::format(
      "{} of {} elements outside atol {:g} + rtol {:g}*|expected|; worst at {}: gpu {:.9g} vs "
      "{} {:.9g}",
      check.result.mismatches, check.result.count, tolerance.atol, tolerance.rtol,
      flat_to_index(check.result.worst_index, check.shape), check.result.worst_got, against,
      check.result.worst_expected);
}

// An update node's check is one of the params it writes: "adamw_fc1_weight -> fc1.weight".
std::string checked(const NodeCheck& check) {
  return check.param.empty() ? check.node : fmt::format("{} -> {}", check.node, check.param);
}

// The nodes checked (failing only: with a failing check), counting an update node's checks once.
size_t count_nodes(const std::vector<NodeCheck>& checks, bool failing_only) {
  std::set<std::string> nodes;
  for (const NodeCheck& check : checks)
    if (!failing_only || !check.result.ok()) nodes.insert(check.node);
  return nodes.size();
}

// Ten characters whatever the magnitude or sign, so the error columns line up between checks.
std::string error_str(double error) { return fmt::format("{:10.3e}", error); }

std::string node_table(const std::vector<NodeCheck>& nodes) {
  std::vector<Row> rows{{"node", "op", "dtype", "shape", "max abs", "max rel", "result"}};
  for (const NodeCheck& check : nodes) {
    rows.push_back({checked(check), check.op, dtype_name(check.dtype), shape_text(check.shape),
                    error_str(check.result.max_abs), error_str(check.result.max_rel),
                    check.result.ok() ? "ok" : "MISMATCH"});
  }
  constexpr Align L = Align::kLeft, R = Align::kRight;
  return format_table(rows, "", {L, L, L, L, R, R, L});
}

}  // namespace

std::string format_check_report(const CheckReport& report) {
  std::string out = node_table(report.nodes);
  for (const NodeCheck& output : report.outputs) {
    if (!output.result.ok()) {
      out += fmt::format("check: output '{}' of the full run differs from the node-by-node run: {}\n", output.node,
                         describe_failure(output, "node-by-node"));
    }
  }
  if (report.first_failure >= 0) {
    const NodeCheck& first = report.nodes[report.first_failure];
    out += fmt::format(
        "check: FAILED: {} of {} nodes differ from the host reference; first "
        "diverging node '{}' ({}): {}\n",
        count_nodes(report.nodes, true), count_nodes(report.nodes, false), checked(first), first.op,
        describe_failure(first, "reference"));
  } else if (report.ok()) {
    out += fmt::format("check: ok: all {} nodes match the host reference\n", count_nodes(report.nodes, false));
  }
  return out;
}

}  // namespace teeny::cli
