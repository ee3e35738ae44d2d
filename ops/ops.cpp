#include "ops/ops.h"

#include "ops/kernel_headers.h"

namespace teeny::ops {

void register_all(Registry& registry) {
#define TEENY_OP(factory) registry.add(factory());
#define TEENY_PASS(factory) registry.add_pass(factory());
#include "ops/ops.inc"
#undef TEENY_OP
#undef TEENY_PASS
  for (const KernelHeader& header : embedded_kernel_headers()) registry.add_kernel_header(header);
}

}  // namespace teeny::ops
