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
};

struct AttrSpec {
  std::string name;
  AttrType type;
  std::string doc;
  std::optional<nlohmann::json> default_value;  // absent = required (unless `optional`)
  std::vector<std::string> choices;             // kEnum only
  bool optional = false;                        // may be absent with no default (e.g. sdpa's `scale`)
  // Optional range check for kInt / kFloat: inclusive lower bound.
  std::optional<double> min_value;
};

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
  Shape shape(const std::string& name) const;  // kShape: each entry parsed as Expr

  const nlohmann::json& json() const { return values_; }

 private:
  const nlohmann::json& get(const std::string& name) const;
  nlohmann::json values_ = nlohmann::json::object();
};

std::string attr_type_name(AttrType type);  // for `teeny ops` and error messages

}  // namespace teeny
