// The spec parser (design.md, "Graph spec"): YAML text -> validated Graph with inferred
// symbolic types. Every error carries file:line:col, the node and key, and a suggestion
// where a nearest valid name exists.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/yaml.h>

#include "core/graph.h"
#include "core/identifier.h"
#include "core/input_file.h"
#include "core/yaml_tree.h"

namespace teeny {

SourceLocation SourceFile::location(int line, int column) const {
  SourceLocation loc;
  loc.file = path;
  loc.line = line;
  loc.column = column;
  if (line >= 1 && static_cast<size_t>(line) <= lines.size()) loc.line_text = lines[line - 1];
  return loc;
}

const DimDecl* Graph::find_dim(const std::string& dim_name) const {
  for (const DimDecl& dim : dims)
    if (dim.name == dim_name) return &dim;
  return nullptr;
}

const TensorType* Graph::find_tensor(const std::string& tensor) const {
  for (const GraphInput& input : inputs)
    if (input.name == tensor) return &input.type;
  const Node* node = find_node(tensor);
  return node ? &node->ctx.output : nullptr;
}

const Node* Graph::find_node(const std::string& node_name) const {
  for (const Node& node : nodes)
    if (node.name == node_name) return &node;
  return nullptr;
}

Bindings Graph::default_bindings() const {
  Bindings bindings;
  for (const DimDecl& dim : dims) bindings[dim.name] = dim.default_value;
  return bindings;
}

Error Graph::error_at(const Node& node, const std::string& key, std::string message) const {
  // "attrs.axis" falls back to "attrs", then to the node's map.
  Position pos = node.pos;
  std::string k = key;
  while (!k.empty()) {
    auto it = node.key_pos.find(k);
    if (it != node.key_pos.end()) {
      pos = it->second;
      break;
    }
    size_t dot = k.rfind('.');
    k = dot == std::string::npos ? std::string() : k.substr(0, dot);
  }
  Error error(fmt::format("node '{}': {}", excerpt(node.name), message));
  if (source && pos.line > 0) error.at(source->location(pos.line, pos.column));
  return error;
}

namespace {

const std::vector<std::string> kTopKeys{"name", "dims", "inputs", "nodes", "outputs", "train"};
const std::vector<std::string> kTrainKeys{"loss", "params", "inputs", "optimizer", "clip_grad_norm"};
const std::vector<std::string> kDimKeys{"min", "max", "default"};
const std::vector<std::string> kInputKeys{"dtype", "shape"};
const std::vector<std::string> kNodeKeys{"name", "op", "inputs", "attrs", "dtype"};

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// "a -> b -> a"; a long cycle with its middle left out, and long names cut.
std::string cycle_text(const std::vector<std::string>& path) {
  constexpr size_t kHead = 4, kTail = 3;
  std::vector<std::string> shown;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path.size() > kHead + kTail + 1 && i == kHead) {
      shown.push_back(fmt::format("... ({} more)", path.size() - kHead - kTail));
      i = path.size() - kTail;
    }
    shown.push_back(excerpt(path[i]));
  }
  return join(shown, " -> ");
}

// Strict decimal integer (optional sign), the whole string.
std::optional<int64_t> parse_int(const std::string& text) {
  int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first != last && *first == '+') ++first;
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr != last || first == last) return std::nullopt;
  return value;
}

Position position(const YamlValue& value) { return {value.line(), value.column()}; }

// What a YAML value is, for "got ..." in messages.
std::string describe(const YamlValue& value) {
  switch (value.kind()) {
    case YamlValue::Kind::kScalar:
      return fmt::format("'{}'", excerpt(value.scalar()));
    case YamlValue::Kind::kSequence:
      return value.size() ? "a list" : "an empty list";
    case YamlValue::Kind::kMap:
      return value.size() ? "a map" : "an empty map";
    case YamlValue::Kind::kNull:
      break;
  }
  return "nothing";
}

struct Field {
  YamlValue key;
  YamlValue value;
  Position key_pos;
  Position value_pos;  // the key's position when the value is empty
};

// A map's entries by key, in key order. A sorted vector, not a std::map: a node's map has a few
// keys, and a tree of them took an allocation per key for each of 10^5 nodes.
class Fields {
 public:
  using value_type = std::pair<std::string, Field>;
  using const_iterator = std::vector<value_type>::const_iterator;

  explicit Fields(size_t capacity = 0) { entries_.reserve(capacity); }

  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  size_t size() const { return entries_.size(); }
  const_iterator find(std::string_view key) const {
    auto it = lower_bound(key);
    return it != entries_.end() && it->first == key ? it : entries_.end();
  }
  size_t count(std::string_view key) const { return find(key) != end() ? 1 : 0; }
  const Field& at(std::string_view key) const {
    auto it = find(key);
    if (it == end()) throw std::out_of_range("Fields::at");
    return it->second;
  }
  void emplace(const std::string& key, Field field) { entries_.emplace(lower_bound(key), key, std::move(field)); }

 private:
  const_iterator lower_bound(std::string_view key) const {
    return std::lower_bound(entries_.begin(), entries_.end(), key,
                            [](const value_type& entry, std::string_view k) { return entry.first < k; });
  }

  std::vector<value_type> entries_;
};

// A node as first seen, before validation: enough to name forward references and cycles.
struct Sketch {
  std::string name;
  Position pos;
  std::vector<std::string> inputs;
};

// A graph input or node by its name: where it is first defined, and once parsed, its type.
struct Defined {
  Position pos;
  bool typed = false;
  bool input = false;  // its type is in graph.inputs[index], else in graph.nodes[index]
  size_t index = 0;
};

class SpecParser {
 public:
  SpecParser(std::shared_ptr<const SourceFile> source, const Registry& registry)
      : source_(std::move(source)), registry_(registry) {
    graph_.source = source_;
  }

  Graph parse(const YamlValue& root) {
    if (!root.is_map())
      throw error(position(root).line ? position(root) : Position{1, 1},
                  fmt::format("a graph spec must be a map with keys {}, got {}", join(kTopKeys), describe(root)));
    Fields top = fields(root, kTopKeys, "", "top-level ");
    Position root_pos = position(root);

    graph_.name = identifier(require(top, "name", root_pos, "", "top-level "), "graph name");
    if (auto it = top.find("dims"); it != top.end()) parse_dims(it->second);
    parse_inputs(require(top, "inputs", root_pos, "", "top-level "));
    parse_nodes(require(top, "nodes", root_pos, "", "top-level "));
    parse_outputs(require(top, "outputs", root_pos, "", "top-level "));
    if (auto it = top.find("train"); it != top.end()) parse_train(it->second);
    return std::move(graph_);
  }

 private:
  Error error(Position pos, std::string message) const {
    Error e(std::move(message));
    if (pos.line > 0) e.at(source_->location(pos.line, pos.column));
    return e;
  }

  // The entries of a map with string keys; unknown keys (when `allowed` is non-empty) and
  // duplicate keys are errors. `what` prefixes messages ("node 'fc1': ").
  Fields fields(const YamlValue& map, const std::vector<std::string>& allowed, const std::string& what,
                std::string_view key_kind = "") const {
    Fields out(map.size());
    for (size_t i = 0; i < map.size(); ++i) {
      const YamlEntry entry{map.key(i), map.value(i)};
      Position key_pos = position(entry.key);
      if (!entry.key.is_scalar())
        throw error(key_pos, fmt::format("{}keys must be names, got {}", what, describe(entry.key)));
      const std::string& key = entry.key.scalar();
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        throw error(key_pos,
                    fmt::format("{}unknown {}key '{}'{}", what, key_kind, excerpt(key), did_you_mean(key, allowed)))
            .note(fmt::format("valid keys: {}", join(allowed)));
      if (auto it = out.find(key); it != out.end())
        throw error(key_pos, fmt::format("{}duplicate key '{}' (first at line {}, column {})", what, excerpt(key),
                                         it->second.key_pos.line, it->second.key_pos.column));
      Position value_pos = position(entry.value);
      if (entry.value.is_null() || value_pos.line == 0) value_pos = key_pos;
      out.emplace(key, Field{entry.key, entry.value, key_pos, value_pos});
    }
    return out;
  }

  // A key that must be present with a value; absent keys point at the enclosing map.
  const Field& require(const Fields& map, std::string_view key, Position map_pos, const std::string& what,
                       std::string_view key_kind = "") const {
    auto it = map.find(key);
    if (it == map.end()) throw error(map_pos, fmt::format("{}missing {}key '{}'", what, key_kind, key));
    if (it->second.value.is_null()) throw error(it->second.key_pos, fmt::format("{}key '{}' has no value", what, key));
    return it->second;
  }

  std::string scalar(const Field& field, const std::string& what, const std::string& key, const char* expected) const {
    if (!field.value.is_scalar())
      throw error(field.value_pos,
                  fmt::format("{}'{}' must be {}, got {}", what, key, expected, describe(field.value)));
    return field.value.scalar();
  }

  std::string identifier(const Field& field, const std::string& kind) const {
    std::string text = scalar(field, "", "name", "a name");
    if (!is_identifier(text))
      throw error(field.value_pos, fmt::format("{} '{}' is not an identifier (letters, digits and '_', not "
                                               "starting with a digit)",
                                               kind, excerpt(text)));
    return text;
  }

  int64_t integer(const Field& field, const std::string& what, const std::string& key) const {
    std::string text = scalar(field, what, key, "an integer");
    std::optional<int64_t> value = parse_int(text);
    if (!value)
      throw error(field.value_pos, fmt::format("{}'{}' must be an integer, got '{}'", what, key, excerpt(text)));
    return *value;
  }

  void parse_dims(const Field& dims_field) {
    if (dims_field.value.is_null()) return;
    if (!dims_field.value.is_map())
      throw error(dims_field.value_pos,
                  fmt::format("'dims' must be a map of dim names to {{min, max, default}}, got {}",
                              describe(dims_field.value)));
    for (const auto& [name, field] : ordered(fields(dims_field.value, {}, "dims: "))) {
      if (!is_identifier(name))
        throw error(field.key_pos, fmt::format("dim name '{}' is not an identifier (letters, digits and '_', "
                                               "not starting with a digit)",
                                               excerpt(name)));
      if (const std::vector<std::string>& functions = expr_functions();
          std::find(functions.begin(), functions.end(), name) != functions.end())
        throw error(field.key_pos,
                    fmt::format("dim name '{}' is an expression function ({})", name, join(expr_functions())));
      if (is_device_symbol(name))
        throw error(field.key_pos, fmt::format("dim name '{}' is a device symbol ({}), bound from the GPU "
                                               "at run time",
                                               name, join(device_symbols())));
      std::string what = fmt::format("dim '{}': ", excerpt(name));
      if (!field.value.is_map())
        throw error(field.value_pos,
                    fmt::format("{}expected a map {{min, max, default}}, got {}", what, describe(field.value)));
      Fields keys = fields(field.value, kDimKeys, what);
      DimDecl dim;
      dim.name = name;
      dim.pos = field.key_pos;
      Position map_pos = position(field.value);
      if (auto it = keys.find("min"); it != keys.end()) {
        dim.min = integer(it->second, what, "min");
        if (dim.min < 1)
          throw error(it->second.value_pos, fmt::format("{}min must be at least 1, got {}", what, dim.min));
      }
      const Field& max_field = require(keys, "max", map_pos, what);
      dim.max = integer(max_field, what, "max");
      if (dim.max < dim.min)
        throw error(keys.count("min") ? keys.at("min").value_pos : max_field.value_pos,
                    fmt::format("{}min {} is greater than max {}", what, dim.min, dim.max));
      const Field& default_field = require(keys, "default", map_pos, what);
      dim.default_value = integer(default_field, what, "default");
      if (dim.default_value < dim.min || dim.default_value > dim.max)
        throw error(default_field.value_pos,
                    fmt::format("{}default {} is outside [{}, {}]", what, dim.default_value, dim.min, dim.max));
      graph_.dims.push_back(dim);
    }
  }

  // Map entries in source order (Fields is keyed by name).
  static std::vector<std::pair<std::string, Field>> ordered(const Fields& map) {
    std::vector<const Fields::value_type*> sorted;
    for (const auto& entry : map) sorted.push_back(&entry);
    std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
      return std::make_pair(a->second.key_pos.line, a->second.key_pos.column) <
             std::make_pair(b->second.key_pos.line, b->second.key_pos.column);
    });
    std::vector<std::pair<std::string, Field>> entries;
    entries.reserve(sorted.size());
    for (const auto* entry : sorted) entries.push_back(*entry);
    return entries;
  }

  std::vector<std::string> dim_names() const {
    std::vector<std::string> names;
    for (const DimDecl& dim : graph_.dims) names.push_back(dim.name);
    return names;
  }

  Error unknown_dim(Position pos, const std::string& what, const std::string& dim, const std::string& entry) const {
    std::string where = entry == dim ? "" : fmt::format(" in '{}'", excerpt(entry));
    Error e =
        error(pos, fmt::format("{}unknown dim '{}'{}{}", what, excerpt(dim), where, did_you_mean(dim, dim_names())));
    if (graph_.dims.empty())
      e.note("the graph declares no dims; declare them under 'dims:'");
    else
      e.note(fmt::format("declared dims: {}", join(dim_names())));
    return e;
  }

  // One shape entry: an int, a dim name or an expression string over declared dims.
  Expr shape_entry(const YamlValue& entry, const std::string& what, bool allow_negative_one = false) const {
    Position pos = position(entry);
    if (!entry.is_scalar())
      throw error(pos, fmt::format("{}a shape entry must be an int, a dim name or an "
                                   "expression string, got {}",
                                   what, describe(entry)));
    const std::string& text = entry.scalar();
    Expr expr;
    try {
      expr = Expr::parse(text);
    } catch (const Error& e) {
      throw error(pos, what + e.message());
    }
    for (const std::string& dim : expr.dims())
      if (!graph_.find_dim(dim)) throw unknown_dim(pos, what, dim, text);
    if (auto value = expr.const_value(); value && *value <= 0 && !(allow_negative_one && *value == -1))
      throw error(pos, fmt::format("{}shape entry '{}' must be positive", what, excerpt(text)));
    return expr;
  }

  Shape shape(const Field& field, const std::string& what) const {
    if (!field.value.is_sequence())
      throw error(field.value_pos,
                  fmt::format("{}'shape' must be a list like [B, 784], got {}", what, describe(field.value)));
    Shape out;
    for (const YamlValue& entry : field.value.items()) out.push_back(shape_entry(entry, what));
    return out;
  }

  DType dtype(const Field& field, const std::string& what) const {
    std::string text = scalar(field, what, "dtype", "a dtype name");
    std::optional<DType> parsed = parse_dtype(text);
    if (!parsed)
      throw error(field.value_pos,
                  fmt::format("{}unknown dtype '{}'{}", what, excerpt(text), did_you_mean(text, dtype_names())))
          .note(fmt::format("dtypes: {}", join(dtype_names())));
    return *parsed;
  }

  // First definition of each name (graph input or node), for duplicate errors; its type comes
  // with typed().
  Defined& claim_name(const std::string& name, Position pos, const std::string& what) {
    auto [it, inserted] = defined_.emplace(name, Defined{pos});
    if (!inserted)
      throw error(pos, fmt::format("{}duplicate name '{}' (first defined on line {})", what, excerpt(name),
                                   it->second.pos.line))
          .note("graph input and node names must be unique");
    return it->second;
  }
  static void typed(Defined& defined, bool input, size_t index) {
    defined.typed = true;
    defined.input = input;
    defined.index = index;
  }

  void parse_inputs(const Field& inputs_field) {
    if (!inputs_field.value.is_map() || inputs_field.value.size() == 0)
      throw error(inputs_field.value_pos, fmt::format("'inputs' must be a non-empty map of input names to {{dtype, "
                                                      "shape}}, got {}",
                                                      describe(inputs_field.value)));
    for (const auto& [name, field] : ordered(fields(inputs_field.value, {}, "inputs: "))) {
      if (!is_identifier(name))
        throw error(field.key_pos, fmt::format("input name '{}' is not an identifier (letters, digits and "
                                               "'_', not starting with a digit)",
                                               excerpt(name)));
      std::string what = fmt::format("input '{}': ", excerpt(name));
      if (!field.value.is_map())
        throw error(field.value_pos,
                    fmt::format("{}expected a map {{dtype, shape}}, got {}", what, describe(field.value)));
      Fields keys = fields(field.value, kInputKeys, what);
      Defined& defined = claim_name(name, field.key_pos, "");
      GraphInput input;
      input.name = name;
      input.pos = field.key_pos;
      DType type = DType::kF32;
      if (auto it = keys.find("dtype"); it != keys.end()) type = dtype(it->second, what);
      input.type = contiguous(type, shape(require(keys, "shape", position(field.value), what), what));
      if (std::string problem = tensor_size_problem(input.type); !problem.empty())
        throw error(keys.at("shape").value_pos, what + problem);
      typed(defined, true, graph_.inputs.size());
      graph_.inputs.push_back(std::move(input));
    }
  }

  // Names and inputs of every node, read leniently: forward references and cycles are
  // reported with the later node's line, before that node itself is validated. Made for such
  // an error only.
  std::vector<Sketch> sketch_nodes(const YamlValue& nodes) const {
    std::vector<Sketch> sketches;
    for (const YamlValue& node : nodes.items()) {
      Sketch sketch;
      sketch.pos = position(node);
      for (const YamlEntry& entry : node.entries()) {
        if (!entry.key.is_scalar()) continue;
        if (entry.key.scalar() == "name" && entry.value.is_scalar()) sketch.name = entry.value.scalar();
        if (entry.key.scalar() == "inputs")
          for (const YamlValue& input : entry.value.items())
            if (input.is_scalar()) sketch.inputs.push_back(input.scalar());
      }
      sketches.push_back(std::move(sketch));
    }
    return sketches;
  }

  // The name sketch_nodes gives a node: its last "name" key's, if that is a scalar; "" if none is.
  static const std::string& sketched_name(const YamlValue& node) {
    static const std::string kNone;
    const std::string* name = &kNone;
    for (size_t i = 0; i < node.size(); ++i) {
      const YamlValue key = node.key(i);
      if (key.is_scalar() && key.scalar() == "name" && node.value(i).is_scalar()) name = &node.value(i).scalar();
    }
    return *name;
  }

  // The path from `from` back to `target` through inputs of sketched nodes, if any. Depth
  // first without recursion: a cycle through a long chain would overflow the stack.
  std::optional<std::vector<std::string>> path_to(const std::vector<Sketch>& sketches, const std::string& from,
                                                  const std::string& target) const {
    std::unordered_map<std::string, const Sketch*> first;  // a name's first sketch
    for (const Sketch& sketch : sketches) first.emplace(sketch.name, &sketch);
    static const std::vector<std::string> kNoInputs;
    struct Frame {
      const std::vector<std::string>* inputs;
      size_t next;
    };
    std::vector<Frame> frames;
    std::vector<std::string> path;
    std::set<std::string> seen;
    auto enter = [&](const std::string& name) {  // true at the target
      path.push_back(name);
      if (name == target) return true;
      auto it = first.find(name);
      bool expand = seen.insert(name).second && it != first.end();
      frames.push_back({expand ? &it->second->inputs : &kNoInputs, 0});
      return false;
    };
    if (enter(from)) return path;
    while (!frames.empty()) {
      Frame& frame = frames.back();
      if (frame.next == frame.inputs->size()) {
        frames.pop_back();
        path.pop_back();
      } else if (enter((*frame.inputs)[frame.next++])) {
        return path;
      }
    }
    return std::nullopt;
  }

  void parse_nodes(const Field& nodes_field) {
    if (!nodes_field.value.is_sequence() || nodes_field.value.size() == 0)
      throw error(nodes_field.value_pos,
                  fmt::format("'nodes' must be a non-empty list of nodes, got {}", describe(nodes_field.value)));
    const YamlValue& nodes = nodes_field.value;
    graph_.nodes.reserve(nodes.size());
    defined_.reserve(defined_.size() + nodes.size());
    for (size_t index = 0; index < nodes.size(); ++index) parse_node(nodes, index);
  }

  static std::string node_what(const std::string& name) { return "node '" + excerpt(name) + "': "; }

  void parse_node(const YamlValue& nodes, size_t index) {
    const YamlValue yaml_node = nodes.item(index);
    Position node_pos = position(yaml_node);
    const std::string anon = "node #" + std::to_string(index + 1) + ": ";
    if (!yaml_node.is_map())
      throw error(node_pos,
                  fmt::format("{}expected a map {{name, op, inputs, attrs}}, got {}", anon, describe(yaml_node)));
    // Keys are checked before the name is known to be usable, so name the node by its
    // name when it has a plain one.
    const std::string& sketched = sketched_name(yaml_node);
    std::string what = sketched.empty() ? anon : node_what(sketched);
    Fields keys = fields(yaml_node, kNodeKeys, what);

    Node node;
    node.pos = node_pos;
    node.name = identifier(require(keys, "name", node_pos, anon), "node name");
    if (node.name != sketched) what = node_what(node.name);
    auto inputs = keys.find("inputs");
    node.key_pos.reserve(keys.size() + (inputs != keys.end() ? inputs->second.value.size() : 0));
    for (const auto& [key, field] : keys) node.key_pos[key] = field.value_pos;
    Defined& defined = claim_name(node.name, keys.at("name").value_pos, "");
    node.ctx.node = node.name;

    const Field& op_field = require(keys, "op", node_pos, what);
    std::string op_name = scalar(op_field, what, "op", "an op name");
    node.op = registry_.find(op_name);
    if (!node.op)
      throw error(op_field.value_pos,
                  fmt::format("{}unknown op '{}'{}", what, excerpt(op_name), did_you_mean(op_name, registry_.names())))
          .note("`teeny ops` lists the registered ops");
    const OpDef& op = *node.op;
    if (op.update)
      throw error(op_field.value_pos, fmt::format("{}op '{}' updates params in place, so it is not a node to write; "
                                                  "a train: section adds the update nodes",
                                                  what, op_name))
          .note("docs/training.md describes the train: section");

    parse_node_inputs(node, require(keys, "inputs", node_pos, what), what, nodes, index);

    if (auto it = keys.find("dtype"); it != keys.end()) {
      DType requested = dtype(it->second, what);
      if (std::find(op.dtypes.begin(), op.dtypes.end(), requested) == op.dtypes.end())
        throw unsupported_dtype(node, "dtype", requested, "");
      node.ctx.requested_dtype = requested;
    }

    nlohmann::json attrs = parse_attrs(node, keys, what);
    node.ctx.attrs = Attrs(std::move(attrs));

    run_op(node);
    typed(defined, false, graph_.nodes.size());
    graph_.nodes.push_back(std::move(node));
  }

  Error unsupported_dtype(const Node& node, const std::string& key, DType type, const std::string& whose) const {
    std::vector<std::string> supported;
    for (DType t : node.op->dtypes) supported.push_back(dtype_name(t));
    return graph_.error_at(node, key,
                           fmt::format("op '{}' does not support dtype {}{}; it supports {}", node.op->name,
                                       dtype_name(type), whose, join(supported)));
  }

  void parse_node_inputs(Node& node, const Field& field, const std::string& what, const YamlValue& nodes,
                         size_t index) {
    if (!field.value.is_sequence())
      throw error(field.value_pos,
                  fmt::format("{}'inputs' must be a list of names, got {}", what, describe(field.value)));
    const OpDef& op = *node.op;
    for (size_t i = 0; i < field.value.size(); ++i) {
      const YamlValue entry = field.value.item(i);
      Position pos = position(entry);
      node.key_pos["inputs." + std::to_string(i)] = pos;
      if (!entry.is_scalar())
        throw error(pos, fmt::format("{}input entries must be names, got {}", what, describe(entry)));
      const std::string& input = entry.scalar();
      if (input == node.name)
        throw error(pos, fmt::format("{}cycle: {} -> {}", what, excerpt(node.name), excerpt(node.name)));
      const TensorType* type = defined_type(input);
      if (!type) throw undefined_input(pos, what, node.name, input, index, sketch_nodes(nodes));
      node.inputs.push_back(input);
      node.ctx.inputs.push_back(*type);
    }

    auto input_names = [&] {
      std::vector<std::string> names;
      for (const InputSpec& spec : op.inputs) names.push_back(spec.name);
      return names;
    };
    size_t count = node.inputs.size();
    if (op.variadic) {
      size_t min_inputs = static_cast<size_t>(std::max(op.min_inputs, 1));
      if (count < min_inputs)
        throw graph_.error_at(node, "inputs",
                              fmt::format("op '{}' takes at least {} input{} ({}...), got {}", op.name, min_inputs,
                                          min_inputs == 1 ? "" : "s", join(input_names()), count));
    } else if (op.optional_inputs > 0) {
      const size_t required = op.inputs.size() - static_cast<size_t>(op.optional_inputs);
      if (count < required || count > op.inputs.size()) {
        std::vector<std::string> names = input_names();
        for (size_t k = required; k < names.size(); ++k) names[k] += "?";
        throw graph_.error_at(node, "inputs",
                              fmt::format("op '{}' takes {} to {} inputs ({}), got {}", op.name, required,
                                          op.inputs.size(), join(names), count));
      }
    } else if (count != op.inputs.size()) {
      throw graph_.error_at(node, "inputs",
                            fmt::format("op '{}' takes {} input{} ({}), got {}", op.name, op.inputs.size(),
                                        op.inputs.size() == 1 ? "" : "s", join(input_names()), count));
    }
    // Float inputs must be in the op's dtypes; integer inputs (ids) are the op's own check.
    for (size_t k = 0; k < count; ++k) {
      DType type = node.ctx.inputs[k].dtype;
      if (is_float(type) && std::find(op.dtypes.begin(), op.dtypes.end(), type) == op.dtypes.end())
        throw unsupported_dtype(node, fmt::format("inputs.{}", k), type, fmt::format(" (input '{}')", node.inputs[k]));
    }
  }

  Error undefined_input(Position pos, const std::string& what, const std::string& node_name, const std::string& input,
                        size_t index, const std::vector<Sketch>& sketches) const {
    for (size_t later = index + 1; later < sketches.size(); ++later) {
      if (sketches[later].name != input) continue;
      if (std::optional<std::vector<std::string>> cycle = path_to(sketches, input, node_name)) {
        cycle->insert(cycle->begin(), node_name);
        return error(pos, fmt::format("{}cycle: {}", what, cycle_text(*cycle)))
            .note("a node's inputs must be graph inputs or earlier nodes");
      }
      return error(pos, fmt::format("{}input '{}' is defined later, on line {}", what, excerpt(input),
                                    sketches[later].pos.line))
          .note("a node's inputs must be graph inputs or earlier nodes; move it up");
    }
    std::vector<std::string> known;
    for (const GraphInput& graph_input : graph_.inputs) known.push_back(graph_input.name);
    for (const Node& earlier : graph_.nodes) known.push_back(earlier.name);
    return error(pos, fmt::format("{}undefined input '{}'{}", what, excerpt(input), did_you_mean(input, known)));
  }

  // ---- attrs ---------------------------------------------------------------------------
  nlohmann::json parse_attrs(Node& node, const Fields& keys, const std::string& what) {
    const OpDef& op = *node.op;
    Fields given;
    auto attrs_it = keys.find("attrs");
    if (attrs_it != keys.end() && !attrs_it->second.value.is_null()) {
      std::vector<std::string> names;
      for (const AttrSpec& spec : op.attrs) names.push_back(spec.name);
      const Field& field = attrs_it->second;
      if (!field.value.is_map())
        throw error(field.value_pos, fmt::format("{}'attrs' must be a map of attr names to "
                                                 "values, got {}",
                                                 what, describe(field.value)));
      given = fields(field.value, {}, what);
      for (const auto& [name, attr] : given) {
        node.key_pos["attrs." + name] = attr.value_pos;
        if (std::find(names.begin(), names.end(), name) == names.end()) {
          Error e = error(attr.key_pos, fmt::format("{}unknown attr '{}' for op '{}'{}", what, excerpt(name), op.name,
                                                    did_you_mean(name, names)));
          e.note(names.empty() ? fmt::format("op '{}' takes no attrs", op.name)
                               : fmt::format("op '{}' attrs: {}", op.name, join(names)));
          throw e;
        }
      }
    }

    nlohmann::json values = nlohmann::json::object();
    for (const AttrSpec& spec : op.attrs) {
      auto it = given.find(spec.name);
      if (it == given.end()) {
        if (spec.default_value)
          values[spec.name] = normalize_default(spec);
        else if (!spec.optional)
          throw graph_.error_at(node, "attrs",
                                fmt::format("missing required attr '{}' for op '{}'", spec.name, op.name));
        continue;
      }
      values[spec.name] = attr_value(spec, it->second, what);
      if (std::string problem = attr_domain_problem(spec, values[spec.name]); !problem.empty())
        throw error(it->second.value_pos, fmt::format("{}attr '{}' {}", what, spec.name, problem));
    }
    return values;
  }

  static nlohmann::json normalize_default(const AttrSpec& spec) {
    const nlohmann::json& value = *spec.default_value;
    if (spec.type == AttrType::kIntPair && value.is_number_integer()) return nlohmann::json::array({value, value});
    return value;
  }

  static const char* expected_text(AttrType type) {
    switch (type) {
      case AttrType::kInt:
        return "an integer";
      case AttrType::kFloat:
        return "a number";
      case AttrType::kBool:
        return "true or false";
      case AttrType::kEnum:
        return "a name";
      case AttrType::kIntPair:
        return "an integer or a list [h, w] of two integers";
      case AttrType::kIntList:
        return "a list of integers";
      case AttrType::kIntListList:
        return "a list of lists of integers";
      case AttrType::kShape:
        return "a list of ints, dim names or expression strings";
      case AttrType::kFloatList:
        return "a list of numbers";
    }
    return "";
  }

  nlohmann::json attr_value(const AttrSpec& spec, const Field& field, const std::string& what) {
    const YamlValue& value = field.value;
    auto bad = [&]() {
      return error(field.value_pos, fmt::format("{}attr '{}' must be {}, got {}", what, spec.name,
                                                expected_text(spec.type), describe(value)));
    };
    auto int_of = [&](const YamlValue& item) {
      if (!item.is_scalar()) throw bad();
      std::optional<int64_t> parsed = parse_int(item.scalar());
      if (!parsed) throw bad();
      return *parsed;
    };
    auto int_list = [&](const YamlValue& list) {
      if (!list.is_sequence()) throw bad();
      std::vector<int64_t> out;
      for (const YamlValue& item : list.items()) out.push_back(int_of(item));
      return out;
    };

    switch (spec.type) {
      case AttrType::kInt:
        return int_of(value);
      case AttrType::kFloat: {
        if (!value.is_scalar()) throw bad();
        double number = 0;
        if (!YAML::convert<double>::decode(YAML::Node(value.scalar()), number)) throw bad();
        return number;
      }
      case AttrType::kBool: {
        bool flag = false;
        if (!value.is_scalar() || !YAML::convert<bool>::decode(YAML::Node(value.scalar()), flag)) throw bad();
        return flag;
      }
      case AttrType::kEnum: {
        if (!value.is_scalar()) throw bad();
        const std::string& text = value.scalar();
        if (std::find(spec.choices.begin(), spec.choices.end(), text) == spec.choices.end())
          throw error(field.value_pos,
                      fmt::format("{}attr '{}' must be one of {}; got '{}'{}", what, spec.name, join(spec.choices),
                                  excerpt(text), did_you_mean(text, spec.choices)));
        return text;
      }
      case AttrType::kIntPair: {
        if (value.is_scalar()) {
          int64_t n = int_of(value);
          return nlohmann::json::array({n, n});
        }
        std::vector<int64_t> pair = int_list(value);
        if (pair.size() != 2) throw bad();
        return pair;
      }
      case AttrType::kIntList:
        return int_list(value);
      case AttrType::kIntListList: {
        if (!value.is_sequence()) throw bad();
        nlohmann::json lists = nlohmann::json::array();
        for (const YamlValue& item : value.items()) lists.push_back(int_list(item));
        return lists;
      }
      case AttrType::kShape: {
        if (!value.is_sequence()) throw bad();
        nlohmann::json entries = nlohmann::json::array();
        std::string entry_what = fmt::format("{}attr '{}': ", what, spec.name);
        for (const YamlValue& item : value.items())
          entries.push_back(shape_entry(item, entry_what, /*allow_negative_one=*/true).str());
        return entries;
      }
      case AttrType::kFloatList: {
        if (!value.is_sequence()) throw bad();
        nlohmann::json numbers = nlohmann::json::array();
        for (const YamlValue& item : value.items()) {
          double number = 0;
          if (!item.is_scalar() || !YAML::convert<double>::decode(YAML::Node(item.scalar()), number)) throw bad();
          numbers.push_back(number);
        }
        return numbers;
      }
    }
    throw bad();
  }

  // The op's shape rule and params, with its errors located at the node key it names.
  void run_op(Node& node) const {
    const OpDef& op = *node.op;
    try {
      node.ctx.output = op.infer(node.ctx);
      if (node.ctx.requested_dtype && node.ctx.output.dtype != *node.ctx.requested_dtype)
        throw OpError("dtype", fmt::format("op '{}' produces {} here, not the requested {}", op.name,
                                           dtype_name(node.ctx.output.dtype), dtype_name(*node.ctx.requested_dtype)));
      check_sizes(node.ctx.output, op.params ? op.params(node.ctx) : std::vector<ParamSpec>{});
    } catch (const OpError& e) {
      throw relocate(node, e.key, e);
    } catch (const Error& e) {
      throw relocate(node, "op", e);
    }
  }

  Error relocate(const Node& node, const std::string& key, const Error& e) const {
    Error out = graph_.error_at(node, key, e.message());
    out.with_code(e.code());
    for (const std::string& note : e.notes()) out.note(note);
    return out;
  }

  const TensorType* defined_type(const std::string& name) const {
    auto it = defined_.find(name);
    if (it == defined_.end() || !it->second.typed) return nullptr;
    const Defined& defined = it->second;
    return defined.input ? &graph_.inputs[defined.index].type : &graph_.nodes[defined.index].ctx.output;
  }

  // ---- outputs ---------------------------------------------------------------------------
  void parse_outputs(const Field& field) {
    if (!field.value.is_sequence() || field.value.size() == 0)
      throw error(field.value_pos, fmt::format("'outputs' must be a non-empty list of names, "
                                               "got {}",
                                               describe(field.value)));
    auto known = [&] {
      std::vector<std::string> names;
      for (const GraphInput& input : graph_.inputs) names.push_back(input.name);
      for (const Node& node : graph_.nodes) names.push_back(node.name);
      return names;
    };
    std::set<std::string> listed;
    for (const YamlValue& entry : field.value.items()) {
      Position pos = position(entry);
      if (!entry.is_scalar()) throw error(pos, fmt::format("output entries must be names, got {}", describe(entry)));
      const std::string& name = entry.scalar();
      if (!defined_type(name))
        throw error(pos, fmt::format("undefined output '{}'{}", excerpt(name), did_you_mean(name, known())));
      if (!listed.insert(name).second) throw error(pos, fmt::format("output '{}' is listed twice", excerpt(name)));
      graph_.outputs.push_back(name);
    }
  }

  // ---- train (docs/training.md) -----------------------------------------------------------
  void parse_train(const Field& field) {
    const std::string what = "train: ";
    if (!field.value.is_map())
      throw error(field.value_pos,
                  fmt::format("'train' must be a map with keys {}, got {}", join(kTrainKeys), describe(field.value)));
    Fields keys = fields(field.value, kTrainKeys, what);
    const Position map_pos = position(field.value);
    TrainSpec train;
    train.pos = field.key_pos;
    const Field& loss = require(keys, "loss", map_pos, what);
    train.loss = scalar(loss, what, "loss", "a node name");
    train.loss_pos = loss.value_pos;
    check_loss_node(train.loss, train.loss_pos);
    if (auto it = keys.find("params"); it != keys.end()) parse_train_params(it->second, train);
    if (auto it = keys.find("inputs"); it != keys.end()) parse_train_inputs(it->second, train);
    if (auto it = keys.find("optimizer"); it != keys.end()) {
      train.optimizer_pos = it->second.value_pos;
      parse_optimizer(it->second, train);
    }
    if (auto it = keys.find("clip_grad_norm"); it != keys.end()) {
      const Field& clip = it->second;
      double norm = 0;
      if (!clip.value.is_scalar() || !YAML::convert<double>::decode(YAML::Node(clip.value.scalar()), norm) ||
          !(norm > 0) || !std::isfinite(norm))
        throw error(clip.value_pos, fmt::format("{}'clip_grad_norm' must be a number greater than 0, got {}", what,
                                                describe(clip.value)));
      train.clip_grad_norm = norm;
      train.clip_pos = clip.value_pos;
    }
    graph_.train = std::move(train);
  }

  std::vector<std::string> node_names() const {
    std::vector<std::string> names;
    for (const Node& node : graph_.nodes) names.push_back(node.name);
    return names;
  }

  void check_loss_node(const std::string& name, Position pos) const {
    const Node* node = graph_.find_node(name);
    if (!node)
      throw error(pos,
                  fmt::format("train: undefined loss node '{}'{}", excerpt(name), did_you_mean(name, node_names())));
    if (!node->op->loss) {
      std::vector<std::string> losses;
      for (const std::string& op : registry_.names())
        if (registry_.find(op)->loss) losses.push_back(op);
      throw error(pos, fmt::format("train: node '{}' (op '{}') is not a loss", excerpt(name), node->op->name))
          .note(fmt::format("the loss ops: {}", join(losses)));
    }
  }

  // Each entry names a node (all its trained params) or one param "<node>.<slot>".
  void parse_train_params(const Field& field, TrainSpec& train) const {
    if (!field.value.is_sequence() || field.value.size() == 0)
      throw error(field.value_pos, fmt::format("train: 'params' must be a non-empty list of node or "
                                               "<node>.<slot> names, got {}",
                                               describe(field.value)));
    for (const YamlValue& entry : field.value.items()) {
      const Position pos = position(entry);
      if (!entry.is_scalar())
        throw error(pos, fmt::format("train: 'params' entries must be names, got {}", describe(entry)));
      const std::string& text = entry.scalar();
      const size_t dot = text.find('.');
      const std::string node_name = text.substr(0, dot);
      const Node* node = graph_.find_node(node_name);
      if (!node)
        throw error(pos, fmt::format("train: params: undefined node '{}'{}", excerpt(node_name),
                                     did_you_mean(node_name, node_names())));
      std::vector<std::string> slots;
      if (node->op->params)
        for (const ParamSpec& spec : node->op->params(node->ctx))
          if (spec.init == ParamInit::kTrained) slots.push_back(spec.slot);
      if (slots.empty())
        throw error(pos, fmt::format("train: params: node '{}' (op '{}') has no trained params", excerpt(node_name),
                                     node->op->name));
      if (dot != std::string::npos) {
        const std::string slot = text.substr(dot + 1);
        if (std::find(slots.begin(), slots.end(), slot) == slots.end())
          throw error(pos, fmt::format("train: params: node '{}' has no trained param '{}'{}", excerpt(node_name),
                                       excerpt(slot), did_you_mean(slot, slots)))
              .note(fmt::format("its trained params: {}", join(slots)));
      }
      if (std::find(train.params.begin(), train.params.end(), text) != train.params.end())
        throw error(pos, fmt::format("train: params: '{}' is listed twice", excerpt(text)));
      train.params.push_back(text);
      train.params_pos.push_back(pos);
    }
  }

  // Float graph inputs whose gradients the graph computes as well.
  void parse_train_inputs(const Field& field, TrainSpec& train) const {
    if (!field.value.is_sequence() || field.value.size() == 0)
      throw error(field.value_pos, fmt::format("train: 'inputs' must be a non-empty list of graph inputs, got {}",
                                               describe(field.value)));
    std::vector<std::string> names;
    for (const GraphInput& input : graph_.inputs) names.push_back(input.name);
    for (const YamlValue& entry : field.value.items()) {
      const Position pos = position(entry);
      if (!entry.is_scalar())
        throw error(pos, fmt::format("train: 'inputs' entries must be names, got {}", describe(entry)));
      const std::string& name = entry.scalar();
      auto input = std::find_if(graph_.inputs.begin(), graph_.inputs.end(),
                                [&](const GraphInput& in) { return in.name == name; });
      if (input == graph_.inputs.end())
        throw error(
            pos, fmt::format("train: inputs: undefined graph input '{}'{}", excerpt(name), did_you_mean(name, names)));
      if (!is_float(input->type.dtype))
        throw error(pos, fmt::format("train: inputs: '{}' is {}; only float inputs have gradients", excerpt(name),
                                     dtype_name(input->type.dtype)));
      if (std::find(train.inputs.begin(), train.inputs.end(), name) != train.inputs.end())
        throw error(pos, fmt::format("train: inputs: '{}' is listed twice", excerpt(name)));
      train.inputs.push_back(name);
      train.inputs_pos.push_back(pos);
    }
  }

  // {type: <t>, ...}: the op "optim.<t>", its attrs the other keys.
  void parse_optimizer(const Field& field, TrainSpec& train) {
    const std::string what = "train: optimizer: ";
    std::vector<std::string> types;
    for (const std::string& op : registry_.names())
      if (op.rfind("optim.", 0) == 0) types.push_back(op.substr(6));
    if (!field.value.is_map())
      throw error(field.value_pos, fmt::format("train: 'optimizer' must be a map {{type: {}, ...}}, got {}",
                                               join(types, " | "), describe(field.value)));
    Fields given = fields(field.value, {}, what);
    const Field& type_field = require(given, "type", field.value_pos, what);
    const std::string type = scalar(type_field, what, "type", "an optimizer name");
    train.optimizer =
        std::find(types.begin(), types.end(), type) != types.end() ? registry_.find("optim." + type) : nullptr;
    if (!train.optimizer)
      throw error(type_field.value_pos,
                  fmt::format("{}unknown optimizer '{}'{}", what, excerpt(type), did_you_mean(type, types)))
          .note(fmt::format("optimizers: {}", join(types)));
    const OpDef& op = *train.optimizer;
    std::vector<std::string> names;
    for (const AttrSpec& spec : op.attrs) names.push_back(spec.name);
    nlohmann::json values = nlohmann::json::object();
    for (const auto& entry : given) {
      const std::string& name = entry.first;
      const Field& attr = entry.second;
      if (name == "type") continue;
      auto spec = std::find_if(op.attrs.begin(), op.attrs.end(), [&](const AttrSpec& a) { return a.name == name; });
      if (spec == op.attrs.end())
        throw error(attr.key_pos,
                    fmt::format("{}unknown key '{}' for {}{}", what, excerpt(name), type, did_you_mean(name, names)))
            .note(fmt::format("{} takes: {}", type, join(names)));
      values[name] = attr_value(*spec, attr, what);
      if (std::string problem = attr_domain_problem(*spec, values[name]); !problem.empty())
        throw error(attr.value_pos, fmt::format("{}'{}' {}", what, name, problem));
    }
    for (const AttrSpec& spec : op.attrs) {
      if (values.contains(spec.name)) continue;
      if (spec.default_value)
        values[spec.name] = normalize_default(spec);
      else if (!spec.optional)
        throw error(field.value_pos, fmt::format("{}missing key '{}' for {}", what, spec.name, type));
    }
    train.optimizer_attrs = std::move(values);
  }

  std::shared_ptr<const SourceFile> source_;
  const Registry& registry_;
  Graph graph_;
  // Each graph input and node by name. Where its type is: Graph::find_tensor scans the nodes,
  // which made parsing quadratic in their number.
  std::unordered_map<std::string, Defined> defined_;
};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  lines.reserve(std::count(text.begin(), text.end(), '\n') + 1);
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    const size_t stop = end > begin && text[end - 1] == '\r' ? end - 1 : end;
    lines.emplace_back(text, begin, stop - begin);
    begin = end + 1;
  }
  return lines;
}

}  // namespace

Graph parse_graph(const std::string& text, const std::string& path, const Registry& registry) {
  auto source = std::make_shared<SourceFile>();
  source->path = path;
  source->lines = split_lines(text);
  // yaml-cpp recurses once per level of nesting; refuse what would exhaust the stack first.
  if (auto deep = yaml_nesting_beyond(text)) {
    throw Error(fmt::format("lists and maps nested more than {} deep", kMaxNesting))
        .at(source->location(deep->line, deep->column));
  }
  YamlDocument document;
  try {
    document = load_yaml(text);
  } catch (const YAML::Exception& e) {
    Error error(fmt::format("YAML syntax error: {}", e.msg));
    if (!e.mark.is_null()) error.at(source->location(e.mark.line + 1, e.mark.column + 1));
    throw error;
  }
  return SpecParser(source, registry).parse(YamlValue::root(document));
}

Graph load_graph(const std::string& path, const Registry& registry) {
  return parse_graph(read_input_file(path, "graph spec"), path, registry);
}

Bindings bind_dims(const std::vector<DimDecl>& dims, const std::vector<std::string>& binds) {
  std::vector<std::string> names;
  for (const DimDecl& dim : dims) names.push_back(dim.name);
  Bindings bindings;
  std::set<std::string> bound;
  for (const std::string& bind : binds) {
    size_t eq = bind.find('=');
    std::string name = eq == std::string::npos ? "" : bind.substr(0, eq);
    std::optional<int64_t> value = parse_int(eq == std::string::npos ? "" : bind.substr(eq + 1));
    if (name.empty() || !value)
      throw Error(fmt::format("malformed --bind '{}': expected DIM=N, e.g. --bind B=64", bind));
    auto it = std::find_if(dims.begin(), dims.end(), [&](const DimDecl& dim) { return dim.name == name; });
    if (it == dims.end())
      throw Error(fmt::format("--bind {}: unknown dim '{}'{}", bind, name, did_you_mean(name, names)))
          .note(names.empty() ? "the graph declares no dims" : fmt::format("declared dims: {}", join(names)));
    if (*value < it->min || *value > it->max)
      throw Error(fmt::format("--bind {}: {} must be in [{}, {}]", bind, name, it->min, it->max));
    if (!bound.insert(name).second) throw Error(fmt::format("--bind {}: dim '{}' is bound more than once", bind, name));
    bindings[name] = *value;
  }
  for (const DimDecl& dim : dims) bindings.emplace(dim.name, dim.default_value);
  return bindings;
}

std::map<std::string, std::vector<int64_t>> bind_shapes(const Graph& graph, const Bindings& bindings) {
  auto bindings_text = [&](const Shape& shape) {
    std::vector<std::string> parts;
    for (const std::string& dim : product(shape).dims())
      if (auto it = bindings.find(dim); it != bindings.end()) parts.push_back(fmt::format("{}={}", dim, it->second));
    return join(parts);
  };
  // Evaluates one shape; a failure, a size <= 0 or too many bytes is reported by `fail`.
  auto evaluate = [&](const TensorType& type, const std::function<Error(std::string)>& fail) {
    const Shape& shape = type.shape;
    std::vector<int64_t> concrete;
    int64_t row_stride = 1;
    try {
      concrete = eval_shape(shape, bindings);
      if (!shape.empty()) row_stride = type.row_stride.eval(bindings);
    } catch (const Error& e) {
      throw fail(
          fmt::format("cannot evaluate shape {} with {}: {}", shape_str(shape), bindings_text(shape), e.message()));
    }
    for (int64_t size : concrete)
      if (size <= 0)
        throw fail(fmt::format("shape {} is [{}] with {}; sizes must be positive", shape_str(shape),
                               fmt::join(concrete, ", "), bindings_text(shape)));
    try {
      tensor_bytes(type.dtype, concrete, row_stride);
    } catch (const Error& e) {
      throw fail(fmt::format("shape {} is [{}] with {}: {}", shape_str(shape), fmt::join(concrete, ", "),
                             bindings_text(shape), e.message()));
    }
    return concrete;
  };
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const GraphInput& input : graph.inputs)
    shapes[input.name] = evaluate(input.type, [&](std::string message) {
      Error e(fmt::format("input '{}': {}", input.name, message));
      if (graph.source && input.pos.line > 0) e.at(graph.source->location(input.pos.line, input.pos.column));
      return e;
    });
  for (const Node& node : graph.nodes)
    shapes[node.name] =
        evaluate(node.ctx.output, [&](std::string message) { return graph.error_at(node, "op", std::move(message)); });
  return shapes;
}

}  // namespace teeny
