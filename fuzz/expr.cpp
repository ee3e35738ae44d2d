// Fuzz target: shape expressions (core/expr.h), as specs and manifests write them.
// Input: an expression on the first line, then optional "NAME=VALUE" lines binding its dims
// (values below 1 are raised to 1, as dims are; names not given, device symbols too, are bound to 7).
// Beyond not crashing, it checks what the rest of teeny relies on:
//   - str() re-parses to an equal expression: Expr::parse(e.str()) == e;
//   - folding agrees with evaluation: where e.eval(b) succeeds, e.substitute(b) is that constant
//     and e.substitute(part of b).eval(b) is that value.
// teeny::Error (a syntax error, an unbound name, division by zero, overflow) is an expected
// outcome; any other exception, a broken property, a crash or a sanitizer report is a finding.
//   build-clang/fuzz/fuzz_expr -dict=fuzz/expr.dict fuzz/corpus/expr
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/expr.h"
#include "fuzz/fuzz_util.h"

namespace {

using teeny::Bindings;
using teeny::Expr;

constexpr int64_t kUnnamedValue = 7;

Bindings parse_bindings(std::istream& lines, const Expr& expr) {
  Bindings given;
  for (std::string line; std::getline(lines, line);) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    int64_t value = std::strtoll(line.c_str() + eq + 1, nullptr, 10);  // saturates
    given[line.substr(0, eq)] = value < 1 ? 1 : value;
  }
  Bindings bindings;
  for (const std::string& name : expr.dims()) {
    auto it = given.find(name);
    bindings[name] = it == given.end() ? kUnnamedValue : it->second;
  }
  return bindings;
}

// Every other name of `bindings`, for a partial substitution.
Bindings half_of(const Bindings& bindings) {
  Bindings half;
  bool take = true;
  for (const auto& binding : bindings) {
    if (take) half.insert(binding);
    take = !take;
  }
  return half;
}

void check_round_trip(const Expr& expr) {
  Expr again;
  try {
    again = Expr::parse(expr.str());
  } catch (const teeny::Error& e) {
    teeny::fuzz::property_failed("str() '" + expr.str() + "' does not re-parse: " + e.message());
  }
  if (again != expr) {
    teeny::fuzz::property_failed("str() '" + expr.str() + "' re-parses to a different expression '" + again.str() +
                                 "'");
  }
}

void check_folding(const Expr& expr, const Bindings& bindings) {
  int64_t value = 0;
  try {
    value = expr.eval(bindings);
  } catch (const teeny::Error&) {
    return;  // nothing to compare with
  }
  const std::string where = "'" + expr.str() + "' under " + teeny::bindings_text(bindings);
  std::optional<int64_t> folded = expr.substitute(bindings).const_value();
  if (folded != value) {
    teeny::fuzz::property_failed(where + ": eval gives " + std::to_string(value) + ", substitute gives '" +
                                 expr.substitute(bindings).str() + "'");
  }
  int64_t partial = expr.substitute(half_of(bindings)).eval(bindings);
  if (partial != value) {
    teeny::fuzz::property_failed(where + ": eval gives " + std::to_string(value) + ", after a partial substitute " +
                                 std::to_string(partial));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  std::string text;
  std::getline(lines, text);
  try {
    Expr expr = Expr::parse(text);
    check_round_trip(expr);
    check_folding(expr, parse_bindings(lines, expr));
  } catch (const teeny::Error&) {
  }
  return 0;
}
