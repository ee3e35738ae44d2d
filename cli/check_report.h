// Renders `teeny run --check`'s CheckReport (core/compare.h): the per-node table and a verdict
// naming the first diverging node.
#pragma once

#include <string>

#include "core/compare.h"

namespace teeny::cli {

std::string format_check_report(const CheckReport& report);

}  // namespace teeny::cli
