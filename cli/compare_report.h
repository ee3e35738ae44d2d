// Renders a Comparison (core/perf_compare.h): a table per run and a summary line for people,
// JSON for tools.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/perf_compare.h"

namespace teeny::cli {

std::string format_compare_table(const Comparison& comparison);
nlohmann::json compare_json(const Comparison& comparison);

// "B is 12.3% faster than A end to end at B=64 (B/A 0.877, 95% CI 0.871-0.883)".
std::string end_to_end_sentence(const Comparison& comparison, const RunComparison& run);
// The whole comparison in a word: "faster", "slower", "no difference" or "mixed".
std::string overall_verdict(const Comparison& comparison);

}  // namespace teeny::cli
