#include "core/json_field.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace teeny {

void JsonField::fail(const std::string& problem) const {
  throw Error(fmt::format("{}: {}: {}", document_, path_.empty() ? "top level" : path_, problem));
}

JsonField JsonField::operator[](const char* key) const {
  if (!value_.is_object()) fail(fmt::format("expected an object, found {}", value_.type_name()));
  auto it = value_.find(key);
  if (it == value_.end()) fail(fmt::format("missing key '{}'", key));
  return JsonField(*it, document_, path_.empty() ? key : path_ + "." + key);
}

std::vector<JsonField> JsonField::items() const {
  if (!value_.is_array()) fail(fmt::format("expected an array, found {}", value_.type_name()));
  std::vector<JsonField> out;
  for (size_t i = 0; i < value_.size(); ++i) out.emplace_back(value_[i], document_, fmt::format("{}[{}]", path_, i));
  return out;
}

std::string JsonField::str() const {
  if (!value_.is_string()) fail(fmt::format("expected a string, found {}", value_.type_name()));
  return value_.get<std::string>();
}

bool JsonField::boolean() const {
  if (!value_.is_boolean()) fail(fmt::format("expected true or false, found {}", excerpt(value_.dump())));
  return value_.get<bool>();
}

int64_t JsonField::integer() const {
  if (!value_.is_number_integer()) fail(fmt::format("expected an integer, found {}", excerpt(value_.dump())));
  if (value_.is_number_unsigned() && value_.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
    fail(fmt::format("{} is out of range", value_.dump()));
  }
  return value_.get<int64_t>();
}

double JsonField::number() const {
  if (value_.is_number()) return value_.get<double>();
  if (value_.is_string()) {
    const std::string s = value_.get<std::string>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  fail(fmt::format("expected a number, found {}", excerpt(value_.dump())));
}

std::vector<std::string> JsonField::strings() const {
  std::vector<std::string> out;
  for (const JsonField& item : items()) out.push_back(item.str());
  return out;
}

std::vector<double> JsonField::numbers() const {
  if (!value_.is_array()) fail(fmt::format("expected an array, found {}", value_.type_name()));
  std::vector<double> out;
  out.reserve(value_.size());
  for (size_t i = 0; i < value_.size(); ++i) {
    const nlohmann::json& item = value_[i];
    out.push_back(item.is_number() ? item.get<double>()
                                   : JsonField(item, document_, fmt::format("{}[{}]", path_, i)).number());
  }
  return out;
}

}  // namespace teeny
