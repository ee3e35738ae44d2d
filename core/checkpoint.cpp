#include "core/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/expr.h"
#include "core/safetensors.h"

namespace teeny {

namespace {

constexpr char kFormat[] = "teeny-checkpoint";
constexpr char kVersion[] = "1";
constexpr char kStatePrefix[] = "optimizer.";

std::string describe(DType dtype, const std::vector<int64_t>& shape) {
  return fmt::format("{} {}", dtype_name(dtype), shape_text(shape));
}

// At most ten of `items`, then how many more: a checkpoint of a much larger graph still makes a
// short message.
std::string some_of(const std::vector<std::string>& items) {
  constexpr size_t kShown = 10;
  const std::vector<std::string> shown(items.begin(), items.begin() + std::min(items.size(), kShown));
  std::string text = fmt::format("{}", fmt::join(shown, ", "));
  if (items.size() > kShown) text += fmt::format(", and {} more", items.size() - kShown);
  return text;
}

const std::string& metadata_value(const std::string& path, const std::map<std::string, std::string>& metadata,
                                  const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) throw Error(fmt::format("{}: the checkpoint's metadata has no \"{}\"", path, key));
  return it->second;
}

// A plain weights file (PyTorch's save_file, `teeny run --weights`) has no teeny metadata.
void check_format(const std::string& path, const std::map<std::string, std::string>& metadata) {
  auto format = metadata.find("format");
  if (format == metadata.end() || format->second != kFormat) {
    const std::string why = format == metadata.end()
                                ? std::string("its metadata has no \"format\": \"teeny-checkpoint\"")
                                : fmt::format("its metadata says format '{}'", excerpt(format->second));
    throw Error(fmt::format("{}: not a teeny checkpoint: {}", path, why))
        .note(fmt::format("to start training from the weights in it, use --weights {}", path));
  }
  const std::string& version = metadata_value(path, metadata, "version");
  if (version != kVersion) {
    throw Error(fmt::format("{}: teeny checkpoint version '{}' is not supported (this teeny reads version {})", path,
                            excerpt(version), kVersion));
  }
}

int64_t parse_step(const std::string& path, const std::string& text) {
  int64_t step = -1;
  const bool digits = !text.empty() && std::all_of(text.begin(), text.end(),
                                                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (digits) {
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), step);
    if (error != std::errc() || end != text.data() + text.size()) step = -1;
  }
  if (step < 0) {
    throw Error(fmt::format("{}: bad step '{}' in the checkpoint's metadata (expected a count of steps, 0 or more)",
                            path, excerpt(text)));
  }
  return step;
}

// Every tensor of the file against the expected params and state, all problems in one message.
void check_tensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                   const CheckpointExpectation& expect) {
  std::vector<std::string> missing, mismatched, extra;
  std::map<std::string, const TensorExpectation*> expected;
  for (const auto* group : {&expect.params, &expect.state}) {
    for (const auto& [name, tensor] : *group) expected[name] = &tensor;
  }
  for (const SafetensorsEntry& entry : entries) {
    auto it = expected.find(entry.name);
    if (it == expected.end()) {
      extra.push_back(fmt::format("'{}'", excerpt(entry.name)));
      continue;
    }
    const TensorExpectation& want = *it->second;
    if (entry.tensor.dtype != want.dtype || entry.shape != want.shape) {
      mismatched.push_back(fmt::format("'{}' is {}, expected {}", entry.name, describe(entry.tensor.dtype, entry.shape),
                                       describe(want.dtype, want.shape)));
    }
    expected.erase(it);
  }
  for (const auto* group : {&expect.params, &expect.state}) {
    for (const auto& [name, tensor] : *group) {
      if (expected.count(name)) missing.push_back(fmt::format("{} {}", name, describe(tensor.dtype, tensor.shape)));
    }
  }
  if (missing.empty() && mismatched.empty() && extra.empty()) return;
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back("missing " + some_of(missing));
  if (!mismatched.empty()) problems.push_back("mismatched " + some_of(mismatched));
  if (!extra.empty()) problems.push_back("not trained by the graph " + some_of(extra));
  throw Error(
      fmt::format("{}: the checkpoint does not match graph '{}': {}", path, expect.graph, fmt::join(problems, "; ")));
}

}  // namespace

std::string checkpoint_state_name(const std::string& param, const std::string& state) {
  return fmt::format("{}{}.{}", kStatePrefix, param, state);
}

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  if (checkpoint.step < 0) throw Error(fmt::format("writing {}: step {} is negative", path, checkpoint.step));
  std::map<std::string, HostTensor> tensors = checkpoint.params;
  for (const auto& [name, tensor] : checkpoint.state) {
    if (name.rfind(kStatePrefix, 0) != 0) {
      throw Error(fmt::format("writing {}: optimizer state '{}' is not named optimizer.<param>.<state>", path, name));
    }
    if (!tensors.emplace(name, tensor).second) {
      throw Error(fmt::format("writing {}: '{}' is both a param and optimizer state", path, name));
    }
  }
  write_safetensors(path, tensors,
                    {{"format", kFormat},
                     {"version", kVersion},
                     {"step", std::to_string(checkpoint.step)},
                     {"graph", checkpoint.graph},
                     {"optimizer", checkpoint.optimizer}});
}

Checkpoint load_checkpoint(const std::string& path, const CheckpointExpectation& expect) {
  SafetensorsFile file = read_safetensors_file(path);
  check_format(path, file.metadata);
  Checkpoint checkpoint;
  checkpoint.step = parse_step(path, metadata_value(path, file.metadata, "step"));
  checkpoint.graph = metadata_value(path, file.metadata, "graph");
  checkpoint.optimizer = metadata_value(path, file.metadata, "optimizer");
  if (checkpoint.graph != expect.graph) {
    throw Error(
        fmt::format("{}: the checkpoint is of graph '{}', not '{}'", path, excerpt(checkpoint.graph), expect.graph));
  }
  if (checkpoint.optimizer != expect.optimizer) {
    throw Error(fmt::format("{}: the checkpoint's optimizer is '{}', but graph '{}' trains with '{}'", path,
                            excerpt(checkpoint.optimizer), expect.graph, expect.optimizer));
  }
  check_tensors(path, file.entries, expect);
  for (SafetensorsEntry& entry : file.entries) {
    auto& group = expect.params.count(entry.name) ? checkpoint.params : checkpoint.state;
    group[entry.name] = std::move(entry.tensor);
  }
  return checkpoint;
}

}  // namespace teeny
