// Op attributes: a typed schema per op, and validated values stored as JSON
// (so the manifest can carry them verbatim and any teeny binary can re-read them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expr.h"

namespace teeny {

enum class AttrType {
  kInt,    // 64-bit integer
  kFloat,  // double; integers are accepted
  kBool,
  kEnum,         // a string from `choices`
  kIntPair,      // an int n (stored as [n, n]) or a list [h, w]
  kIntList,      // [i, j, ...]
  kIntListList,  // [[a, b, c], ...]
  kShape,        // a list of ints, dim names or expression strings; stored as strings
  kFloatList,    // [a, b, ...]: numbers (integers accepted), stored as doubles
};

struct AttrSpec {
  std::string name;
  AttrType type;
  std::string doc;
  std::optional<nlohmann::json> default_value;  // absent = required (unless `optional`)
  std::vector<std::string> choices;             // kEnum only
  bool optional = false;                        // may be absent with no default (e.g. sdpa's `scale`)
  // The domain of a kInt or kFloat value and of each integer of a kIntPair, kIntList or
  // kIntListList (attr_domain_problem); a kFloat is also finite.
  std::optional<double> min_value{};  // lower bound, inclusive unless min_exclusive
  bool min_exclusive = false;         // min_value itself is out of the domain (eps > 0)
  std::optional<double> max_value{};  // upper bound, inclusive
};

// What is outside the domain of `spec` in `value` (already of the attr's type), as "must be at
// least 1, got 0", or "" where all of it is inside.
std::string attr_domain_problem(const AttrSpec& spec, const nlohmann::json& value);
// The domain as `teeny ops` shows it: "at least 1", "greater than 0", "at least 0 and at most
// 65536", or "".
std::string attr_domain_text(const AttrSpec& spec);

// Validated attribute values (defaults filled in). Accessors throw teeny::Error if the
// name is not in the op's schema — that is a bug in the op, not in the user's spec.
class Attrs {
 public:
  Attrs() = default;
  explicit Attrs(nlohmann::json values) : values_(std::move(values)) {}

  bool has(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  bool boolean(const std::string& name) const;
  std::string text(const std::string& name) const;
  std::pair<int64_t, int64_t> pair(const std::string& name) const;
  std::vector<int64_t> ints(const std::string& name) const;
  std::vector<std::vector<int64_t>> int_lists(const std::string& name) const;
  Shape shape(const std::string& name) const;                // kShape: each entry parsed as Expr
  std::vector<double> reals(const std::string& name) const;  // kFloatList

  const nlohmann::json& json() const { return values_; }

 private:
  const nlohmann::json& get(const std::string& name) const;
  nlohmann::json values_ = nlohmann::json::object();
};

std::string attr_type_name(AttrType type);  // for `teeny ops` and error messages

}  // namespace teeny
