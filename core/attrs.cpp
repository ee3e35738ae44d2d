#include "core/attrs.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace teeny {

bool Attrs::has(const std::string& name) const { return values_.contains(name) && !values_.at(name).is_null(); }

const nlohmann::json& Attrs::get(const std::string& name) const {
  if (!has(name)) throw Error(fmt::format("internal: attribute '{}' was not validated", name));
  return values_.at(name);
}

int64_t Attrs::integer(const std::string& name) const { return get(name).get<int64_t>(); }
double Attrs::real(const std::string& name) const { return get(name).get<double>(); }
bool Attrs::boolean(const std::string& name) const { return get(name).get<bool>(); }
std::string Attrs::text(const std::string& name) const { return get(name).get<std::string>(); }

std::pair<int64_t, int64_t> Attrs::pair(const std::string& name) const {
  const auto& v = get(name);
  if (v.is_array()) return {v.at(0).get<int64_t>(), v.at(1).get<int64_t>()};
  return {v.get<int64_t>(), v.get<int64_t>()};
}

std::vector<int64_t> Attrs::ints(const std::string& name) const { return get(name).get<std::vector<int64_t>>(); }

std::vector<std::vector<int64_t>> Attrs::int_lists(const std::string& name) const {
  return get(name).get<std::vector<std::vector<int64_t>>>();
}

Shape Attrs::shape(const std::string& name) const {
  Shape out;
  for (const auto& entry : get(name)) {
    if (entry.is_number_integer())
      out.push_back(Expr(entry.get<int64_t>()));
    else
      out.push_back(Expr::parse(entry.get<std::string>()));
  }
  return out;
}

std::vector<double> Attrs::reals(const std::string& name) const { return get(name).get<std::vector<double>>(); }

namespace {

// The numbers of `value` the domain applies to: the value itself, or every integer in its lists.
void collect_numbers(const nlohmann::json& value, std::vector<const nlohmann::json*>& out) {
  if (value.is_array()) {
    for (const nlohmann::json& item : value) collect_numbers(item, out);
  } else if (value.is_number()) {
    out.push_back(&value);
  }
}

std::string number_text(double number) { return fmt::format("{}", number); }

}  // namespace

std::string attr_domain_problem(const AttrSpec& spec, const nlohmann::json& value) {
  std::vector<const nlohmann::json*> numbers;
  collect_numbers(value, numbers);
  for (const nlohmann::json* item : numbers) {
    const double number = item->get<double>();
    const std::string got = ", got " + (item->is_number_float() ? number_text(number) : item->dump());
    if (!std::isfinite(number)) return "must be a finite number" + got;
    if (spec.min_value && spec.min_exclusive && !(number > *spec.min_value))
      return "must be greater than " + number_text(*spec.min_value) + got;
    if (spec.min_value && number < *spec.min_value) return "must be at least " + number_text(*spec.min_value) + got;
    if (spec.max_value && number > *spec.max_value) return "must be at most " + number_text(*spec.max_value) + got;
  }
  return "";
}

std::string attr_domain_text(const AttrSpec& spec) {
  std::vector<std::string> bounds;
  if (spec.min_value)
    bounds.push_back((spec.min_exclusive ? "greater than " : "at least ") + number_text(*spec.min_value));
  if (spec.max_value) bounds.push_back("at most " + number_text(*spec.max_value));
  return bounds.empty() ? "" : fmt::format("{}", fmt::join(bounds, " and "));
}

std::string attr_type_name(AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return "int";
    case AttrType::kFloat:
      return "float";
    case AttrType::kBool:
      return "bool";
    case AttrType::kEnum:
      return "enum";
    case AttrType::kIntPair:
      return "int or [h, w]";
    case AttrType::kIntList:
      return "list of ints";
    case AttrType::kIntListList:
      return "list of int lists";
    case AttrType::kShape:
      return "shape";
    case AttrType::kFloatList:
      return "list of floats";
  }
  return "?";
}

}  // namespace teeny
