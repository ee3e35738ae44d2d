#include "core/lowering_choice.h"

#include <algorithm>

#include <fmt/format.h>

namespace teeny {
namespace {

using Dims = std::vector<std::pair<std::string, Expr>>;

// The op's lowering of variant `variant` ("" : its heuristic), run only where `when` holds.
void append_lowering(Lowering& out, const OpDef& op, OpContext ctx, const std::string& variant, const Expr& when) {
  ctx.variant = variant;
  append_lowering(out, op.lower(ctx), when, fmt::format("op '{}'", op.name));
}

const OpVariant* find_variant(const std::vector<OpVariant>& variants, const std::string& name) {
  for (const OpVariant& v : variants) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

std::string variant_names(const std::vector<OpVariant>& variants) {
  std::vector<std::string> names;
  for (const OpVariant& v : variants) names.push_back(v.name);
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

// Why the node cannot run `record`'s variant over the record's ranges, or "": the variant must be
// one of the node's, and its limits hold the node's constant dims and the record's ranges of its
// symbolic ones.
std::string record_problem(const TuningRecord& record, const std::vector<OpVariant>& variants, const Dims& dims) {
  const OpVariant* variant = find_variant(variants, record.variant);
  if (variant == nullptr) {
    return fmt::format("'{}' is not a variant of this node (its variants: {})", record.variant,
                       variant_names(variants));
  }
  for (const auto& [name, limit] : variant->limits) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d].first != name) continue;
      const Expr& value = dims[d].second;
      DimRange range{};
      for (const auto& [record_name, record_range] : record.dims) {
        if (record_name == name) range = record_range;
      }
      if (value.is_const()) range = {*value.const_value(), *value.const_value()};
      if (range.lo < limit.lo || range.hi > limit.hi) {
        return fmt::format("'{}' runs {} in [{}, {}] only", record.variant, name, limit.lo, limit.hi);
      }
    }
  }
  return "";
}

std::string dims_of_node(const Dims& dims) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : dims) parts.push_back(fmt::format("{}={}", name, value.str()));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string tuned_why(const TuningFile& tuning, size_t index) {
  const TuningRecord& record = tuning.records[index];
  std::string why = fmt::format("tuned: {} records[{}] ({}, {}, L2 {}", tuning.source, index, tuning.gpu,
                                dims_text(record.dims), record.l2);
  for (const TuningCandidate& c : record.candidates) {
    if (c.variant == record.variant && c.rejected.empty()) {
      const auto measured = std::count_if(record.candidates.begin(), record.candidates.end(),
                                          [](const TuningCandidate& other) { return other.rejected.empty(); });
      why += fmt::format(": {:.2f} us, fastest of {} measured", c.median_us, measured);
    }
  }
  return why + ")";
}

}  // namespace

ChosenLowering lower_tunable(const OpDef& op, const OpContext& ctx, const TuningFile* tuning,
                             const std::string& forced) {
  const std::vector<OpVariant> variants = op.tuning.variants(ctx);
  ChosenLowering out;
  if (!forced.empty()) {
    if (find_variant(variants, forced) == nullptr) {
      throw OpError("op", fmt::format("{} has no variant '{}' here (its variants: {})", op.name, forced,
                                      variant_names(variants)));
    }
    append_lowering(out.lowering, op, ctx, forced, Expr(1));
    out.variants.push_back({forced, "named for the node (teeny tune)", Expr(1)});
    return out;
  }
  const Dims dims = op.tuning.dims(ctx);
  std::vector<std::string> passed_over;
  Expr covered(0);
  if (tuning != nullptr) {
    for (const TunedChoice& choice : tuned_choices(*tuning, op.name, ctx.output.dtype, dims)) {
      const TuningRecord& record = tuning->records[choice.record];
      const std::string problem = record_problem(record, variants, dims);
      if (!problem.empty()) {
        passed_over.push_back(fmt::format("{} records[{}] not used: {}", tuning->source, choice.record, problem));
        continue;
      }
      append_lowering(out.lowering, op, ctx, record.variant, choice.when);
      out.variants.push_back({record.variant, tuned_why(*tuning, choice.record), choice.when});
      covered = covered + choice.when;
    }
  }
  const Expr rest = Expr(1) - covered;
  if (rest == Expr(0)) return out;
  std::string why = tuning == nullptr    ? "no tuning file"
                    : covered != Expr(0) ? fmt::format("no record in {} applies", tuning->source)
                                         : fmt::format("no record in {} for {} {} {}", tuning->source, op.name,
                                                       dtype_name(ctx.output.dtype), dims_of_node(dims));
  for (const std::string& note : passed_over) why += "; " + note;
  append_lowering(out.lowering, op, ctx, "", rest);
  out.variants.push_back({"", why, rest});
  return out;
}

}  // namespace teeny
