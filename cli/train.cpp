// `teeny train BUNDLE --data NAME=FILE.npy ... --steps N`: trains a training bundle (core/trainer.h)
// on the GPU or the host reference executor, a progress line per step, checkpoints with --save and
// --resume.
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "cli/check_report.h"
#include "cli/commands.h"
#include "cli/pairs.h"
#include "cli/usage.h"
#include "core/bundle.h"
#include "core/driver.h"
#include "core/trainer.h"

namespace teeny::cli {
namespace {

struct TrainFlags {
  std::string bundle;
  std::vector<std::string> binds;
  std::string device = "gpu";
  std::vector<std::string> data;
  std::string tokens;
  TrainOptions options;
  int64_t log_every = 1;
};

// "--tokens INPUT,TARGET=FILE" into the data options.
void parse_tokens(const std::string& value, TrainDataOptions& data) {
  const size_t comma = value.find(',');
  const size_t eq = value.find('=');
  if (comma == std::string::npos || eq == std::string::npos || comma == 0 || eq < comma + 2 || eq + 1 == value.size())
    throw Error(fmt::format("malformed --tokens '{}': expected INPUT,TARGET=FILE (.npy or .bin)", value));
  data.token_input = value.substr(0, comma);
  data.token_target = value.substr(comma + 1, eq - comma - 1);
  data.tokens_path = value.substr(eq + 1);
}

std::string rate(const StepResult& step) {
  const double per_second = 1000.0 / step.ms;
  return step.tokens > 0 ? fmt::format("{:.0f} tokens/s", static_cast<double>(step.tokens) * per_second)
                         : fmt::format("{:.0f} samples/s", static_cast<double>(step.samples) * per_second);
}

// What the run did, from the steps' results: the first step (warm-up: module loads, CUDA-graph
// capture) is left out of the mean when there are others.
struct RunSummary {
  int64_t steps = 0;
  double first_loss = NAN, last_loss = NAN, total_ms = 0, later_ms = 0;
  StepResult last;

  void add(const StepResult& step) {
    if (steps++ == 0)
      first_loss = step.loss;
    else
      later_ms += step.ms;
    last_loss = step.loss;
    total_ms += step.ms;
    last = step;
  }
  std::string text() const {
    StepResult mean = last;
    mean.ms = steps > 1 ? later_ms / static_cast<double>(steps - 1) : total_ms;
    return fmt::format("trained {} step{} in {:.3f} s: {:.3f} ms per step{} ({}); loss {:.6g} -> {:.6g}\n", steps,
                       steps == 1 ? "" : "s", total_ms / 1000, mean.ms, steps > 1 ? " after the first" : "", rate(mean),
                       first_loss, last_loss);
  }
};

// The device memory a step holds (the same on the host executor): the liveness-planned arena of
// activations, saved tensors and gradients, and the params with the optimizer's state.
std::string memory_line(const BoundBundle& bound) {
  uint64_t params = 0;
  for (const BoundParam& param : bound.params) params += param.bytes;
  return fmt::format(
      "memory: activations and gradients {} planned by liveness (naive {}), parameters and optimizer state {}\n",
      cuda::format_bytes(bound.plan.arena_bytes), cuda::format_bytes(bound.plan.naive_bytes),
      cuda::format_bytes(params));
}

void train_bundle(TrainFlags& flags) {
  TrainOptions& options = flags.options;
  options.data.arrays = parse_pairs(flags.data, "--data", "NAME=FILE.npy");
  if (!flags.tokens.empty()) parse_tokens(flags.tokens, options.data);
  Bundle bundle = read_bundle(flags.bundle);
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, flags.binds), flags.bundle);
  Trainer trainer(bound, registry(), options, flags.device);
  for (const std::string& note : trainer.notes()) std::cerr << "teeny: note: " << note << "\n";

  std::vector<std::string> dims;
  for (const auto& [name, value] : bound.bindings) dims.push_back(fmt::format("{}={}", name, value));
  std::cout << fmt::format("bundle {} (graph '{}'){}: steps {} to {} on {}\n", flags.bundle, bundle.graph_name,
                           dims.empty() ? "" : ", " + fmt::format("{}", fmt::join(dims, ", ")), trainer.first_step(),
                           options.steps, flags.device == "cpu" ? "the host reference executor" : "the GPU")
            << memory_line(bound) << std::flush;
  RunSummary summary;
  trainer.run(
      [&](const StepResult& step) {
        summary.add(step);
        if (step.step % flags.log_every == 0 || step.step == options.steps)
          std::cout << fmt::format("step {}/{}  loss {:.6g}  {:.3f} ms  {}\n", step.step, options.steps, step.loss,
                                   step.ms, rate(step))
                    << std::flush;
      },
      [](const CheckReport& report) { std::cout << format_check_report(report) << std::flush; });
  std::cout << summary.text();
  if (!options.save_path.empty()) std::cout << fmt::format("saved {} (step {})\n", options.save_path, options.steps);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a training bundle (a spec with a train: section) on data");
  cmd->add_option("BUNDLE", flags->bundle, "bundle directory (from teeny compile)")->required();
  cmd->add_option("--bind", flags->binds, "bind a dim: D=N (repeatable; default: the spec's)")->allow_extra_args(false);
  cmd->add_option("--data", flags->data,
                  "a graph input's samples, along the first dim: NAME=FILE.npy (repeatable; shuffled by --seed)")
      ->allow_extra_args(false);
  cmd->add_option("--tokens", flags->tokens,
                  "token ids for a language model: INPUT,TARGET=FILE (.npy of integers, or .bin of uint16); "
                  "random windows, the targets shifted by one token");
  cmd->add_option("--steps", flags->options.steps, "train until this many steps in all (a resumed run included)")
      ->required();
  cmd->add_option("--seed", flags->options.seed, "seed for the random initial params and the batch order (default 0)");
  cmd->add_option("--weights", flags->options.weights_path,
                  "initial params, every trained one, by <node>.<slot> (.safetensors); default: random");
  cmd->add_option("--resume", flags->options.resume_path,
                  "continue from a checkpoint of this bundle (--save): params, optimizer state and step");
  cmd->add_option("--save", flags->options.save_path,
                  "write a checkpoint (.safetensors) at the end, atomically; PyTorch loads its params");
  cmd->add_option("--save-every", flags->options.save_every, "with --save: also write it every N steps");
  cmd->add_option("--device", flags->device, "gpu (default) or cpu (the host reference executor)")
      ->check(CLI::IsMember({"gpu", "cpu"}));
  cmd->add_flag("--check", flags->options.check,
                "run the first step node by node against the host reference, the updates included (exit code 2 "
                "on mismatch)");
  cmd->add_option("--log-every", flags->log_every, "a progress line every N steps (default 1) and at the last")
      ->check(positive_number());
  cmd->callback([flags] { train_bundle(*flags); });
}

}  // namespace teeny::cli
