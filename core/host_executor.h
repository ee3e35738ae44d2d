// The host reference executor: runs a bound bundle on the CPU with each op's OpDef::reference
// (double-precision accumulation, outputs rounded to their dtype). Used by `teeny run --device
// cpu`, by `--check` (one node at a time, on the GPU's own inputs) and by tests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/binding.h"
#include "core/registry.h"
#include "core/run_data.h"

namespace teeny {

// The reference output of node `node_index` for concrete `inputs` (in the node's input order)
// and the run's params (by name). Throws Error when the registry lacks the op or the reference
// returns the wrong shape.
HostTensor reference_node(const BoundBundle& bound, const Registry& registry, size_t node_index,
                          const std::vector<HostTensor>& inputs, const std::map<std::string, HostTensor>& params);

// The reference of node `node_index` at the output rows `rows` (all dims but the last, flattened)
// alone, for an op whose OpTuning::row_inputs name the inputs those rows come from (the op's
// reference sees just those inputs' rows) or whose reference computes given rows
// (OpTuning::reference_rows), so checking a few rows costs a few rows' arithmetic.
// Returns [rows.size(), the output's last dim].
HostTensor reference_rows(const BoundBundle& bound, const Registry& registry, size_t node_index,
                          const std::vector<HostTensor>& inputs, const std::map<std::string, HostTensor>& params,
                          const std::vector<int64_t>& rows);

// `tensor`'s rows `rows` (all dims but the last, flattened): [rows.size(), last dim].
HostTensor select_rows(const HostTensor& tensor, const std::vector<int64_t>& rows);

// The new values of the params that update node `node_index` (an optimizer step) writes, by
// param name, rounded to their dtypes, for its concrete `inputs` and the run's params.
std::map<std::string, HostTensor> reference_update(const BoundBundle& bound, const Registry& registry,
                                                   size_t node_index, const std::vector<HostTensor>& inputs,
                                                   const std::map<std::string, HostTensor>& params);

// One pass over the nodes in order: every tensor's value (graph inputs included) and every
// param's after the update nodes (a training step's) have written theirs.
struct HostStep {
  std::map<std::string, HostTensor> tensors, params;
};
HostStep run_host_step(const BoundBundle& bound, const Registry& registry, const RunData& data);

// The pieces of run_host_step, for running a step in phases (teeny train: forward and backward,
// then the updates): the state before any node ran, and nodes [begin, end) run on it in order.
HostStep host_step_start(const BoundBundle& bound, const RunData& data);
void run_host_nodes(const BoundBundle& bound, const Registry& registry, HostStep& step, size_t begin, size_t end);

// run_host_step's tensors.
std::map<std::string, HostTensor> run_host(const BoundBundle& bound, const Registry& registry, const RunData& data);

}  // namespace teeny
