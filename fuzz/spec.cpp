// Fuzz target: the spec parser and checker, as `teeny check` and `teeny compile` run them.
// Input: a spec file (YAML). load_graph with the built-in ops, then what check and compile do
// before lowering: every shape bound at the dims' defaults (each extent must be at least 1), every
// node's params, the graph passes.
// teeny::Error is the expected outcome for a bad spec; any other exception, a bound extent below 1,
// a crash, leak or sanitizer report is a finding.
//   build-clang/fuzz/fuzz_spec -dict=fuzz/spec.dict fuzz/corpus/spec
#include <cstddef>
#include <cstdint>

#include "core/graph.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace teeny;
  static fuzz::InputFile file;
  try {
    Graph graph = load_graph(file.write(data, size), fuzz::registry());
    for (const auto& [name, shape] : bind_shapes(graph, bind_dims(graph.dims, {}))) {
      for (int64_t extent : shape)
        if (extent < 1) fuzz::property_failed("tensor '" + name + "' is bound to " + shape_text(shape));
    }
    for (const Node& node : graph.nodes)
      if (node.op->params) node.op->params(node.ctx);
    for (const GraphPass& pass : fuzz::registry().passes()) pass.apply(graph, fuzz::registry());
  } catch (const Error&) {
  }
  return 0;
}
