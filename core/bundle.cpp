#include "core/bundle.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include "core/atomic_file.h"
#include "core/binding.h"
#include "core/compile.h"
#include "core/error.h"
#include "core/identifier.h"
#include "core/input_file.h"
#include "core/json_field.h"
#include "core/ptx.h"
#include "core/sha256.h"

namespace teeny {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kParamsFile = "params.bin";
// The largest manifest written or read: about 1 KB a launch, so a million launches (a 10^5-node
// chain takes 93 MB). Compile refuses to write what teeny would refuse to read.
constexpr uint64_t kManifestLimit = uint64_t{1} << 30;

std::string kernel_file(const std::string& name) { return "kernels/" + name + ".ptx"; }

// Non-finite floats have no JSON number; they are stored as strings.
json float_json(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

// ---- reading with paths in errors ---------------------------------------------------------------

// A JSON value with its path in the manifest ("launches[2].args[0].size") for errors.
class Field : public JsonField {
 public:
  Field(const json& value, std::string path) : JsonField(value, kManifest, std::move(path)) {}
  Field(const JsonField& field) : JsonField(field) {}  // NOLINT: children of a Field are Fields

  Field operator[](const char* key) const { return JsonField::operator[](key); }
  std::vector<Field> items() const {
    const std::vector<JsonField> children = JsonField::items();
    return {children.begin(), children.end()};
  }

  int small_int() const {
    int64_t v = integer();
    if (v < 0 || v > (int64_t{1} << 30)) fail(fmt::format("{} is out of range", v));
    return static_cast<int>(v);
  }

  Expr expr() const {
    std::string text = str();
    try {
      return Expr::parse(text);
    } catch (const Error& e) {
      fail(fmt::format("bad expression '{}': {}", excerpt(text), e.message()));
    }
  }

  Shape shape() const {
    Shape out;
    for (const Field& item : items()) out.push_back(item.expr());
    return out;
  }

  DType dtype() const {
    std::string name = str();
    std::optional<DType> dtype = parse_dtype(name);
    if (!dtype) fail(fmt::format("unknown dtype '{}'", excerpt(name)));
    return *dtype;
  }

  // A param's optional "random_range": [low, high] and "unused_state": [names].
  ParamHints param_hints() const {
    ParamHints hints;
    if (has("random_range")) {
      Field range = (*this)["random_range"];
      std::vector<Field> bounds = range.items();
      if (bounds.size() != 2 || !(bounds[0].number() < bounds[1].number())) {
        range.fail("expected [low, high] with low < high");
      }
      hints.random_range = std::array<double, 2>{bounds[0].number(), bounds[1].number()};
    }
    if (has("unused_state")) hints.unused_state = (*this)["unused_state"].strings();
    return hints;
  }

  std::array<int, 3> int3() const {
    std::vector<Field> values = items();
    if (values.size() != 3) fail(fmt::format("expected 3 integers, found {}", values.size()));
    return {values[0].small_int(), values[1].small_int(), values[2].small_int()};
  }

  const json& raw() const { return value(); }
};

template <typename T>
T parse_enum(const Field& field, const std::vector<std::pair<const char*, T>>& names) {
  std::string text = field.str();
  std::vector<std::string> choices;
  for (const auto& [name, value] : names) {
    if (text == name) return value;
    choices.push_back(name);
  }
  field.fail(fmt::format("unknown value '{}'{}", excerpt(text), did_you_mean(text, choices)));
}

// ---- the checks a compiled bundle passes, made again on load ------------------------------------

// The largest dynamic shared memory any CUDA GPU gives a block (227 KiB, sm_90 and sm_100).
constexpr int64_t kMaxDynamicSmem = 232448;

constexpr const char* kAxes[] = {"x", "y", "z"};

// A dim as the spec parser accepts it (core/spec.cpp).
void check_dim(const Field& field, const BundleDim& dim, const std::vector<BundleDim>& earlier) {
  if (!is_identifier(dim.name) || is_device_symbol(dim.name)) {
    field["name"].fail(fmt::format("'{}' is not a dim name", excerpt(dim.name)));
  }
  for (const BundleDim& other : earlier) {
    if (other.name == dim.name) field["name"].fail(fmt::format("duplicate dim '{}'", dim.name));
  }
  if (dim.min < 1) field.fail(fmt::format("min must be at least 1, got {}", dim.min));
  if (dim.max < dim.min) field.fail(fmt::format("min {} is greater than max {}", dim.min, dim.max));
  if (dim.default_value < dim.min || dim.default_value > dim.max) {
    field.fail(fmt::format("default {} is outside [{}, {}]", dim.default_value, dim.min, dim.max));
  }
}

// Grids and shared memory that are constants are checked against CUDA's limits here; the others
// when the dims are bound (core/binding.cpp).
void check_launch_shape(const Field& launch, const BundleLaunch& l) {
  for (int d = 0; d < 3; ++d) {
    const int64_t limit = d == 0 ? std::numeric_limits<int32_t>::max() : 65535;
    if (auto value = l.grid[d].const_value(); value && (*value < 1 || *value > limit)) {
      launch["grid"].items()[d].fail(fmt::format("grid.{} = {} is outside [1, {}]", kAxes[d], *value, limit));
    }
  }
  if (auto bytes = l.dynamic_smem.const_value(); bytes && (*bytes < 0 || *bytes > kMaxDynamicSmem)) {
    launch["dynamic_smem"].fail(fmt::format(
        "{} bytes of dynamic shared memory is outside [0, {}], what CUDA GPUs allow", *bytes, kMaxDynamicSmem));
  }
}

// A scratch buffer as compile writes it: "<node>#<buffer>" of a node of the bundle, [elements]
// with that row stride, no view.
void check_scratch(const Field& field, const BundleTensor& tensor, bool produced_by_a_node) {
  const std::string prefix = tensor.producer + "#";
  const std::string buffer = tensor.name.substr(std::min(prefix.size(), tensor.name.size()));
  if (!produced_by_a_node || tensor.name.compare(0, prefix.size(), prefix) != 0 || !is_identifier(buffer)) {
    field["name"].fail(fmt::format("scratch buffer '{}' is not named '<node>#<buffer>' after its producer '{}'",
                                   excerpt(tensor.name), excerpt(tensor.producer)));
  }
  if (tensor.shape.size() != 1 || tensor.row_stride != tensor.shape[0]) {
    field["shape"].fail(fmt::format("scratch buffer '{}' has shape {} and row stride {}; expected one dim, its stride",
                                    excerpt(tensor.name), excerpt(shape_str(tensor.shape)),
                                    excerpt(tensor.row_stride.str())));
  }
  if (!tensor.alias_of.empty()) {
    field["alias_of"].fail(fmt::format("scratch buffer '{}' is a view", excerpt(tensor.name)));
  }
}

// Each argument at the next multiple of its alignment, with its kind's size: the kernel's
// parameter buffer as compile lays it out.
void check_arg_layout(const Field& field, const BundleArg& arg, int& end) {
  const ArgLayout layout = arg_layout(arg.kind);
  const int offset = (end + layout.align - 1) / layout.align * layout.align;
  if (arg.size != layout.size || arg.offset != offset) {
    field.fail(fmt::format("{} argument '{}' has size {} at offset {}; expected size {} at offset {}",
                           arg_kind_name(arg.kind), excerpt(arg.name), arg.size, arg.offset, layout.size, offset));
  }
  end = offset + layout.size;
}

std::string join_types(const std::vector<std::string>& types) { return fmt::format("({})", fmt::join(types, ", ")); }

std::string ntid_text(const std::optional<std::array<int, 3>>& ntid) { return ntid ? ntid_str(*ntid) : "none"; }

// A launch's arguments and block against the PTX entry of the kernel actually loaded: a kernel
// file swapped for another (checksums updated to match) is caught here, not by the driver.
void check_launch_against_ptx(const BundleLaunch& launch, const PtxEntry& entry, const std::string& where) {
  const std::string label = launch_label(launch.node, launch.index);
  int ptx_bytes = 0, manifest_bytes = 0;
  for (const PtxParam& param : entry.params)
    ptx_bytes = (ptx_bytes + param.align - 1) / param.align * param.align + param.size;
  for (const BundleArg& arg : launch.args) manifest_bytes = std::max(manifest_bytes, arg.offset + arg.size);
  if (entry.params.size() != launch.args.size()) {
    throw Error(
        fmt::format("{}: the PTX entry takes {} parameters ({} bytes) but the manifest packs {} ({} bytes) "
                    "for launch '{}'",
                    where, entry.params.size(), ptx_bytes, launch.args.size(), manifest_bytes, label));
  }
  for (size_t p = 0; p < entry.params.size(); ++p) {
    const PtxParam& param = entry.params[p];
    const BundleArg& arg = launch.args[p];
    if (param.type != arg.ptx_type || param.size != arg.size || param.align != arg_layout(arg.kind).align) {
      throw Error(
          fmt::format("{}: PTX parameter {} is {} ({} bytes, align {}) but the manifest packs argument {} "
                      "'{}' as {} ({} bytes, align {}) for launch '{}'",
                      where, p, param.type, param.size, param.align, p, arg.name, arg.ptx_type, arg.size,
                      arg_layout(arg.kind).align, label));
    }
  }
  if (std::string problem = block_problem(launch.block, entry); !problem.empty()) {
    throw Error(fmt::format("{}: launch '{}': {}", where, label, problem));
  }
}

// The manifest's account of a kernel against its loaded PTX; returns the kernel's entry.
PtxEntry check_kernel_against_ptx(const BundleKernel& kernel, const std::string& where, const std::string& file) {
  const std::vector<PtxEntry> entries = parse_ptx_entries(kernel.ptx, file);
  const PtxEntry* entry = find_visible_entry(entries, kernel.entry);
  if (entry == nullptr) {
    throw Error(fmt::format("{}: the PTX has no '.visible .entry {}'", where, excerpt(kernel.entry)));
  }
  std::vector<std::string> types;
  for (const PtxParam& param : entry->params) types.push_back(param.type);
  if (types != kernel.ptx_params) {
    throw Error(fmt::format("{}: the PTX entry's parameters are {} but the manifest lists {}", where, join_types(types),
                            excerpt(join_types(kernel.ptx_params))));
  }
  if (entry->reqntid != kernel.reqntid || entry->maxntid != kernel.maxntid) {
    throw Error(fmt::format("{}: the PTX entry has .reqntid {} and .maxntid {} but the manifest says {} and {}", where,
                            ntid_text(entry->reqntid), ntid_text(entry->maxntid), ntid_text(kernel.reqntid),
                            ntid_text(kernel.maxntid)));
  }
  return *entry;
}

}  // namespace

// ---- Bundle lookups ---------------------------------------------------------------------------

std::string scratch_tensor_name(const std::string& node, const std::string& buffer) { return node + "#" + buffer; }

const BundleTensor& Bundle::tensor(const std::string& name) const {
  for (const BundleTensor& t : tensors) {
    if (t.name == name) return t;
  }
  throw Error(fmt::format("bundle has no tensor '{}'", name));
}

const BundleNode* Bundle::find_node(const std::string& name) const {
  for (const BundleNode& node : nodes) {
    if (node.name == name) return &node;
  }
  return nullptr;
}

// ---- manifest ---------------------------------------------------------------------------------

namespace {

// Compact JSON exactly as nlohmann's dump() writes it, into one buffer: a manifest of 10^5
// launches took seconds to build as trees of json objects. nlohmann's objects keep their keys
// sorted, so the callers write each object's keys in sorted order (a test holds them to it).
class JsonWriter {
 public:
  // `name` is a key of the manifest's format, a literal: plain ASCII, nothing to escape.
  template <size_t N>
  JsonWriter& key(const char (&name)[N]) {
    separate();
    room(N + 2);
    out_[size_++] = '"';
    std::memcpy(&out_[size_], name, N - 1);
    size_ += N - 1;
    out_[size_++] = '"';
    out_[size_++] = ':';
    comma_ = false;
    return *this;
  }
  JsonWriter& string(std::string_view text) {
    separate();
    append_string(text);
    comma_ = true;
    return *this;
  }
  JsonWriter& string(const Expr& e) {
    text_.clear();
    e.append_str(text_);
    return string(text_);
  }
  template <typename Int>
  JsonWriter& integer(Int value) {
    static_assert(std::is_integral_v<Int>);
    separate();
    char digits[24];
    append(std::string_view(digits, std::to_chars(digits, digits + sizeof(digits), value).ptr - digits));
    comma_ = true;
    return *this;
  }
  // Anything else (doubles, null, attrs) as nlohmann writes it: rare, or no faster by hand; but
  // most nodes' attrs are {}, and a dump costs more than the rest of the node.
  JsonWriter& value(const json& v) {
    separate();
    append(v.is_object() && v.empty() ? "{}" : v.dump());
    comma_ = true;
    return *this;
  }
  JsonWriter& begin(char bracket) {
    separate();
    append(bracket);
    comma_ = false;
    return *this;
  }
  JsonWriter& end(char bracket) {
    append(bracket);
    comma_ = true;
    return *this;
  }
  template <typename List>
  JsonWriter& strings(const List& items) {
    begin('[');
    for (const auto& item : items) string(item);
    return end(']');
  }
  template <size_t N>
  JsonWriter& integers(const std::array<int, N>& values) {
    begin('[');
    for (int v : values) integer(v);
    return end(']');
  }
  // Text between values (the manifest's line breaks and indents), as is; no comma follows it.
  JsonWriter& raw(std::string_view text) {
    append(text);
    comma_ = false;
    return *this;
  }
  std::string take() && {
    out_.resize(size_);
    return std::move(out_);
  }
  size_t size() const { return size_; }
  // Text written before, [from, to), again at the end, as raw() writes it.
  JsonWriter& again(size_t from, size_t to) {
    room(to - from);
    std::memcpy(&out_[size_], &out_[from], to - from);
    size_ += to - from;
    comma_ = false;
    return *this;
  }
  // Room for `bytes` more at once.
  void expect(size_t bytes) {
    if (size_ + bytes > out_.size()) out_.resize(size_ + bytes);
  }

 private:
  void separate() {
    if (comma_) append(',');
  }
  // Plain printable ASCII is written as is; anything else nlohmann escapes (and checks as UTF-8).
  void append_string(std::string_view text) {
    bool plain = true;  // without an early exit, so that the loop vectorises
    for (char c : text) plain &= (static_cast<unsigned char>(c - 0x20) < 0x60) & (c != '"') & (c != '\\');
    if (!plain) {
      append(json(text).dump());
      return;
    }
    room(text.size() + 2);
    out_[size_++] = '"';
    std::memcpy(&out_[size_], text.data(), text.size());
    size_ += text.size();
    out_[size_++] = '"';
  }
  // std::string's own appends are calls into the library, a few per value; these are inline.
  void room(size_t bytes) {
    if (size_ + bytes > out_.size()) out_.resize(std::max(2 * out_.size(), size_ + bytes + 4096));
  }
  void append(char c) {
    room(1);
    out_[size_++] = c;
  }
  void append(std::string_view text) {
    room(text.size());
    std::memcpy(&out_[size_], text.data(), text.size());
    size_ += text.size();
  }

  std::string out_;   // [0, size_) written
  std::string text_;  // an expression's, reused
  size_t size_ = 0;
  bool comma_ = false;
};

void write_tensor(JsonWriter& w, const BundleTensor& t) {
  w.begin('{').key("alias_of").string(t.alias_of).key("dtype").string(dtype_name(t.dtype));
  if (t.id_bound > 0) w.key("id_bound").integer(t.id_bound);
  w.key("name").string(t.name).key("producer").string(t.producer).key("row_stride").string(t.row_stride);
  if (t.scratch) w.key("scratch").value(true);
  w.key("shape").strings(t.shape).end('}');
}

NodeRole read_role(const Field& f) {
  const std::string text = f.str();
  for (NodeRole role : {NodeRole::kForward, NodeRole::kBackward, NodeRole::kUpdate})
    if (text == node_role_name(role)) return role;
  f.fail(fmt::format("unknown node role '{}'; expected forward, backward or update", excerpt(text)));
}

void write_node(JsonWriter& w, const BundleNode& n) {
  w.begin('{').key("attrs").value(n.attrs).key("dtype");
  if (n.requested_dtype) {
    w.string(dtype_name(*n.requested_dtype));
  } else {
    w.value(nullptr);
  }
  w.key("fused_from").strings(n.fused_from).key("inputs").strings(n.inputs);
  if (!n.grad_of.empty()) w.key("grad_of").string(n.grad_of);
  w.key("name").string(n.name).key("op").string(n.op);
  if (!n.param_refs.empty()) w.key("param_refs").value(nlohmann::json(n.param_refs));
  if (n.role != NodeRole::kForward) w.key("role").string(node_role_name(n.role));
  if (!n.variants.empty()) {
    w.key("variants").begin('[');
    for (const BundleVariant& v : n.variants) {
      w.begin('{').key("variant").string(v.variant).key("when").string(v.when).key("why").string(v.why).end('}');
    }
    w.end(']');
  }
  w.end('}');
}

void write_ntid(JsonWriter& w, const std::optional<std::array<int, 3>>& ntid) {
  if (ntid) {
    w.integers(*ntid);
  } else {
    w.value(nullptr);
  }
}

void write_kernel(JsonWriter& w, const BundleKernel& k) {
  w.begin('{').key("entry").string(k.entry).key("file").string(kernel_file(k.name)).key("maxntid");
  write_ntid(w, k.maxntid);
  w.key("name").string(k.name).key("ptx_params").strings(k.ptx_params).key("reqntid");
  write_ntid(w, k.reqntid);
  w.key("source").begin('{').key("file").string(k.source_file).key("line").integer(k.source_line).end('}');
  w.key("target").string(k.target).end('}');
}

// The keys every argument has, from "kind" to "size", sorted in with its kind's own keys.
// `marks` gets where the tensor's value begins and ends, for a pointer.
void write_arg(JsonWriter& w, const BundleArg& a, std::vector<size_t>& marks) {
  const bool map = a.kind == ArgKind::kTensorMap;
  w.begin('{');
  if (map) w.key("box").begin('[').integer(a.map.box_cols).integer(a.map.box_rows).end(']');
  w.key("c_type").string(a.c_type);
  if (map) w.key("cols").string(a.map.cols);
  if (is_pointer(a.kind)) w.key("dtype").string(dtype_name(a.dtype));
  w.key("kind").string(arg_kind_name(a.kind)).key("name").string(a.name);
  if (map) w.key("of").string(a.map.of);
  w.key("offset").integer(a.offset).key("ptx_type").string(a.ptx_type);
  if (map) w.key("row_stride").string(a.map.row_stride).key("rows").string(a.map.rows);
  w.key("size").integer(a.size);
  if (map) w.key("swizzle").integer(a.map.swizzle);
  if (is_pointer(a.kind)) {
    marks.push_back(w.key("tensor").size());
    marks.push_back(w.string(a.tensor).size());
  }
  if (a.kind == ArgKind::kF32) w.key("value").value(float_json(a.fvalue));
  if (a.kind == ArgKind::kI32 || a.kind == ArgKind::kI64) w.key("value").string(a.value);
  w.end('}');
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

bool same_but_tensor(const BundleArg& a, const BundleArg& b) {
  return a.kind == b.kind && a.name == b.name && a.c_type == b.c_type && a.ptx_type == b.ptx_type && a.size == b.size &&
         a.offset == b.offset && a.value == b.value && same_bits(a.fvalue, b.fvalue) && a.dtype == b.dtype &&
         a.map.of == b.map.of && a.map.cols == b.map.cols && a.map.rows == b.map.rows &&
         a.map.row_stride == b.map.row_stride && a.map.box_cols == b.map.box_cols && a.map.box_rows == b.map.box_rows &&
         a.map.swizzle == b.map.swizzle;
}

// Launches: those of nodes alike (a chain of one op) differ only in their node, index and
// tensors. The text of a launch is kept as where it lies in the writer's text between those
// values, and a launch that is the same but for them is written from there, with its own.
class LaunchWriter {
 public:
  explicit LaunchWriter(const std::vector<BundleKernel>& kernels) : kernels_(kernels) {}

  void write(JsonWriter& w, const BundleLaunch& l) {
    if (kept_ && same_but_names(*kept_, l)) {
      write_again(w, l);
      return;
    }
    kept_ = &l;
    marks_.assign(1, w.size());
    w.begin('{').key("args").begin('[');
    for (const BundleArg& a : l.args) write_arg(w, a, marks_);
    w.end(']').key("block").integers(l.block).key("bytes").string(l.bytes);
    w.key("dynamic_smem").string(l.dynamic_smem).key("flops").string(l.flops).key("grid").strings(l.grid);
    marks_.push_back(w.key("index").size());
    marks_.push_back(w.integer(l.index).size());
    marks_.push_back(w.key("kernel").string(kernels_.at(l.kernel).name).key("node").size());
    marks_.push_back(w.string(l.node).size());
    marks_.push_back(w.key("when").string(l.when).size());
    w.end('}');
  }

 private:
  static bool same_but_names(const BundleLaunch& a, const BundleLaunch& b) {
    return a.kernel == b.kernel && a.block == b.block && a.grid == b.grid && a.dynamic_smem == b.dynamic_smem &&
           a.bytes == b.bytes && a.flops == b.flops && a.when == b.when &&
           std::equal(a.args.begin(), a.args.end(), b.args.begin(), b.args.end(), same_but_tensor);
  }

  // marks_: the launch's start, then each value's begin and end, then where its '}' is.
  void write_again(JsonWriter& w, const BundleLaunch& l) {
    size_t mark = 0;
    auto text_to_next_value = [&] {
      w.again(marks_[mark], marks_[mark + 1]);
      mark += 2;
    };
    for (const BundleArg& a : l.args) {
      if (!is_pointer(a.kind)) continue;
      text_to_next_value();
      w.string(a.tensor);
    }
    text_to_next_value();
    w.integer(l.index);
    text_to_next_value();
    w.string(l.node);
    w.again(marks_[mark], marks_[mark + 1]).end('}');
  }

  const std::vector<BundleKernel>& kernels_;
  const BundleLaunch* kept_ = nullptr;
  std::vector<size_t> marks_;
};

void write_param(JsonWriter& w, const BundleParam& p) {
  const bool host = p.init == ParamInit::kHost;
  w.begin('{').key("dtype").string(dtype_name(p.dtype)).key("init").string(param_init_name(p.init));
  w.key("name").string(p.name).key("node").string(p.node);
  if (host) w.key("offset").integer(p.offset);
  if (const auto& range = p.hints.random_range) {
    w.key("random_range").begin('[').value((*range)[0]).value((*range)[1]).end(']');
  }
  w.key("shape").strings(p.shape);
  if (host) w.key("size").integer(p.size);
  w.key("slot").string(p.slot);
  if (!p.hints.unused_state.empty()) w.key("unused_state").strings(p.hints.unused_state);
  w.end('}');
}

// A list of the manifest, written an entry at a time.
struct ManifestList {
  const char* key;
  size_t size;
  std::function<void(JsonWriter&, size_t)> write;
};

std::vector<ManifestList> manifest_lists(const Bundle& b) {
  return {{"tensors", b.tensors.size(), [&](JsonWriter& w, size_t i) { write_tensor(w, b.tensors[i]); }},
          {"nodes", b.nodes.size(), [&](JsonWriter& w, size_t i) { write_node(w, b.nodes[i]); }},
          {"kernels", b.kernels.size(), [&](JsonWriter& w, size_t i) { write_kernel(w, b.kernels[i]); }},
          {"launches", b.launches.size(),
           [&, launches = std::make_shared<LaunchWriter>(b.kernels)](JsonWriter& w, size_t i) {
             launches->write(w, b.launches[i]);
           }},
          {"params", b.params.size(), [&](JsonWriter& w, size_t i) { write_param(w, b.params[i]); }}};
}

// The manifest but for its lists, with the kernels' checksums given (one per kernel).
json manifest_head(const Bundle& bundle, const std::vector<std::string>& kernel_sha256) {
  json m;
  m["format_version"] = bundle.format_version;
  m["teeny_version"] = bundle.teeny_version;
  m["nvrtc_version"] = bundle.nvrtc_version;
  m["arch"] = bundle.arch;
  m["nvrtc_options"] = bundle.nvrtc_options;
  m["graph"] = {{"name", bundle.graph_name}, {"spec", bundle.spec_path}};
  if (!bundle.tuning.empty()) m["tuning"] = bundle.tuning;
  if (!bundle.loss.empty()) m["loss"] = bundle.loss;
  if (!bundle.gradients.empty()) m["gradients"] = bundle.gradients;

  json dims = json::array();
  for (const BundleDim& d : bundle.dims) {
    dims.push_back({{"name", d.name}, {"min", d.min}, {"max", d.max}, {"default", d.default_value}});
  }
  m["dims"] = std::move(dims);
  m["fixed"] = json::object();
  for (const auto& [name, value] : bundle.fixed) m["fixed"][name] = value;
  m["inputs"] = bundle.inputs;
  m["outputs"] = bundle.outputs;
  m["params_bin_size"] = bundle.param_bytes.size();

  json checksums = json::object();
  for (size_t k = 0; k < bundle.kernels.size(); ++k) checksums[kernel_file(bundle.kernels[k].name)] = kernel_sha256[k];
  checksums[kParamsFile] =
      sha256_hex(std::string_view(reinterpret_cast<const char*>(bundle.param_bytes.data()), bundle.param_bytes.size()));
  m["checksums"] = std::move(checksums);
  return m;
}

// The manifest's text: compact JSON as nlohmann writes it, with each entry of a list on a line of
// its own. Written an entry at a time: the whole tree of a bundle of 10^5 launches took seconds to
// build and gigabytes to hold, and its indented text was 1.8 KB a launch.
std::string manifest_text(const Bundle& bundle, const std::vector<std::string>& kernel_sha256) {
  json head = manifest_head(bundle, kernel_sha256);
  const std::vector<ManifestList> lists = manifest_lists(bundle);
  for (const ManifestList& list : lists) head[list.key] = nullptr;  // its place among the keys, in order
  JsonWriter w;
  w.raw("{");
  const char* separator = "\n  ";
  for (const auto& [key, value] : head.items()) {
    w.raw(separator).raw(json(key).dump()).raw(": ");
    separator = ",\n  ";
    auto list = std::find_if(lists.begin(), lists.end(), [&key = key](const ManifestList& l) { return key == l.key; });
    if (list == lists.end()) {
      w.raw(value.dump());
      continue;
    }
    w.raw("[");
    for (size_t i = 0; i < list->size; ++i) {
      const size_t before = w.size();
      w.raw(i == 0 ? "\n    " : ",\n    ");
      list->write(w, i);
      // Room for the rest of the list at its first entry's size, and a quarter more: the buffer
      // grown by doubling was copied and cleared several times over for a large bundle.
      if (i == 0) w.expect((w.size() - before) * (list->size - 1) / 4 * 5);
    }
    w.raw(list->size == 0 ? "]" : "\n  ]");
  }
  w.raw("\n}\n");
  return std::move(w).take();
}

std::vector<std::string> recorded_sha256(const std::vector<BundleKernel>& kernels) {
  std::vector<std::string> sha256;
  for (const BundleKernel& k : kernels) sha256.push_back(k.sha256);
  return sha256;
}

}  // namespace

// The manifest's text read back: what write_bundle writes is all there is to compare.
json bundle_to_json(const Bundle& bundle) {
  return json::parse(manifest_text(bundle, recorded_sha256(bundle.kernels)));
}

Bundle bundle_from_json(const json& manifest) {
  Field root(manifest, "");
  Bundle b;
  b.format_version = static_cast<int>(root["format_version"].integer());
  if (b.format_version != kBundleFormatVersion) {
    root["format_version"].fail(
        fmt::format("bundle format version {} is not supported (this teeny reads version "
                    "{}); recompile the graph with this teeny",
                    b.format_version, kBundleFormatVersion));
  }
  b.teeny_version = root["teeny_version"].str();
  b.nvrtc_version = root["nvrtc_version"].str();
  b.arch = root["arch"].str();
  b.nvrtc_options = root["nvrtc_options"].strings();
  b.graph_name = root["graph"]["name"].str();
  b.spec_path = root["graph"]["spec"].str();
  if (root.has("tuning")) b.tuning = root["tuning"].str();
  if (root.has("loss")) b.loss = root["loss"].str();
  if (root.has("gradients")) {
    for (const auto& [name, tensor] : root["gradients"].raw().items()) {
      if (!tensor.is_string()) root["gradients"].fail(fmt::format("'{}' must name a tensor", excerpt(name)));
      b.gradients.emplace(name, tensor.get<std::string>());
    }
  }
  for (const Field& d : root["dims"].items()) {
    BundleDim dim{d["name"].str(), d["min"].integer(), d["max"].integer(), d["default"].integer()};
    check_dim(d, dim, b.dims);
    b.dims.push_back(std::move(dim));
  }
  Field fixed = root["fixed"];
  if (!fixed.raw().is_object()) fixed.fail("expected an object of dim values");
  for (const auto& [name, value] : fixed.raw().items()) {
    const Field field(value, "fixed." + excerpt(name));
    const int64_t bound = field.integer();
    auto dim =
        std::find_if(b.dims.begin(), b.dims.end(), [&name = name](const BundleDim& d) { return d.name == name; });
    if (dim == b.dims.end()) field.fail("not a dim of the bundle");
    if (bound < dim->min || bound > dim->max) {
      field.fail(fmt::format("{} is outside [{}, {}]", bound, dim->min, dim->max));
    }
    b.fixed[name] = bound;
  }
  b.inputs = root["inputs"].strings();
  b.outputs = root["outputs"].strings();

  std::map<std::string, size_t> tensor_index;
  for (const Field& t : root["tensors"].items()) {
    BundleTensor tensor{t["name"].str(),
                        t["dtype"].dtype(),
                        t["shape"].shape(),
                        t["row_stride"].expr(),
                        t["producer"].str(),
                        t["alias_of"].str(),
                        t.has("id_bound") ? t["id_bound"].integer() : 0,
                        t.has("scratch") && t["scratch"].boolean()};
    if (!tensor_index.emplace(tensor.name, b.tensors.size()).second)
      t["name"].fail(fmt::format("duplicate tensor '{}'", tensor.name));
    b.tensors.push_back(std::move(tensor));
  }
  // A graph input or output, or a launch's input or output argument: any tensor but a scratch buffer.
  auto check_tensor = [&](const Field& f) {
    std::string name = f.str();
    auto it = tensor_index.find(name);
    if (it == tensor_index.end()) f.fail(fmt::format("unknown tensor '{}'", excerpt(name)));
    if (b.tensors[it->second].scratch) f.fail(fmt::format("'{}' is a scratch buffer", excerpt(name)));
    return name;
  };
  for (const Field& input : root["inputs"].items()) check_tensor(input);
  for (const Field& output : root["outputs"].items()) check_tensor(output);

  // Nodes in execution order: each reads graph inputs and the outputs of nodes before it.
  const std::set<std::string> graph_inputs(b.inputs.begin(), b.inputs.end());
  std::set<std::string> available = graph_inputs;
  for (const Field& n : root["nodes"].items()) {
    BundleNode node;
    node.name = n["name"].str();
    if (n.has("role")) node.role = read_role(n["role"]);
    auto output = tensor_index.find(node.name);
    const bool has_output = output != tensor_index.end() && b.tensors[output->second].producer == node.name &&
                            !b.tensors[output->second].scratch;
    // An update writes params in place; it may have no output.
    if (available.count(node.name) || (!has_output && node.role != NodeRole::kUpdate)) {
      n["name"].fail(
          fmt::format("node '{}' is defined twice or has no output tensor produced by it", excerpt(node.name)));
    }
    if (n.has("grad_of")) node.grad_of = n["grad_of"].str();
    if (n.has("param_refs")) {
      for (const auto& [slot, param] : n["param_refs"].raw().items()) {
        if (!param.is_string()) n["param_refs"].fail(fmt::format("slot '{}' must name a param", excerpt(slot)));
        node.param_refs.emplace(slot, param.get<std::string>());
      }
    }
    node.op = n["op"].str();
    node.attrs = n["attrs"].raw();
    node.inputs = n["inputs"].strings();
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!available.count(node.inputs[i])) {
        n["inputs"].items()[i].fail(
            fmt::format("'{}' is neither a graph input nor the output of an earlier node", excerpt(node.inputs[i])));
      }
    }
    node.fused_from = n["fused_from"].strings();
    if (!n["dtype"].raw().is_null()) node.requested_dtype = n["dtype"].dtype();
    if (n.has("variants")) {
      for (const Field& v : n["variants"].items())
        node.variants.push_back({v["variant"].str(), v["why"].str(), v["when"].expr()});
    }
    available.insert(node.name);
    b.nodes.push_back(std::move(node));
  }
  auto is_node = [&](const std::string& name) { return available.count(name) && !graph_inputs.count(name); };
  const std::vector<Field> tensor_fields = root["tensors"].items();
  for (size_t t = 0; t < b.tensors.size(); ++t) {
    const BundleTensor& tensor = b.tensors[t];
    // A graph input has no producer; a scratch buffer is "<node>#<buffer>" of its node's; any other
    // tensor is the output of the node of its name.
    if (tensor.scratch) {
      check_scratch(tensor_fields[t], tensor, is_node(tensor.producer));
      continue;
    }
    const bool is_input = graph_inputs.count(tensor.name) > 0;
    if (is_input ? !tensor.producer.empty() : tensor.producer != tensor.name || !available.count(tensor.name)) {
      tensor_fields[t]["producer"].fail(
          fmt::format("tensor '{}' is not produced by node '{}'", excerpt(tensor.name), excerpt(tensor.producer)));
    }
    if (!tensor.alias_of.empty()) check_tensor(tensor_fields[t]["alias_of"]);
  }
  // A scratch argument passes a buffer of its launch's own node.
  auto check_scratch_arg = [&](const Field& f, const std::string& node) {
    std::string name = f.str();
    auto it = tensor_index.find(name);
    if (it == tensor_index.end() || !b.tensors[it->second].scratch || b.tensors[it->second].producer != node) {
      f.fail(fmt::format("'{}' is not a scratch buffer of node '{}'", excerpt(name), excerpt(node)));
    }
  };

  Field checksums = root["checksums"];
  std::map<std::string, int> kernel_index;
  for (const Field& k : root["kernels"].items()) {
    BundleKernel kernel;
    kernel.name = k["name"].str();
    if (!is_identifier(kernel.name)) {
      k["name"].fail(fmt::format("kernel name '{}' is not an identifier", excerpt(kernel.name)));
    }
    if (!kernel_index.emplace(kernel.name, static_cast<int>(b.kernels.size())).second) {
      k["name"].fail(fmt::format("duplicate kernel '{}'", kernel.name));
    }
    kernel.entry = k["entry"].str();
    kernel.target = k["target"].str();
    kernel.source_file = k["source"]["file"].str();
    kernel.source_line = static_cast<int>(k["source"]["line"].integer());
    if (!k["reqntid"].raw().is_null()) kernel.reqntid = k["reqntid"].int3();
    if (!k["maxntid"].raw().is_null()) kernel.maxntid = k["maxntid"].int3();
    kernel.ptx_params = k["ptx_params"].strings();
    kernel.sha256 = checksums[kernel_file(kernel.name).c_str()].str();
    b.kernels.push_back(std::move(kernel));
  }

  for (const Field& l : root["launches"].items()) {
    BundleLaunch launch;
    launch.node = l["node"].str();
    if (!is_node(launch.node)) l["node"].fail(fmt::format("unknown node '{}'", excerpt(launch.node)));
    launch.index = l["index"].small_int();
    std::string kernel = l["kernel"].str();
    auto it = kernel_index.find(kernel);
    if (it == kernel_index.end()) l["kernel"].fail(fmt::format("unknown kernel '{}'", excerpt(kernel)));
    launch.kernel = it->second;
    launch.block = l["block"].int3();
    // CUDA's limits here; the kernel's .reqntid and .maxntid once its PTX is loaded (read_bundle).
    if (std::string problem = block_problem(launch.block, PtxEntry{}); !problem.empty()) l["block"].fail(problem);
    std::vector<Field> grid = l["grid"].items();
    if (grid.size() != 3) l["grid"].fail(fmt::format("expected 3 expressions, found {}", grid.size()));
    for (int d = 0; d < 3; ++d) launch.grid[d] = grid[d].expr();
    launch.dynamic_smem = l["dynamic_smem"].expr();
    launch.when = l["when"].expr();
    check_launch_shape(l, launch);
    int args_end = 0;
    for (const Field& a : l["args"].items()) {
      BundleArg arg;
      arg.kind = parse_enum<ArgKind>(a["kind"], {{"input", ArgKind::kInput},
                                                 {"param", ArgKind::kParam},
                                                 {"output", ArgKind::kOutput},
                                                 {"i32", ArgKind::kI32},
                                                 {"i64", ArgKind::kI64},
                                                 {"f32", ArgKind::kF32},
                                                 {"tensor_map", ArgKind::kTensorMap},
                                                 {"scratch", ArgKind::kScratch},
                                                 {"param_out", ArgKind::kParamOut}});
      arg.name = a["name"].str();
      arg.c_type = a["c_type"].str();
      arg.ptx_type = a["ptx_type"].str();
      arg.size = a["size"].small_int();
      arg.offset = a["offset"].small_int();
      check_arg_layout(a, arg, args_end);
      if (is_pointer(arg.kind)) {
        arg.tensor = a["tensor"].str();
        arg.dtype = a["dtype"].dtype();
        if (arg.kind == ArgKind::kScratch) {
          check_scratch_arg(a["tensor"], launch.node);
        } else if (arg.kind != ArgKind::kParam && arg.kind != ArgKind::kParamOut) {
          check_tensor(a["tensor"]);
        }
      } else if (arg.kind == ArgKind::kF32) {
        arg.fvalue = a["value"].number();
      } else if (arg.kind == ArgKind::kTensorMap) {
        arg.map.of = a["of"].str();
        arg.map.cols = a["cols"].expr();
        arg.map.rows = a["rows"].expr();
        arg.map.row_stride = a["row_stride"].expr();
        std::vector<Field> box = a["box"].items();
        if (box.size() != 2) a["box"].fail(fmt::format("expected 2 integers [cols, rows], found {}", box.size()));
        arg.map.box_cols = box[0].small_int();
        arg.map.box_rows = box[1].small_int();
        arg.map.swizzle = a["swizzle"].small_int();
      } else {
        arg.value = a["value"].expr();
      }
      launch.args.push_back(std::move(arg));
    }
    launch.bytes = l["bytes"].expr();
    launch.flops = l["flops"].expr();
    b.launches.push_back(std::move(launch));
  }

  const int64_t params_size = root["params_bin_size"].integer();
  if (params_size < 0) root["params_bin_size"].fail(fmt::format("{} is negative", params_size));
  std::set<std::string> param_names;
  for (const Field& p : root["params"].items()) {
    BundleParam param;
    param.name = p["name"].str();
    param.node = p["node"].str();
    if (!is_node(param.node)) p["node"].fail(fmt::format("unknown node '{}'", excerpt(param.node)));
    if (!param_names.insert(param.name).second) {
      p["name"].fail(fmt::format("duplicate parameter '{}'", excerpt(param.name)));
    }
    param.slot = p["slot"].str();
    param.dtype = p["dtype"].dtype();
    param.shape = p["shape"].shape();
    param.init = parse_enum<ParamInit>(
        p["init"], {{"trained", ParamInit::kTrained}, {"zero", ParamInit::kZero}, {"host", ParamInit::kHost}});
    if (param.init == ParamInit::kHost) {
      int64_t offset = p["offset"].integer(), size = p["size"].integer();
      if (offset < 0 || size < 0) p.fail(fmt::format("offset {} and size {} must not be negative", offset, size));
      if (offset > params_size || size > params_size - offset) {
        p.fail(fmt::format("bytes [{}, {}) lie outside {} ({} bytes)", offset, uint64_t(offset) + uint64_t(size),
                           kParamsFile, params_size));
      }
      param.offset = static_cast<uint64_t>(offset);
      param.size = static_cast<uint64_t>(size);
    }
    param.hints = p.param_hints();
    b.params.push_back(std::move(param));
  }
  for (const BundleLaunch& launch : b.launches) {
    for (const BundleArg& arg : launch.args) {
      if (arg.kind != ArgKind::kParam && arg.kind != ArgKind::kParamOut) continue;
      if (!param_names.count(arg.tensor)) {
        throw Error(fmt::format("{}: launch of node '{}' uses unknown param '{}'", kManifest, launch.node,
                                excerpt(arg.tensor)));
      }
    }
  }
  return b;
}

// ---- files ------------------------------------------------------------------------------------

void write_bundle(const Bundle& bundle, const std::string& path) {
  auto fail = [&](const std::string& problem) {
    return Error(fmt::format("cannot write bundle '{}': {}", path, problem));
  };
  std::error_code ec;
  const fs::path target(path);
  if (fs::exists(target, ec) && !(fs::is_directory(target, ec) && fs::exists(target / kManifest, ec))) {
    throw fail("it exists and is not a teeny bundle (no manifest.json); not replacing it");
  }
  for (const BundleKernel& kernel : bundle.kernels) {
    if (!is_identifier(kernel.name)) throw fail(fmt::format("kernel name '{}' is not an identifier", kernel.name));
  }
  write_directory_atomically(path, "bundle", [&](const fs::path& temp) {
    fs::create_directory(temp / "kernels", ec);
    if (ec) throw Error(fmt::format("cannot create {}: {}", (temp / "kernels").string(), ec.message()));
    std::vector<std::string> written_sha256;  // of the bytes written, whatever the in-memory bundle said
    for (const BundleKernel& kernel : bundle.kernels) {
      write_new_file(temp / kernel_file(kernel.name), kernel.ptx);
      written_sha256.push_back(sha256_hex(kernel.ptx));
    }
    write_new_file(temp / kParamsFile, std::string_view(reinterpret_cast<const char*>(bundle.param_bytes.data()),
                                                        bundle.param_bytes.size()));
    // The manifest goes last: a directory with a manifest is complete.
    const std::string manifest = manifest_text(bundle, written_sha256);
    if (manifest.size() > kManifestLimit) {
      throw Error(fmt::format("its manifest would take {} MiB, more than the {} MiB limit of what teeny reads",
                              manifest.size() >> 20, kManifestLimit >> 20));
    }
    write_new_file(temp / kManifest, manifest);
  });
}

Bundle read_bundle(const std::string& path) {
  const fs::path dir(path);
  auto fail = [&](const std::string& problem) { return Error(fmt::format("bundle '{}': {}", path, problem)); };
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw fail(fs::exists(dir, ec) ? "not a directory" : "no such directory");
  }
  auto open = [&](const std::string& name) {
    if (!fs::exists(dir / name, ec)) throw fail(fmt::format("missing file {}", name));
    return std::make_unique<InputFile>((dir / name).string(), "bundle file");
  };

  const std::string text = open(kManifest)->read_all(kManifestLimit);
  Bundle bundle;
  json manifest;
  try {
    manifest = parse_json_text(text, kManifest);
    bundle = bundle_from_json(manifest);
  } catch (const Error& e) {
    throw fail(e.message());
  }

  auto verify = [&](const std::string& name, const std::string& data, const std::string& expected) {
    std::string actual = sha256_hex(data);
    if (actual != expected) {
      throw fail(fmt::format("{} has been altered: its SHA-256 is {}, the manifest says {}", name, actual, expected));
    }
  };
  std::vector<PtxEntry> entries;
  std::vector<std::string> wheres;
  for (BundleKernel& kernel : bundle.kernels) {
    const std::string file = kernel_file(kernel.name);
    kernel.ptx = open(file)->read_all();
    verify(file, kernel.ptx, kernel.sha256);
    wheres.push_back(fmt::format("kernel '{}' in {}", kernel.name, (dir / file).string()));
    entries.push_back(check_kernel_against_ptx(kernel, wheres.back(), (dir / file).string()));
  }
  for (const BundleLaunch& launch : bundle.launches) {
    check_launch_against_ptx(launch, entries[launch.kernel], wheres[launch.kernel]);
  }
  const auto params_file = open(kParamsFile);
  const uint64_t declared = manifest["params_bin_size"].get<uint64_t>();
  if (params_file->size() != declared) {
    throw fail(fmt::format("{} is {} bytes, the manifest says {}", kParamsFile, params_file->size(), declared));
  }
  const std::string params = params_file->read(0, declared);
  std::string params_sha;
  try {
    params_sha = Field(manifest, "")["checksums"][kParamsFile].str();
  } catch (const Error& e) {
    throw fail(e.message());
  }
  verify(kParamsFile, params, params_sha);
  bundle.param_bytes.assign(params.begin(), params.end());
  return bundle;
}

}  // namespace teeny
