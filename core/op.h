// The op interface: one op = one plain struct of functions (design.md, "The op interface").
//
// core/ never names an op. Ops fill in an OpDef in their own file under ops/ and are listed
// once in ops/ops.inc. Graph-level (shapes, attrs) and launch-level (kernels, launches, args,
// params, row stride, cost) descriptions are both here, but launches are *data*: typed
// argument lists and symbolic grids that compile verifies against the kernel's C signature
// and PTX, and that the bundle stores, so any teeny binary can run any bundle.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/attrs.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/expr.h"

namespace teeny {

// A symbolic tensor: element type, shape, and the row stride in elements (distance between
// consecutive rows of the last dim). Natural stride = last dim; an op may pad it.
struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  Expr row_stride;  // elements; equals shape.back() unless padded (scalar: 1)
};
TensorType contiguous(DType dtype, Shape shape);  // row_stride = natural
bool is_padded(const TensorType& type);           // row_stride != last dim

// ---- size limits (docs/spec.md, "Limits") ------------------------------------------------
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;   // one tensor or param: 1 TiB
inline constexpr int64_t kMaxBindingBytes = int64_t{1} << 42;  // a binding's activations and params: 4 TiB

// The bytes of a tensor of `dtype` and (positive) `shape` whose rows are `row_stride` elements
// apart: rows x row stride x element size. Throws Error naming the dtype and shape where that is
// over kMaxTensorBytes or does not fit in 64 bits.
int64_t tensor_bytes(DType dtype, const std::vector<int64_t>& shape, int64_t row_stride);
// Why no tensor of `type` can exist, or "": its constant extents and row stride alone (each
// symbolic one is at least 1) take more than kMaxTensorBytes.
std::string tensor_size_problem(const TensorType& type);

// What an op sees at graph level: the node's name, attrs and input types.
struct OpContext {
  std::string node;
  Attrs attrs;
  std::vector<TensorType> inputs;
  std::optional<DType> requested_dtype;  // the node's optional `dtype:` key
  TensorType output;                     // filled in after infer(); valid in params/lower/cost
  // The compile target's SM number (--arch sm_90 -> 90): lower may pick kernels that need it.
  int target_sm = 90;
  // Tunable ops (OpDef::tuning): the variant `lower` builds, for every binding; "" : the op's own
  // choice (its heuristic, which may pick per range of the dims through each launch's `when`).
  std::string variant{};
};

// An error from an op's shape rule or attr checks, pointing at a key of the node
// ("inputs", "attrs.out_features", ...). core adds file:line:col and the node name.
struct OpError : Error {
  OpError(std::string key, std::string message) : Error(std::move(message)), key(std::move(key)) {}
  std::string key;
};

// ---- params ---------------------------------------------------------------------------
enum class ParamInit {
  kTrained,  // loaded by name `<node>.<slot>` from weights; zero (or random) otherwise
  kZero,     // always zero
  kHost,     // host-computed bytes (little-endian, in the param's dtype), stored in the bundle
};

const char* param_init_name(ParamInit init);  // "trained", "zero", "host"

// What a run needs to know about a trained param beyond its shape; ops declare it, so that core
// needs no rule for any particular op. Stored in the bundle.
struct ParamHints {
  // --init random draws uniformly from [low, high) (e.g. a variance must be positive); absent:
  // ±1/sqrt(fan_in) with fan_in = numel / shape[0] (PyTorch's default for linear and conv
  // weights; ±1 for a rank-1 param).
  std::optional<std::array<double, 2>> random_range;
  // State the PyTorch module saves beside this param that the op never reads (BatchNorm's
  // num_batches_tracked): a weights file may hold it under the param's prefix
  // ("bn1.num_batches_tracked" beside "bn1.running_mean"), and loading skips it.
  std::vector<std::string> unused_state;
  // A buffer of the PyTorch module, not a parameter (BatchNorm's running statistics): loaded from
  // weights and saved in checkpoints by name like a trained param, but never trained: a training
  // graph computes no gradient for it and no optimizer steps it (an op's OpDef::train_mode may add
  // an update that writes it).
  bool buffer = false;
};

struct ParamSpec {
  std::string slot;  // PyTorch slot name: "weight", "bias", "running_mean", "anchor_x", ...
  Shape shape;
  DType dtype = DType::kF32;
  ParamInit init = ParamInit::kTrained;
  std::vector<uint8_t> host_bytes;  // kHost only; compile checks size == numel * dtype size
  ParamHints hints{};
};

// Throws Error where an op's output or one of its params is over the size limit at every
// binding (tensor_size_problem), naming which: "parameter 'weight': f32 [...] takes ...".
void check_sizes(const TensorType& output, const std::vector<ParamSpec>& params);

// The weights-file names of `hints.unused_state` beside the param named `param_name`.
std::vector<std::string> unused_state_names(const std::string& param_name, const ParamHints& hints);

// ---- kernels and launches ---------------------------------------------------------------
// One kernel argument, typed and named. The C type follows from kind + dtype:
//   kInput / kParam -> "const T*", kOutput -> "T*", kI32 -> "int", kI64 -> "long long",
//   kF32 -> "float", kTensorMap -> "const __grid_constant__ tn_tensor_map", kScratch -> "T*".
// Names must match the kernel's C parameter names.
//
// kTensorMap: a CUtensorMap (128 bytes, 64-byte aligned, passed by value) that the runtime encodes
// once per bound launch with cuTensorMapEncodeTiled: a 2-D row-major view of the pointer argument
// named `of` (an input/param/output arg of the same launch; its dtype is the element type).
// Out-of-bounds reads of a box fill zeros. ops/kernels/tma.cuh defines the C type.
//
// kScratch: a buffer of the node's own lowering (Lowering::scratch, named by `slot`), "T*"; its
// dtype must be the buffer's.
//
// kParamOut: a param slot the kernel updates in place, "T*": only update ops (OpDef::update, an
// optimizer step) have them.
enum class ArgKind { kInput, kParam, kOutput, kI32, kI64, kF32, kTensorMap, kScratch, kParamOut };
struct TensorMapSpec {
  std::string of;                  // name of the pointer arg in the same launch
  Expr cols, rows;                 // extents in elements; cols is the contiguous one
  Expr row_stride;                 // elements between consecutive rows (>= cols)
  int box_cols = 0, box_rows = 0;  // the tile one TMA copy moves (each 1..256)
  // Shared-memory swizzle in bytes: 0, 32, 64 or 128 (box_cols * elem bytes must be <= it when
  // nonzero).
  int swizzle = 128;
};
struct KernelArg {
  ArgKind kind = ArgKind::kInput;
  std::string name;
  int input_index = -1;       // kInput: which node input
  std::string slot;           // kParam: which param slot; kScratch: which scratch buffer
  Expr value;                 // kI32 / kI64: symbolic value
  double fvalue = 0.0;        // kF32
  DType dtype = DType::kF32;  // pointee type for pointers
  TensorMapSpec map;          // kTensorMap
};
KernelArg input(int index, std::string name, DType dtype);
KernelArg param(std::string slot, std::string name, DType dtype);
KernelArg param_out(std::string slot, std::string name, DType dtype);
KernelArg output(std::string name, DType dtype);
KernelArg i32(std::string name, Expr value);
KernelArg i64(std::string name, Expr value);
KernelArg f32(std::string name, double value);
KernelArg tensor_map(std::string name, TensorMapSpec spec);
KernelArg scratch(std::string buffer, std::string name, DType dtype);
std::string arg_c_type(const KernelArg& arg);  // "const float*", "int", ...
// "input", "param", "output", "i32", "i64", "f32", "tensor_map", "scratch"
const char* arg_kind_name(ArgKind kind);
bool is_pointer(ArgKind kind);  // kInput, kParam, kOutput, kScratch

// Size and alignment of an argument in the kernel's parameter buffer: pointers 8, int 4,
// long long 8, float 4, tensor map 128 aligned to 64.
struct ArgLayout {
  int size = 0;
  int align = 0;
};
ArgLayout arg_layout(ArgKind kind);
inline ArgLayout arg_layout(const KernelArg& arg) { return arg_layout(arg.kind); }

// Why `spec` cannot be encoded as a tensor map over elements of `dtype`, or "" if it can: the box
// and swizzle limits, and cuTensorMapEncodeTiled's extent and stride rules wherever cols, rows and
// row_stride are constants (all of them once dims are bound).
std::string tensor_map_problem(const TensorMapSpec& spec, DType dtype);

// One kernel: a device template in a kernel header (ops/kernels/*.cuh, real CUDA embedded in the
// binary and handed to NVRTC as in-memory headers) and the typed parameter list of its entry.
// compile generates the translation unit, so the entry's C signature is written nowhere by hand:
//   #include "<header>"
//   extern "C" __global__ void __launch_bounds__(max_threads[, min_blocks]) <symbol>(<params>) {
//     <function>(<param names, in order>);
//   }
// and checks that every launch of the kernel passes exactly `params` (kinds, dtypes, names);
// NVRTC checks the call against the template.
struct KernelSource {
  std::string name;    // base name, e.g. "linear_f32_bm64_bn64"
  std::string source;  // the translation unit: compile generates it (kernel_translation_unit)
  std::string file;    // op source file and line that generated it, for NVRTC errors
  int line = 0;
  // Uses instructions of the target's arch-specific variant only (sm_90a: wgmma, setmaxnreg):
  // compiled for `<arch>a`, whose PTX loads only on exactly that SM version.
  bool arch_specific = false;
  std::string header{};    // e.g. "elementwise.cuh"
  std::string function{};  // the template the entry calls, e.g. "tn_unary<float, 256, 4, tn_relu>"
  std::vector<KernelArg> params{};
  int max_threads = 0;  // __launch_bounds__ (the PTX .maxntid compile checks the block against)
  int min_blocks = 0;   // __launch_bounds__'s second argument; 0: none
};

// A kernel header by its include name ("elementwise.cuh") and text; the registry holds them.
struct KernelHeader {
  std::string name;
  std::string text;
};
#define TEENY_KERNEL_ORIGIN __FILE__, __LINE__

struct Launch {
  int kernel = 0;                     // index into Lowering::kernels
  std::array<int, 3> block{1, 1, 1};  // concrete: generated from the kernel's own constants
  std::array<Expr, 3> grid{Expr(1), Expr(1), Expr(1)};
  Expr dynamic_smem;  // bytes
  std::vector<KernelArg> args;
  Expr bytes;  // cost: bytes moved by this launch
  Expr flops;  // cost: floating-point operations
  // The launch runs only where this is nonzero at the bound dims: variants of a node for ranges
  // of its dims (e.g. le(M, 16) for a small-M kernel, le(17, M) for the tiled one).
  Expr when{1};
};

// A buffer that a node's launches share and nothing else sees (split-K partials, a loss's
// per-block sums): planned in the activation arena, live only while the node runs, its contents
// undefined when the node starts. Launches pass it with scratch(name, ...). The bundle holds it as
// the tensor "<node>#<name>" (BundleTensor::scratch).
struct ScratchSpec {
  std::string name;  // a C identifier, unique in the lowering
  DType dtype = DType::kF32;
  Expr elements;  // over the graph's dims only: memory is planned before the device is known
};

struct Lowering {
  std::vector<KernelSource> kernels;
  std::vector<Launch> launches;  // run in order
  std::vector<ScratchSpec> scratch{};
};

// Appends `part`'s kernels and launches to `out`, each launch run only where `when` (and its own
// condition) holds. The parts of one lowering run under exclusive conditions, never together, so
// a scratch buffer two of them name is one, as large as either needs. `what` names the op in the
// error for a buffer named with two dtypes.
void append_lowering(Lowering& out, Lowering part, const Expr& when, const std::string& what);

// ---- host reference ----------------------------------------------------------------------
// A concrete host tensor: row-major, contiguous (no padding), values as double.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<double> data;
  int64_t numel() const;
};

struct RefContext {
  const OpContext& op;                // symbolic view (attrs etc.)
  std::vector<HostTensor> inputs;     // concrete, values already in their dtype
  std::vector<HostTensor> params;     // in ParamSpec order
  std::vector<int64_t> output_shape;  // concrete
  // Where non-empty, only these output rows (all dims but the last, flattened), in this order: an
  // op with OpTuning::reference_rows returns them alone, [rows.size(), the last dim].
  std::vector<int64_t> rows{};
};
// Returns the output (dtype = op.output.dtype, shape = output_shape), computed in double;
// core rounds it to the output dtype.
using ReferenceFn = std::function<HostTensor(const RefContext&)>;
// An update op's reference (OpDef::update): the new value of each param slot it writes, by slot,
// computed in double; core rounds each to its param's dtype.
using UpdateReferenceFn = std::function<std::map<std::string, HostTensor>(const RefContext&)>;

// ---- conformance cases -------------------------------------------------------------------
// One GPU-vs-host-reference case for tests/test_gpu_conformance.cpp, which runs every
// registered op's cases: the graph is compiled, run at each binding with seeded random inputs
// and params, and every node's GPU output is compared with its host reference computed from
// the GPU's own inputs to that node (core/compare.h states the per-dtype tolerances).
struct ConformanceCase {
  std::string label;               // e.g. "rows, bf16" (shown on failure)
  std::string graph;               // a whole graph spec (YAML text)
  std::vector<Bindings> bindings;  // each run's dims; empty: the spec's defaults
};

// ---- tuning (docs/tuning.md) --------------------------------------------------------------
// An inclusive range of a dim's values.
struct DimRange {
  int64_t lo = 1, hi = 1;
  bool contains(int64_t value) const { return lo <= value && value <= hi; }
  bool operator==(const DimRange& other) const { return lo == other.lo && hi == other.hi; }
};

// A kernel variant of a tunable op: the name `lower` builds it by (OpContext::variant) and the
// ranges of the tuning dims it can compute (a GEMV of at most 8 rows: {"M", {1, 8}}); a dim it
// does not name is unlimited.
struct OpVariant {
  std::string name;
  std::vector<std::pair<std::string, DimRange>> limits{};
};

// What makes an op tunable: `teeny tune` times each variant of a node and records the fastest
// under the node's tuning dims; compile builds a recorded variant where a record applies.
struct OpTuning {
  // The dims a choice depends on, e.g. {{"M", rows}, {"N", out}, {"K", in}}: records' keys.
  std::function<std::vector<std::pair<std::string, Expr>>(const OpContext&)> dims;
  // Every variant `lower` can build for the node (its arch and strides considered), each whole:
  // where its limits hold, its launches run at every binding.
  std::function<std::vector<OpVariant>(const OpContext&)> variants;
  // The inputs whose rows (all dims but the last, flattened) are the output's rows: tune checks a
  // sample of output rows against the reference computed from those rows alone.
  std::vector<int> row_inputs;
  // Or the reference computes sampled output rows itself (RefContext::rows) from whole inputs,
  // where a row needs more than its own input rows (attention: its head's keys and its position).
  bool reference_rows = false;
};

// ---- backward (docs/training.md) ---------------------------------------------------------
// Reverse-mode differentiation (core/autodiff.h): an op's rule adds, through the builder, the
// nodes computing dL/d(input) for each input that needs it and dL/d(param) for each trained slot,
// from dL/d(output) and whatever forward tensors it reads (those are what the forward pass saves).
class GradBuilder;
using BackwardFn = std::function<void(GradBuilder&)>;

// Training mode (PyTorch's model.train()): an op that computes otherwise in a training graph
// changes its forward node through the builder (core/autodiff.h), before differentiation.
class TrainModeBuilder;
using TrainModeFn = std::function<void(TrainModeBuilder&)>;

// Which pass of a training step a node belongs to; a graph without `train:` is all forward.
enum class NodeRole { kForward, kBackward, kUpdate };
const char* node_role_name(NodeRole role);  // "forward", "backward", "update"

// ---- the op --------------------------------------------------------------------------------
struct InputSpec {
  std::string name;
  std::string doc;
  // An i32 input of ids that index something this int attr long (embedding: "num_embeddings"):
  // random inputs stay in [0, attr) so that a run without --input reads valid rows.
  std::string id_bound_attr{};
  // Or ids that index the last dim of this input (cross_entropy's targets, the logits' classes):
  // where that dim is a constant, random inputs stay below it. -1: none.
  int id_bound_input = -1;
};

struct OpDef {
  std::string name;  // namespaced where model-specific: "yolo.detect_decode"
  std::string doc;
  std::vector<InputSpec> inputs;  // the last one repeats if `variadic`
  bool variadic = false;          // concat: N >= min_inputs
  int min_inputs = 0;             // used when variadic
  int optional_inputs = 0;        // not variadic: the last N inputs may be left out
  std::vector<AttrSpec> attrs;
  std::vector<DType> dtypes{DType::kF32};  // accepted input/output float dtypes

  // Shape rule: the output type from the inputs and attrs. Throws OpError.
  std::function<TensorType(const OpContext&)> infer;
  // Params (shapes may use the graph's dims). Absent: none.
  std::function<std::vector<ParamSpec>(const OpContext&)> params;
  // Kernels and launches. Absent: the op is a view and aliases input 0's buffer
  // (infer must then return input 0's dtype and a shape with the same element count).
  std::function<Lowering(const OpContext&)> lower;
  ReferenceFn reference;

  std::string source_file;  // set with TEENY_OP_FILE, for `teeny ops` and errors
  // The slot names `params` can produce (e.g. {"weight", "bias"}), listed by `teeny ops`,
  // which has no node to call `params` on. A test checks them against `params` on graphs/.
  std::vector<std::string> param_slots;
  // GPU conformance cases (shapes incl. awkward widths, each supported dtype). Every op should
  // provide some; a CPU test lists the ops that do not.
  std::function<std::vector<ConformanceCase>()> conformance_cases;
  // Set for ops whose kernel is picked by measurement (`teeny tune`); empty functions: not tunable.
  OpTuning tuning{};
  // Absent: the op has no gradient (training through it is an error naming the node).
  BackwardFn backward{};
  // Absent: the op computes the same in a training graph. Present: add_training calls it for every
  // forward node of the op in a graph with a `train:` section, on the gradient's path or not (as
  // model.train() switches every module), before differentiating: it may set the node's attrs
  // (batchnorm2d's batch statistics) and add update nodes that run once a step after the
  // optimizer's (batchnorm2d's running statistics), or throw OpError where the op cannot train.
  TrainModeFn train_mode{};
  // A loss: its output is a scalar whose rule takes an absent dL/d(output) as 1, so a training
  // graph's `loss` node must be one.
  bool loss = false;
  // An update (an optimizer step, "optim.<type>"): it writes params in place (kParamOut args) and
  // has no output tensor; update_reference is its host reference (`reference` is not called).
  bool update = false;
  UpdateReferenceFn update_reference{};
};
#define TEENY_OP_FILE __FILE__

// Helpers shared by ops (all in core/op.cpp).
// Normalises a possibly negative axis against `rank`; throws OpError at `key`.
int normalize_axis(int64_t axis, size_t rank, const std::string& key);
// NumPy broadcasting of two symbolic shapes; throws OpError("inputs", ...) on mismatch.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// The float dtype both inputs share (errors if they differ or are unsupported by `def`).
DType common_float_dtype(const OpDef& def, const OpContext& ctx);

}  // namespace teeny
