// --trace: the profiled kernels in the Chrome trace event format (opens in Perfetto and
// chrome://tracing). One process per profiled binding, one track per CUDA stream, one slice
// per kernel execution with its node, launch, iteration, grid, block and registers.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/profiler.h"

namespace teeny::cli {

nlohmann::json chrome_trace(const ProfileReport& report);
// Writes chrome_trace(report) to `path` atomically (core/atomic_file.h). Throws Error naming
// the path.
void write_chrome_trace(const ProfileReport& report, const std::string& path);

}  // namespace teeny::cli
