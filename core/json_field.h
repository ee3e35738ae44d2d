// Reading a JSON document teeny was given (a bundle manifest, a profile for `teeny compare`)
// with the path of every value in errors: "<document>: runs[0].launches[2].node: expected a
// string, found number".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace teeny {

class JsonField {
 public:
  // `document` names the file in errors; `path` is this value's path in it ("" at the top).
  JsonField(const nlohmann::json& value, std::string document, std::string path = "")
      : value_(value), document_(std::move(document)), path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& problem) const;

  const nlohmann::json& value() const { return value_; }
  bool has(const char* key) const { return value_.is_object() && value_.contains(key); }
  JsonField operator[](const char* key) const;
  std::vector<JsonField> items() const;

  std::string str() const;
  bool boolean() const;
  int64_t integer() const;
  double number() const;  // also "nan", "inf" and "-inf", as teeny writes non-finite values
  std::vector<std::string> strings() const;
  std::vector<double> numbers() const;

 private:
  const nlohmann::json& value_;
  std::string document_, path_;
};

}  // namespace teeny
