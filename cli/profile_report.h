// Renders a ProfileReport: a table for people, JSON and CSV for tools. Every output names
// the timing method, so numbers measured with the CUDA-event fallback are never mistaken
// for CUPTI's.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/profiler.h"

namespace teeny::cli {

std::string format_profile_table(const ProfileReport& report);
// Field names carry units: median_us, gbps, gflops, share_pct, ...
nlohmann::json profile_json(const ProfileReport& report);
// One header row, then one row per launch per run.
std::string format_profile_csv(const ProfileReport& report);

// A profile_json document read back (for `teeny compare`): what identifies each run and launch,
// the samples, and statistics recomputed from them. Errors name `path` and the field.
ProfileReport read_profile_json(const std::string& path);

}  // namespace teeny::cli
