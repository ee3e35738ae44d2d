// What a piece of code throws, as text, for exact-text tests of teeny::Error.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/error.h"

namespace teeny::testing {

// The error `body` throws, if any.
inline std::optional<Error> thrown(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// The error `body` throws, rendered as main prints it; "no error" if it throws none.
inline std::string rendered(const std::function<void()>& body) {
  const std::optional<Error> e = thrown(body);
  return e ? e->render() : "no error";
}

// The message alone of the error `body` throws; "no error" if it throws none.
inline std::string message(const std::function<void()>& body) {
  const std::optional<Error> e = thrown(body);
  return e ? e->message() : "no error";
}

}  // namespace teeny::testing
