// `teeny train`'s loop (docs/training.md, "teeny train"): a training bundle (one compiled from a
// spec with a `train:` section and an optimizer) run step after step on batches of data, on the
// GPU or on the host reference executor, with checkpoints to save and resume.
//
// A step runs in two phases: the forward and backward nodes, then, once the loss read back is
// finite, the update nodes. A non-finite loss therefore stops the run with the params as they
// were before the step, and the step is run again node by node to name the first node whose
// output is not finite.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/binding.h"
#include "core/checkpoint.h"
#include "core/compare.h"
#include "core/registry.h"
#include "core/run_data.h"
#include "core/train_data.h"

namespace teeny {

// Where the batches come from: one .npy file of samples per graph input, or a token file feeding
// two i32 [batch, sequence] inputs (the second the first shifted by one token).
struct TrainDataOptions {
  std::map<std::string, std::string> arrays;  // graph input -> .npy
  std::string tokens_path;                    // .npy or .bin (core/train_data.h)
  std::string token_input, token_target;      // the graph inputs the tokens feed
};

struct TrainOptions {
  TrainDataOptions data;
  int64_t steps = 0;         // train until this many steps in all (a resumed run counts its checkpoint's)
  uint64_t seed = 0;         // random initial params and the batch order
  std::string weights_path;  // initial params (.safetensors); empty: random
  std::string resume_path;   // a checkpoint: params, optimizer state and step
  std::string save_path;     // the checkpoint written at the end (and every save_every steps)
  int64_t save_every = 0;
  bool check = false;  // GPU: the run's first step node by node against the host reference
};

// One step's outcome, for the progress line.
struct StepResult {
  int64_t step = 0;  // 1-based, counting a resumed run's earlier steps
  double loss = 0;
  double ms = 0;                    // wall time of the step: the batch's upload to the update's end
  int64_t samples = 0, tokens = 0;  // in the batch (tokens: token data only)
};

// What a step runs on: the GPU executor or the host reference executor.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // Feeds the graph inputs the next batch of `batches`.
  virtual void load_batch(BatchSource& batches) = 0;
  // The forward, backward and update nodes; returns the loss. The update nodes change nothing
  // where the loss is not finite (the step counter halts: ops/train_step.cpp), so the params stay
  // the step before's. The GPU runner returns once the loss is back and leaves the updates
  // running: the next step's batch is prepared on the host meanwhile; finish() waits for them.
  virtual double step() = 0;
  virtual void finish() = 0;
  // The step (forward, backward, update) node by node against the host reference; returns the
  // report and sets `loss`. Only the GPU runner checks.
  virtual CheckReport check_step(double& loss) = 0;
  // After a step whose loss is not finite: the first node, in execution order, whose
  // output holds a NaN or an infinity.
  virtual std::optional<std::string> first_non_finite() = 0;
  virtual HostTensor param(const std::string& name) = 0;
  virtual void set_param(const std::string& name, const HostTensor& values) = 0;
};

// `device`: "gpu" or "cpu". `bound`: bound for the device's facts when "gpu".
std::unique_ptr<StepRunner> make_step_runner(const std::string& device, BoundBundle& bound, const Registry& registry,
                                             const RunData& data);

// What a training bundle's checkpoint holds (core/checkpoint.h): its trained params under their
// names, each optimizer state param under "optimizer.<param>.<slot>", and the step counter.
struct TrainState {
  std::string optimizer;                     // "sgd", "adamw"
  std::vector<std::string> model_params;     // trained params, bundle order
  std::map<std::string, std::string> state;  // checkpoint name -> bundle param
  std::string step_counter;                  // the bundle param counting the steps
  CheckpointExpectation expectation(const BoundBundle& bound) const;
};
// Throws Error when the bundle is not a training bundle with an optimizer.
TrainState train_state(const BoundBundle& bound);

class Trainer {
 public:
  // Checks the options against the bundle (every graph input fed once, the data files' shapes),
  // prepares the initial params and, with resume_path, loads the checkpoint. Throws Error.
  Trainer(BoundBundle& bound, const Registry& registry, const TrainOptions& options, const std::string& device);
  ~Trainer();

  int64_t first_step() const { return first_step_; }  // 1-based: the step the run starts at
  const std::vector<std::string>& notes() const { return notes_; }

  // Runs the steps, calling `progress` after each; `on_check` gets the first step's report with
  // --check (a mismatch stops the run with ExitCode::kCheckMismatch). Throws Error on a non-finite
  // loss, naming the step and the batch's non-finite input or else the first non-finite node.
  void run(const std::function<void(const StepResult&)>& progress,
           const std::function<void(const CheckReport&)>& on_check);

  // Writes the run's current params, optimizer state and step to `path` (atomically).
  void save(const std::string& path) const;

 private:
  StepResult step(int64_t number, bool check, const std::function<void(const CheckReport&)>& on_check);
  [[noreturn]] void fail_non_finite(int64_t number, double loss, const std::map<std::string, HostTensor>& batch);

  BoundBundle& bound_;
  TrainOptions options_;
  TrainState state_;
  std::unique_ptr<BatchSource> batches_;
  std::unique_ptr<StepRunner> runner_;
  int64_t first_step_ = 1, done_ = 0;
  std::vector<std::string> notes_;
};

}  // namespace teeny
