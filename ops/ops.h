// Every built-in op, from the explicit list in ops/ops.inc.
#pragma once

#include "core/registry.h"

namespace teeny::ops {

// Registers every op and graph pass listed in ops/ops.inc.
void register_all(Registry& registry);

// One declaration per op factory, from the list.
#define TEENY_OP(factory) OpDef factory();
#define TEENY_PASS(factory) GraphPass factory();
#include "ops/ops.inc"
#undef TEENY_OP
#undef TEENY_PASS

}  // namespace teeny::ops
