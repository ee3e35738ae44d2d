// teeny inspect: a bundle's nodes, kernels, argument layouts, grids, params and costs,
// with every expression shown both symbolically and evaluated under the given bindings.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/bundle.h"

namespace teeny {

// The inspection as data (what `--format json` prints and the table is rendered from):
// {graph, arch, versions, options, bindings, fixed, summary, nodes: [{name, op, inputs,
// output, params, launches: [{kernel, entry, block, grid, args, cost, ...}]}]}.
// `node` restricts it to one node (an unknown name is an error with a suggestion).
// An expression that cannot be evaluated shows its error instead of a value.
nlohmann::json inspect_bundle(const Bundle& bundle, const Bindings& bindings,
                              const std::optional<std::string>& node = std::nullopt);

// The PTX of kernel `name`, or of every kernel launched by node `name` (each preceded by a
// `// kernel <name> (entry <entry>)` line when there are several).
std::string bundle_ptx(const Bundle& bundle, const std::string& name);

}  // namespace teeny
