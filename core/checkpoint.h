// Training checkpoints (docs/training.md, "Checkpoints"): one safetensors file holding
//   - the model's params under their graph names "<node>.<slot>", with no prefix, so that PyTorch
//     reads them as a state dict (dropping the "optimizer." entries first);
//   - the optimizer's state under "optimizer.<param>.<state>" (exp_avg, exp_avg_sq,
//     momentum_buffer, master for f32 master weights, ...);
//   - "__metadata__": format "teeny-checkpoint", version "1", step, graph and optimizer.
// A resume checks every tensor's name, dtype and shape against what the graph trains, so a
// checkpoint of another graph or optimizer is refused before any of it is used.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/op.h"

namespace teeny {

struct Checkpoint {
  int64_t step = 0;                          // optimizer steps taken: a resume takes batch `step` (0-based) next
  std::string graph;                         // the spec's name
  std::string optimizer;                     // "sgd", "adamw"
  std::map<std::string, HostTensor> params;  // by param name
  std::map<std::string, HostTensor> state;   // by checkpoint_state_name()
};

// "optimizer.<param>.<state>": the file's name of one param's optimizer state.
std::string checkpoint_state_name(const std::string& param, const std::string& state);

struct TensorExpectation {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

// What the resuming run trains: every tensor the checkpoint must hold, and nothing else.
struct CheckpointExpectation {
  std::string graph, optimizer;
  std::map<std::string, TensorExpectation> params;  // by param name
  std::map<std::string, TensorExpectation> state;   // by checkpoint_state_name()
};

// Writes `checkpoint` to `path` atomically: a failed save leaves the previous file as it was.
// Throws Error for a negative step, a state name outside "optimizer.", a name that is both a param
// and a state, or a failed write.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Reads a checkpoint and checks it against `expect`. Throws Error naming the file and what
// differs: not a teeny checkpoint (a plain weights file: use --weights), its version, a bad step,
// another graph or optimizer, and every missing, mismatched (dtype or shape) and extra tensor.
Checkpoint load_checkpoint(const std::string& path, const CheckpointExpectation& expect);

}  // namespace teeny
