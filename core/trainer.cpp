#include "core/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/device_batches.h"
#include "core/driver.h"
#include "core/executor.h"
#include "core/host_executor.h"

namespace teeny {
namespace {

constexpr const char* kTrainDocs = "docs/training.md describes training bundles and teeny train";

// Update nodes come last (core/autodiff.h): the index of the first, where the step's second
// phase begins.
size_t first_update_node(const Bundle& bundle) {
  for (size_t i = 0; i < bundle.nodes.size(); ++i)
    if (bundle.nodes[i].role == NodeRole::kUpdate) return i;
  return bundle.nodes.size();
}

bool all_finite(const HostTensor& values) {
  return std::all_of(values.data.begin(), values.data.end(), [](double v) { return std::isfinite(v); });
}

double scalar(const HostTensor& loss) { return loss.data.at(0); }

// ---- runners ---------------------------------------------------------------------------------

class HostStepRunner final : public StepRunner {
 public:
  HostStepRunner(const BoundBundle& bound, const Registry& registry, const RunData& data)
      : bound_(bound),
        registry_(registry),
        step_(host_step_start(bound, data)),
        first_update_(first_update_node(*bound.bundle)) {}

  void load_batch(BatchSource& batches) override {
    for (auto& [name, values] : batches.next_batch()) step_.tensors[name] = std::move(values);
  }
  double step() override {
    run_host_nodes(bound_, registry_, step_, 0, bound_.bundle->nodes.size());
    return scalar(step_.tensors.at(bound_.bundle->loss));
  }
  void finish() override {}
  CheckReport check_step(double&) override {
    throw Error("internal: the host reference executor has nothing to check against");
  }
  std::optional<std::string> first_non_finite() override {
    for (size_t i = 0; i < first_update_; ++i) {
      const std::string& name = bound_.bundle->nodes[i].name;
      if (auto it = step_.tensors.find(name); it != step_.tensors.end() && !all_finite(it->second)) return name;
    }
    return std::nullopt;
  }
  HostTensor param(const std::string& name) override { return step_.params.at(name); }
  void set_param(const std::string& name, const HostTensor& values) override { step_.params[name] = values; }

 private:
  const BoundBundle& bound_;
  const Registry& registry_;
  HostStep step_;
  size_t first_update_;
};

class GpuStepRunner final : public StepRunner {
 public:
  GpuStepRunner(BoundBundle& bound, const Registry& registry, const RunData& data)
      : bound_(bound), registry_(registry), first_update_(first_update_node(*bound.bundle)) {
    std::shared_ptr<cuda::Device> device = cuda::Device::open(cuda::Driver::get());
    bind_launches(bound, device->facts());
    executor_ = std::make_unique<GpuExecutor>(device, bound);
    executor_->upload(data);
    update_launch_ = bound.launches.size();
    for (size_t i = first_update_; i < bound.bundle->nodes.size(); ++i)
      for (size_t launch : bound.node_launches(i)) update_launch_ = std::min(update_launch_, launch);
  }

  // From a copy of the data set on the GPU where it fits (made at the first batch), else uploaded.
  void load_batch(BatchSource& batches) override {
    if (!device_batches_checked_) {
      device_batches_ = DeviceBatches::make(*executor_, batches);
      device_batches_checked_ = true;
    }
    if (device_batches_) {
      device_batches_->gather(*executor_, batches.next_rows());
      return;
    }
    for (const auto& [name, values] : batches.next_batch()) executor_->set_input(name, values);
  }
  // Each phase is captured once as a CUDA graph and replayed: its launches' arguments (buffers,
  // sizes) are the same every step; the step count the updates read lives in device memory. The
  // loss comes back by an asynchronous copy between the phases, and the updates need no word from
  // the host (a non-finite loss halts the step counter on the GPU), so the host waits only for the
  // loss, while the updates run.
  double step() override {
    const std::string& loss = bound_.bundle->loss;
    if (!staged_loss_) {
      staged_loss_ = std::make_unique<cuda::PinnedBuffer>(executor_->device(), bound_.tensor(loss).bytes, "the loss");
      loss_back_ = std::make_unique<cuda::Event>(executor_->device());
    }
    replay(forward_backward_, 0, update_launch_);
    executor_->enqueue_read(loss, *staged_loss_);
    loss_back_->record(executor_->stream());
    replay(update_, update_launch_, bound_.launches.size());
    loss_back_->synchronize(fmt::format(
        "running the previous step's update nodes, then the forward and backward nodes, of bundle {}", bound_.label));
    return scalar(executor_->staged(loss, *staged_loss_));
  }
  void finish() override { executor_->synchronize(fmt::format("running the update nodes of bundle {}", bound_.label)); }
  CheckReport check_step(double& loss) override {
    CheckReport report = check_against_reference(*executor_, registry_, {});
    loss = scalar(executor_->read(bound_.bundle->loss));
    return report;
  }
  // Node by node from the same inputs and params: the step is deterministic, so the values that
  // were not finite come back.
  std::optional<std::string> first_non_finite() override {
    const Bundle& bundle = *bound_.bundle;
    for (size_t i = 0; i < first_update_; ++i) {
      for (size_t launch : bound_.node_launches(i)) executor_->enqueue(launch);
      const std::string& name = bundle.nodes[i].name;
      executor_->synchronize(fmt::format("running node '{}' again to find the first non-finite value", name));
      if (!all_finite(executor_->read(name))) return name;
    }
    return std::nullopt;
  }
  HostTensor param(const std::string& name) override { return executor_->read_param(name); }
  void set_param(const std::string& name, const HostTensor& values) override { executor_->set_param(name, values); }

 private:
  void replay(std::unique_ptr<cuda::CudaGraph>& graph, size_t begin, size_t end) {
    if (!graph) {
      graph = cuda::CudaGraph::capture(executor_->device(), executor_->stream(),
                                       [&] { executor_->enqueue_concurrent(begin, end); });
    }
    graph->launch(executor_->stream());
  }

  BoundBundle& bound_;
  const Registry& registry_;
  size_t first_update_, update_launch_ = 0;
  std::unique_ptr<GpuExecutor> executor_;
  std::unique_ptr<cuda::CudaGraph> forward_backward_, update_;
  std::unique_ptr<cuda::PinnedBuffer> staged_loss_;
  std::unique_ptr<cuda::Event> loss_back_;  // recorded behind the loss's copy
  std::unique_ptr<DeviceBatches> device_batches_;
  bool device_batches_checked_ = false;
};

// ---- data ------------------------------------------------------------------------------------

// Every graph input must be fed, and fed once.
void check_fed_inputs(const Bundle& bundle, const TrainDataOptions& data, const std::string& label) {
  std::map<std::string, std::string> fed;  // input -> the flag feeding it
  if (data.tokens_path.empty()) {
    for (const auto& [name, path] : data.arrays) fed[name] = fmt::format("--data {}={}", name, path);
  } else {
    const std::string flag = fmt::format("--tokens {},{}={}", data.token_input, data.token_target, data.tokens_path);
    if (!data.arrays.empty())
      throw Error(flag + ": --tokens and --data cannot be combined: token data feeds a language model's two inputs");
    if (data.token_input == data.token_target)
      throw Error(flag + ": the token inputs and their targets must be two graph inputs");
    fed = {{data.token_input, flag}, {data.token_target, flag}};
  }
  for (const auto& [name, flag] : fed) {
    if (std::find(bundle.inputs.begin(), bundle.inputs.end(), name) == bundle.inputs.end())
      throw Error(
          fmt::format("{}: bundle {} has no graph input '{}'{}", flag, label, name, did_you_mean(name, bundle.inputs)))
          .note(fmt::format("its inputs: {}", fmt::join(bundle.inputs, ", ")));
  }
  std::vector<std::string> missing;
  for (const std::string& name : bundle.inputs)
    if (!fed.count(name)) missing.push_back(name);
  if (!missing.empty())
    throw Error(fmt::format("bundle {}: no data for graph input{} {}", label, missing.size() > 1 ? "s" : "",
                            fmt::join(missing, ", ")))
        .note(
            "give each input a --data NAME=FILE.npy of samples, or --tokens INPUT,TARGET=FILE for a language "
            "model's token ids");
}

std::unique_ptr<BatchSource> token_batches(const BoundBundle& bound, const TrainDataOptions& data, uint64_t seed) {
  const BoundTensor& input = bound.tensor(data.token_input);
  const BoundTensor& target = bound.tensor(data.token_target);
  const std::string flag = fmt::format("--tokens {},{}", data.token_input, data.token_target);
  for (const BoundTensor* t : {&input, &target}) {
    if (t->dtype != DType::kI32 || t->shape.size() != 2)
      throw Error(fmt::format("{}: graph input '{}' is {} [{}]; token inputs are i32 [batch, sequence]", flag, t->name,
                              dtype_name(t->dtype), fmt::join(t->shape, ", ")));
  }
  if (input.shape != target.shape)
    throw Error(fmt::format("{}: '{}' is [{}] but '{}' is [{}]; the targets are the inputs shifted by one token", flag,
                            input.name, fmt::join(input.shape, ", "), target.name, fmt::join(target.shape, ", ")));
  TokenData tokens{data.tokens_path, data.token_input, data.token_target,
                   input.shape[0],   input.shape[1],   input.id_bound};
  return std::make_unique<TokenBatches>(tokens, seed);
}

std::unique_ptr<BatchSource> array_batches(const BoundBundle& bound, const TrainDataOptions& data, uint64_t seed) {
  std::vector<ArrayInput> inputs;
  for (const auto& [name, path] : data.arrays) {
    const BoundTensor& tensor = bound.tensor(name);
    if (tensor.shape.empty())
      throw Error(fmt::format("--data {}={}: graph input '{}' is a scalar; batches are along an input's first dim",
                              name, path, name));
    inputs.push_back({name, tensor.dtype, tensor.shape, path});
  }
  return std::make_unique<ArrayBatches>(inputs, seed);
}

std::unique_ptr<BatchSource> make_batches(const BoundBundle& bound, const TrainDataOptions& data, uint64_t seed) {
  check_fed_inputs(*bound.bundle, data, bound.label);
  return data.tokens_path.empty() ? array_batches(bound, data, seed) : token_batches(bound, data, seed);
}

std::string node_description(const Bundle& bundle, const std::string& name) {
  const BundleNode& node = *bundle.find_node(name);
  switch (node.role) {
    case NodeRole::kBackward:
      return fmt::format("node '{}' ({}), of the backward of node '{}'", node.name, node.op, node.grad_of);
    case NodeRole::kUpdate:
      return fmt::format("node '{}' ({}), an update", node.name, node.op);
    case NodeRole::kForward:
      break;
  }
  return fmt::format("node '{}' ({}), in the forward pass", node.name, node.op);
}

}  // namespace

std::unique_ptr<StepRunner> make_step_runner(const std::string& device, BoundBundle& bound, const Registry& registry,
                                             const RunData& data) {
  if (device == "cpu") return std::make_unique<HostStepRunner>(bound, registry, data);
  return std::make_unique<GpuStepRunner>(bound, registry, data);
}

// ---- the state a checkpoint holds --------------------------------------------------------------

TrainState train_state(const BoundBundle& bound) {
  const Bundle& bundle = *bound.bundle;
  if (bundle.loss.empty())
    throw Error(fmt::format("bundle {} does not train: its spec has no train: section", bound.label)).note(kTrainDocs);
  TrainState state;
  std::set<std::string> update_nodes;
  for (const BundleNode& node : bundle.nodes) {
    if (node.role != NodeRole::kUpdate) continue;
    update_nodes.insert(node.name);
    const auto param = node.param_refs.find("param");
    for (const BundleParam& own : bundle.params) {
      if (own.node != node.name) continue;
      // The step counter's node updates no param of the model.
      if (param == node.param_refs.end()) {
        state.step_counter = own.name;
      } else {
        state.state[checkpoint_state_name(param->second, own.slot)] = own.name;
      }
    }
    if (param != node.param_refs.end()) state.optimizer = node.op.substr(node.op.find('.') + 1);
  }
  if (state.optimizer.empty() || state.step_counter.empty())
    throw Error(fmt::format("bundle {} computes gradients only: its train: section has no optimizer", bound.label))
        .note(kTrainDocs);
  for (const BundleParam& param : bundle.params)
    if (param.init == ParamInit::kTrained && !update_nodes.count(param.node)) state.model_params.push_back(param.name);
  return state;
}

CheckpointExpectation TrainState::expectation(const BoundBundle& bound) const {
  CheckpointExpectation expect{bound.bundle->graph_name, optimizer, {}, {}};
  auto of = [&](const std::string& name) {
    const BoundParam& param = bound.param(name);
    return TensorExpectation{param.dtype, param.shape};
  };
  for (const std::string& name : model_params) expect.params[name] = of(name);
  for (const auto& [saved, name] : state) expect.state[saved] = of(name);
  return expect;
}

// ---- the loop --------------------------------------------------------------------------------

Trainer::Trainer(BoundBundle& bound, const Registry& registry, const TrainOptions& options, const std::string& device)
    : bound_(bound), options_(options), state_(train_state(bound)) {
  if (options.steps < 1) throw Error(fmt::format("--steps must be at least 1, got {}", options.steps));
  if (options.check && device == "cpu")
    throw Error("--check compares the GPU with the host reference; it cannot be combined with --device cpu");
  if (!options.resume_path.empty() && !options.weights_path.empty())
    throw Error("--weights and --resume cannot be combined: the checkpoint holds the params");
  if (options.save_every < 0 || (options.save_every > 0 && options.save_path.empty()))
    throw Error(options.save_every < 0 ? fmt::format("--save-every must be at least 1, got {}", options.save_every)
                                       : std::string("--save-every needs --save FILE.safetensors"));
  batches_ = make_batches(bound, options.data, options.seed);

  DataOptions initial;
  initial.seed = options.seed;
  initial.weights_path = options.weights_path;
  initial.fill = ParamFill::kRandom;
  RunData data = prepare_data(bound, initial);
  // Without --weights every trained param is random, as documented: no news.
  if (!options.weights_path.empty()) notes_ = data.notes;
  if (!options.resume_path.empty()) {
    const Checkpoint checkpoint = load_checkpoint(options.resume_path, state_.expectation(bound));
    if (checkpoint.step >= options.steps)
      throw Error(fmt::format("--resume {}: the checkpoint is at step {}; --steps {} leaves nothing to train",
                              options.resume_path, checkpoint.step, options.steps));
    for (const auto& [name, values] : checkpoint.params) data.params[name] = values;
    for (const auto& [saved, name] : state_.state) data.params[name] = checkpoint.state.at(saved);
    data.params[state_.step_counter] = HostTensor{DType::kI32, {1}, {static_cast<double>(checkpoint.step)}};
    batches_->seek(checkpoint.step);
    first_step_ = checkpoint.step + 1;
  }
  done_ = first_step_ - 1;
  runner_ = make_step_runner(device, bound, registry, data);
}

Trainer::~Trainer() = default;

void Trainer::run(const std::function<void(const StepResult&)>& progress,
                  const std::function<void(const CheckReport&)>& on_check) {
  for (int64_t number = first_step_; number <= options_.steps; ++number) {
    progress(step(number, options_.check && number == first_step_, on_check));
    if (options_.save_every > 0 && number % options_.save_every == 0 && number < options_.steps)
      save(options_.save_path);
  }
  runner_->finish();
  if (!options_.save_path.empty()) save(options_.save_path);
}

StepResult Trainer::step(int64_t number, bool check, const std::function<void(const CheckReport&)>& on_check) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t batch_step = batches_->step();
  runner_->load_batch(*batches_);
  StepResult result;
  result.step = number;
  if (check) {
    const CheckReport report = runner_->check_step(result.loss);
    on_check(report);
    if (!report.ok())
      throw Error(fmt::format("--check: step {} differs from the host reference", number), ExitCode::kCheckMismatch);
  } else {
    result.loss = runner_->step();
    if (!std::isfinite(result.loss)) fail_non_finite(number, result.loss, batches_->batch(batch_step));
  }
  result.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  result.samples = batches_->batch_size();
  result.tokens = result.samples * batches_->tokens_per_sample();
  done_ = number;
  return result;
}

void Trainer::fail_non_finite(int64_t number, double loss, const std::map<std::string, HostTensor>& batch) {
  Error error(fmt::format("step {}: the loss is {}; the run stops, the step's updates skipped", number, loss));
  for (const auto& [name, values] : batch)
    if (!all_finite(values)) throw error.note(fmt::format("the batch's input '{}' holds a NaN or an infinity", name));
  const std::optional<std::string> node = runner_->first_non_finite();
  error.note(node ? "the first non-finite value is the output of " + node_description(*bound_.bundle, *node)
                  : std::string("no node's output is non-finite when the step runs again node by node"));
  throw error;
}

void Trainer::save(const std::string& path) const {
  runner_->finish();
  Checkpoint checkpoint;
  checkpoint.step = done_;
  checkpoint.graph = bound_.bundle->graph_name;
  checkpoint.optimizer = state_.optimizer;
  for (const std::string& name : state_.model_params) checkpoint.params[name] = runner_->param(name);
  for (const auto& [saved, name] : state_.state) checkpoint.state[saved] = runner_->param(name);
  save_checkpoint(path, checkpoint);
}

}  // namespace teeny
