#include "core/autodiff.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

namespace teeny {

// The ops a training graph's update pass is built from (registered in ops/optim.cpp).
inline constexpr const char* kStepOp = "train.step";
inline constexpr const char* kClipOp = "train.clip_grad_norm";
inline constexpr const char* kAddOp = "add";

class Differentiator {
 public:
  Differentiator(Graph& graph, const Registry& registry) : graph_(graph), registry_(registry), train_(*graph.train) {
    for (const GraphInput& input : graph_.inputs) {
      types_.emplace(input.name, input.type);
      taken_.insert(input.name);
    }
    for (const Node& node : graph_.nodes) {
      types_.emplace(node.name, node.ctx.output);
      taken_.insert(node.name);
    }
  }

  void run() {
    apply_train_modes();
    collect_trained();
    const std::vector<bool> active = active_nodes();
    for (size_t k = graph_.nodes.size(); k-- > 0;)
      if (active[k]) differentiate(k);
    check_listed_params_reach_loss();
    add_input_gradients();
    add_updates();
    for (Node& node : added_) graph_.nodes.push_back(std::move(node));
  }

  // An update a forward node's training mode asked for (TrainModeBuilder::add_update).
  struct ModeUpdate {
    size_t origin;  // the forward node's index
    std::string op;
    std::vector<std::string> inputs;
    nlohmann::json attrs;
    std::map<std::string, std::string> param_refs;
  };
  void request_update(const Node& origin, ModeUpdate update) {
    update.origin = static_cast<size_t>(&origin - graph_.nodes.data());
    mode_updates_.push_back(std::move(update));
  }

  // Sets a forward node's attr in training mode, inferring its type again.
  void set_attr(Node& node, const std::string& name, nlohmann::json value) {
    nlohmann::json attrs = node.ctx.attrs.json();
    attrs[name] = std::move(value);
    node.ctx.attrs = Attrs(std::move(attrs));
    node.ctx.output = node.op->infer(node.ctx);
    types_[node.name] = node.ctx.output;
  }

  const TensorType& type(const std::string& tensor) const {
    auto it = types_.find(tensor);
    if (it == types_.end()) throw Error(fmt::format("internal: backward rule names unknown tensor '{}'", tensor));
    return it->second;
  }

  // A new node computed from `origin`'s rule (or for its update); errors point at `origin`.
  std::string add_node(const Node& origin, NodeRole role, const std::string& grad_of, const std::string& base,
                       const std::string& op_name, std::vector<std::string> inputs, nlohmann::json attrs,
                       std::map<std::string, std::string> param_refs) {
    const OpDef* op = registry_.find(op_name);
    if (!op) throw Error(fmt::format("internal: training needs op '{}', which is not registered", op_name));
    Node node;
    node.name = unique_name(base);
    node.op = op;
    node.pos = origin.pos;
    node.role = role;
    node.grad_of = grad_of;
    node.param_refs = std::move(param_refs);
    node.ctx.node = node.name;
    node.ctx.target_sm = origin.ctx.target_sm;
    for (const std::string& input : inputs) node.ctx.inputs.push_back(type(input));
    node.inputs = std::move(inputs);
    node.ctx.attrs = Attrs(with_defaults(*op, std::move(attrs)));
    try {
      node.ctx.output = op->infer(node.ctx);
      check_sizes(node.ctx.output, op->params ? op->params(node.ctx) : std::vector<ParamSpec>{});
    } catch (const Error& e) {
      // An optimizer's hyper-parameters are the train section's: its errors are there, and they
      // name their keys in full ("optimizer.lr").
      if (op == train_.optimizer) throw at(train_.optimizer_pos, "train: " + e.message());
      throw graph_.error_at(
          origin, "op",
          fmt::format("{} of it, node '{}' (op '{}'): {}", node_role_name(role), node.name, op_name, e.message()));
    }
    types_.emplace(node.name, node.ctx.output);
    const std::string name = node.name;
    added_.push_back(std::move(node));
    return name;
  }

 private:
  // ---- training mode -------------------------------------------------------------------------

  // Every forward node whose op computes otherwise in training (model.train()) switches; an op
  // that cannot train says why, at the node.
  void apply_train_modes() {
    for (Node& node : graph_.nodes) {
      if (!node.op->train_mode) continue;
      TrainModeBuilder builder(*this, node);
      try {
        node.op->train_mode(builder);
      } catch (const OpError& e) {
        throw graph_.error_at(node, e.key, e.message());
      }
    }
  }

  // ---- what is trained, and which nodes lie between it and the loss --------------------------

  void collect_trained() {
    const std::set<std::string> listed(train_.params.begin(), train_.params.end());
    for (const Node& node : graph_.nodes) {
      if (!node.op->params) continue;
      for (const ParamSpec& spec : node.op->params(node.ctx)) {
        if (spec.init != ParamInit::kTrained) continue;
        if (spec.hints.buffer) {
          check_buffer_not_listed(node.name + "." + spec.slot);
          continue;
        }
        const std::string name = param_name(node, spec.slot);
        if (listed.empty() || listed.count(node.name) || listed.count(node.name + "." + spec.slot)) {
          trained_[node.name].push_back(spec.slot);
          trained_order_.push_back({name, &node, spec.slot});
        }
      }
    }
  }

  void check_buffer_not_listed(const std::string& buffer) const {
    for (size_t i = 0; i < train_.params.size(); ++i)
      if (train_.params[i] == buffer)
        throw at(train_.params_pos[i],
                 fmt::format("train: params: '{}' is a buffer (running statistics), which no optimizer trains; its "
                             "node's training mode updates it",
                             buffer));
  }

  static std::string param_name(const Node& node, const std::string& slot) {
    auto renamed = node.param_names.find(slot);
    return renamed != node.param_names.end() ? renamed->second : node.name + "." + slot;
  }

  // Nodes whose output depends on a trained param and reaches the loss.
  std::vector<bool> active_nodes() {
    const size_t n = graph_.nodes.size();
    std::unordered_map<std::string, size_t> index;
    for (size_t k = 0; k < n; ++k) index.emplace(graph_.nodes[k].name, k);
    for (const std::string& input : train_.inputs) requires_grad_.insert(input);
    std::vector<bool> depends(n, false), reaches(n, false);
    for (size_t k = 0; k < n; ++k) {
      const Node& node = graph_.nodes[k];
      depends[k] = trained_.count(node.name) > 0;
      for (const std::string& input : node.inputs) {
        auto it = index.find(input);
        if (it != index.end() ? depends[it->second] : requires_grad_.count(input) > 0) depends[k] = true;
      }
    }
    reaches[index.at(train_.loss)] = true;
    for (size_t k = n; k-- > 0;) {
      if (!reaches[k]) continue;
      for (const std::string& input : graph_.nodes[k].inputs)
        if (auto it = index.find(input); it != index.end()) reaches[it->second] = true;
    }
    std::vector<bool> active(n);
    for (size_t k = 0; k < n; ++k) {
      active[k] = depends[k] && reaches[k];
      if (active[k]) requires_grad_.insert(graph_.nodes[k].name);
    }
    return active;
  }

  // ---- the backward pass ---------------------------------------------------------------------

  void differentiate(size_t k) {
    const Node& node = graph_.nodes[k];
    if (!node.op->backward)
      throw graph_.error_at(node, "op",
                            fmt::format("op '{}' has no gradient, and the loss '{}' depends on a trained "
                                        "param through it",
                                        node.op->name, train_.loss));
    const bool is_loss = node.name == train_.loss;
    std::string grad_output = is_loss ? "" : summed_grad(node);
    std::vector<bool> needs_input;
    for (const std::string& input : node.inputs) needs_input.push_back(requires_grad_.count(input) > 0);
    auto slots = trained_.find(node.name);
    GradBuilder builder(*this, node, grad_output, needs_input,
                        slots == trained_.end() ? std::vector<std::string>{} : slots->second);
    node.op->backward(builder);
    for (size_t i = 0; i < needs_input.size(); ++i) {
      if (!needs_input[i]) continue;
      auto grad = builder.input_grads_.find(i);
      if (grad == builder.input_grads_.end())
        throw graph_.error_at(
            node, "op", fmt::format("internal: op '{}''s backward gave no gradient for input {}", node.op->name, i));
      contributions_[node.inputs[i]].push_back(grad->second);
    }
    for (const std::string& slot : builder.trained_slots_) {
      auto grad = builder.param_grads_.find(slot);
      if (grad == builder.param_grads_.end())
        throw graph_.error_at(
            node, "op",
            fmt::format("internal: op '{}''s backward gave no gradient for param '{}'", node.op->name, slot));
      param_grads_[param_name(node, slot)] = grad->second;
      graph_.gradients[param_name(node, slot)] = grad->second;
    }
  }

  // A listed graph input's gradient: its consumers' contributions, summed; an input the loss
  // does not depend on is an error, as a listed param is.
  void add_input_gradients() {
    const Node& loss = *graph_.find_node(train_.loss);
    for (size_t i = 0; i < train_.inputs.size(); ++i) {
      const std::string& input = train_.inputs[i];
      auto parts = contributions_.find(input);
      if (parts == contributions_.end())
        throw at(train_.inputs_pos[i],
                 fmt::format("train: inputs: the loss '{}' does not depend on '{}'", train_.loss, input));
      std::string sum = parts->second.front();
      for (size_t k = 1; k < parts->second.size(); ++k)
        sum = add_node(loss, NodeRole::kBackward, input, "grad_" + input, kAddOp, {sum, parts->second[k]},
                       nlohmann::json::object(), {});
      graph_.gradients[input] = sum;
    }
  }

  Error at(Position pos, std::string message) const {
    Error e(std::move(message));
    if (graph_.source && pos.line > 0) e.at(graph_.source->location(pos.line, pos.column));
    return e;
  }

  // dL/d(node's output): its consumers' contributions, summed in the order they were made.
  std::string summed_grad(const Node& node) {
    const std::vector<std::string>& parts = contributions_.at(node.name);
    std::string sum = parts.front();
    for (size_t i = 1; i < parts.size(); ++i)
      sum = add_node(node, NodeRole::kBackward, node.name, "grad_" + node.name, kAddOp, {sum, parts[i]},
                     nlohmann::json::object(), {});
    return sum;
  }

  void check_listed_params_reach_loss() const {
    for (size_t i = 0; i < train_.params.size(); ++i) {
      const std::string& listed = train_.params[i];
      const bool reached = std::any_of(trained_order_.begin(), trained_order_.end(), [&](const Trained& t) {
        return (listed == t.owner->name || listed == t.owner->name + "." + t.slot) && param_grads_.count(t.name);
      });
      if (reached) continue;
      throw at(train_.params_pos[i],
               fmt::format("train: params: '{}' does not affect the loss '{}'", listed, train_.loss));
    }
  }

  // ---- the update pass -----------------------------------------------------------------------

  // A step counter, the clip coefficient (where clipping), then one optimizer node per param with
  // a gradient: params the loss does not depend on keep their values, as in PyTorch.
  void add_updates() {
    std::vector<const Trained*> updated;
    for (const Trained& t : trained_order_)
      if (param_grads_.count(t.name)) updated.push_back(&t);
    if (updated.empty() && (train_.optimizer || train_.inputs.empty()))
      throw at(train_.loss_pos, fmt::format("train: the loss '{}' depends on no trained param", train_.loss));
    if (!train_.optimizer) return;
    const Node& loss = *graph_.find_node(train_.loss);
    // The counter reads the loss: a non-finite one halts it, and every update then changes nothing.
    const std::string step = add_node(loss, NodeRole::kUpdate, "", "optim_step", kStepOp, {train_.loss}, {}, {});
    const std::string step_param = step + ".count";
    std::string clip;
    if (train_.clip_grad_norm) {
      std::vector<std::string> grads;
      for (const Trained* t : updated) grads.push_back(param_grads_.at(t->name));
      clip = add_node(loss, NodeRole::kUpdate, "", "clip_grad_norm", kClipOp, grads,
                      {{"max_norm", *train_.clip_grad_norm}}, {});
    }
    for (const Trained* t : updated) {
      const std::string& param = t->name;
      std::vector<std::string> inputs{param_grads_.at(param)};
      if (!clip.empty()) inputs.push_back(clip);
      std::string base = train_.optimizer->name.substr(train_.optimizer->name.find('.') + 1) + "_" + param;
      std::replace(base.begin(), base.end(), '.', '_');
      add_node(*t->owner, NodeRole::kUpdate, param, base, train_.optimizer->name, inputs, train_.optimizer_attrs,
               {{"param", param}, {"step", step_param}});
    }
    for (ModeUpdate& update : mode_updates_) {
      const Node& origin = graph_.nodes[update.origin];
      std::string base = update.op.substr(update.op.find('.') + 1) + "_" + origin.name;
      std::replace(base.begin(), base.end(), '.', '_');
      update.param_refs["step"] = step_param;  // so that a halted step changes nothing here either
      add_node(origin, NodeRole::kUpdate, "", base, update.op, std::move(update.inputs), std::move(update.attrs),
               std::move(update.param_refs));
    }
  }

  // ---- names and attrs -----------------------------------------------------------------------

  std::string unique_name(const std::string& base) {
    std::string name = base;
    for (int k = 1; !taken_.insert(name).second; ++k) name = fmt::format("{}_{}", base, k);
    return name;
  }

  static nlohmann::json with_defaults(const OpDef& op, nlohmann::json attrs) {
    if (attrs.is_null()) attrs = nlohmann::json::object();
    for (const AttrSpec& spec : op.attrs) {
      if (attrs.contains(spec.name) || !spec.default_value) continue;
      const nlohmann::json& value = *spec.default_value;
      attrs[spec.name] =
          spec.type == AttrType::kIntPair && value.is_number_integer() ? nlohmann::json::array({value, value}) : value;
    }
    return attrs;
  }

  Graph& graph_;
  const Registry& registry_;
  const TrainSpec& train_;
  std::unordered_map<std::string, TensorType> types_;
  std::unordered_set<std::string> taken_;
  std::map<std::string, std::vector<std::string>> trained_;  // node -> trained slots
  struct Trained {
    std::string name;  // full name
    const Node* owner;
    std::string slot;
  };
  std::vector<Trained> trained_order_;
  std::unordered_set<std::string> requires_grad_;                            // node outputs
  std::unordered_map<std::string, std::vector<std::string>> contributions_;  // tensor -> dL/d parts
  std::map<std::string, std::string> param_grads_;                           // full name -> dL/d tensor
  std::vector<Node> added_;
  std::vector<ModeUpdate> mode_updates_;
};

// ---- GradBuilder ---------------------------------------------------------------------------

GradBuilder::GradBuilder(Differentiator& owner, const Node& forward, std::string grad_output,
                         std::vector<bool> needs_input, std::vector<std::string> trained_slots)
    : owner_(owner),
      forward_(forward),
      grad_output_(std::move(grad_output)),
      needs_input_(std::move(needs_input)),
      trained_slots_(std::move(trained_slots)) {}

bool GradBuilder::needs_param_grad(const std::string& slot) const {
  return std::find(trained_slots_.begin(), trained_slots_.end(), slot) != trained_slots_.end();
}

std::string GradBuilder::param(const std::string& slot) const {
  auto renamed = forward_.param_names.find(slot);
  return renamed != forward_.param_names.end() ? renamed->second : forward_.name + "." + slot;
}

const TensorType& GradBuilder::type(const std::string& tensor) const { return owner_.type(tensor); }

std::string GradBuilder::add(const std::string& op, std::vector<std::string> inputs, nlohmann::json attrs,
                             std::map<std::string, std::string> param_refs) {
  return owner_.add_node(forward_, NodeRole::kBackward, forward_.name, "bwd_" + forward_.name, op, std::move(inputs),
                         std::move(attrs), std::move(param_refs));
}

void GradBuilder::input_grad(size_t i, const std::string& tensor) { input_grads_[i] = tensor; }
void GradBuilder::param_grad(const std::string& slot, const std::string& tensor) { param_grads_[slot] = tensor; }

// ---- TrainModeBuilder ----------------------------------------------------------------------

std::string TrainModeBuilder::param(const std::string& slot) const {
  auto renamed = forward_.param_names.find(slot);
  return renamed != forward_.param_names.end() ? renamed->second : forward_.name + "." + slot;
}

void TrainModeBuilder::set_attr(const std::string& name, nlohmann::json value) {
  owner_.set_attr(forward_, name, std::move(value));
}

void TrainModeBuilder::add_update(const std::string& op, std::vector<std::string> inputs, nlohmann::json attrs,
                                  std::map<std::string, std::string> param_refs) {
  owner_.request_update(forward_, {0, op, std::move(inputs), std::move(attrs), std::move(param_refs)});
}

// ---- entry points --------------------------------------------------------------------------

void add_training(Graph& graph, const Registry& registry) {
  if (graph.train) Differentiator(graph, registry).run();
}

std::vector<std::string> trained_params(const Graph& graph) {
  std::vector<std::string> names;
  for (const Node& node : graph.nodes)
    if (node.role == NodeRole::kUpdate && !node.grad_of.empty()) names.push_back(node.grad_of);
  return names;
}

}  // namespace teeny
