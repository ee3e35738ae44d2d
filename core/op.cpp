#include "core/op.h"

#include <algorithm>

#include <fmt/format.h>

namespace teeny {

TensorType contiguous(DType dtype, Shape shape) {
  Expr stride = shape.empty() ? Expr(1) : shape.back();
  return TensorType{dtype, std::move(shape), stride};
}

bool is_padded(const TensorType& type) { return !type.shape.empty() && type.row_stride != type.shape.back(); }

namespace {

// The element size times `factors`; nothing past 64 bits.
std::optional<int64_t> checked_bytes(DType dtype, const std::vector<int64_t>& factors) {
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t factor : factors) {
    if (__builtin_mul_overflow(bytes, factor, &bytes)) return std::nullopt;
  }
  return bytes;
}

bool fits(std::optional<int64_t> bytes) { return bytes && *bytes <= kMaxTensorBytes; }

// Why `what`, taking `bytes` (at least that many, where dims are symbolic), is too large.
std::string size_problem(const std::string& what, std::optional<int64_t> bytes, bool at_least) {
  const std::string taken =
      !bytes ? "2^63 bytes or more" : fmt::format("{}{} bytes", at_least ? "at least " : "", *bytes);
  return fmt::format("{} takes {}; one tensor may take at most 2^40 bytes (1 TiB)", what, taken);
}

}  // namespace

int64_t tensor_bytes(DType dtype, const std::vector<int64_t>& shape, int64_t row_stride) {
  std::vector<int64_t> factors(shape.begin(), shape.end());
  if (!factors.empty()) factors.back() = row_stride;
  const std::optional<int64_t> bytes = checked_bytes(dtype, factors);
  if (fits(bytes)) return *bytes;
  std::string what = fmt::format("{} {}", dtype_name(dtype), shape_text(shape));
  if (!shape.empty() && row_stride != shape.back()) what += fmt::format(" with row stride {}", row_stride);
  throw Error(size_problem(what, bytes, false));
}

std::string tensor_size_problem(const TensorType& type) {
  if (type.shape.empty()) return "";
  // Each symbolic extent is at least 1 and the row stride at least the last dim, so the constant
  // ones bound the bytes from below. A constant below 1 is an error of its own elsewhere.
  std::vector<int64_t> factors;
  bool symbolic = false;
  auto factor = [&](const Expr& e) {
    const std::optional<int64_t> value = e.const_value();
    symbolic |= !value;
    factors.push_back(value ? std::max<int64_t>(*value, 1) : 1);
  };
  for (size_t d = 0; d + 1 < type.shape.size(); ++d) factor(type.shape[d]);
  factor(type.row_stride.is_const() ? type.row_stride : type.shape.back());
  symbolic |= !type.row_stride.is_const();
  const std::optional<int64_t> bytes = checked_bytes(type.dtype, factors);
  if (fits(bytes)) return "";  // the common case, without formatting the shape
  std::string what = fmt::format("{} {}", dtype_name(type.dtype), shape_str(type.shape));
  if (is_padded(type)) what += fmt::format(" with row stride {}", type.row_stride.str());
  return size_problem(what, bytes, symbolic);
}

void check_sizes(const TensorType& output, const std::vector<ParamSpec>& params) {
  if (std::string problem = tensor_size_problem(output); !problem.empty()) throw Error("output " + problem);
  for (const ParamSpec& param : params) {
    if (std::string problem = tensor_size_problem(contiguous(param.dtype, param.shape)); !problem.empty()) {
      throw Error(fmt::format("parameter '{}': {}", param.slot, problem));
    }
  }
}

namespace {

KernelArg named_arg(ArgKind kind, std::string name) {
  KernelArg a;
  a.kind = kind;
  a.name = std::move(name);
  return a;
}

}  // namespace

KernelArg input(int index, std::string name, DType dtype) {
  KernelArg a = named_arg(ArgKind::kInput, std::move(name));
  a.input_index = index;
  a.dtype = dtype;
  return a;
}

KernelArg param(std::string slot, std::string name, DType dtype) {
  KernelArg a = named_arg(ArgKind::kParam, std::move(name));
  a.slot = std::move(slot);
  a.dtype = dtype;
  return a;
}

KernelArg param_out(std::string slot, std::string name, DType dtype) {
  KernelArg a = param(std::move(slot), std::move(name), dtype);
  a.kind = ArgKind::kParamOut;
  return a;
}

KernelArg output(std::string name, DType dtype) {
  KernelArg a = named_arg(ArgKind::kOutput, std::move(name));
  a.dtype = dtype;
  return a;
}

KernelArg i32(std::string name, Expr value) {
  KernelArg a = named_arg(ArgKind::kI32, std::move(name));
  a.value = std::move(value);
  return a;
}

KernelArg i64(std::string name, Expr value) {
  KernelArg a = named_arg(ArgKind::kI64, std::move(name));
  a.value = std::move(value);
  return a;
}

KernelArg f32(std::string name, double value) {
  KernelArg a = named_arg(ArgKind::kF32, std::move(name));
  a.fvalue = value;
  return a;
}

KernelArg tensor_map(std::string name, TensorMapSpec spec) {
  KernelArg a = named_arg(ArgKind::kTensorMap, std::move(name));
  a.map = std::move(spec);
  return a;
}

KernelArg scratch(std::string buffer, std::string name, DType dtype) {
  KernelArg a = named_arg(ArgKind::kScratch, std::move(name));
  a.slot = std::move(buffer);
  a.dtype = dtype;
  return a;
}

const char* node_role_name(NodeRole role) {
  switch (role) {
    case NodeRole::kForward:
      return "forward";
    case NodeRole::kBackward:
      return "backward";
    case NodeRole::kUpdate:
      return "update";
  }
  return "";
}

const char* arg_kind_name(ArgKind kind) {
  switch (kind) {
    case ArgKind::kInput:
      return "input";
    case ArgKind::kParam:
      return "param";
    case ArgKind::kOutput:
      return "output";
    case ArgKind::kI32:
      return "i32";
    case ArgKind::kI64:
      return "i64";
    case ArgKind::kF32:
      return "f32";
    case ArgKind::kTensorMap:
      return "tensor_map";
    case ArgKind::kScratch:
      return "scratch";
    case ArgKind::kParamOut:
      return "param_out";
  }
  return "?";
}

bool is_pointer(ArgKind kind) {
  return kind == ArgKind::kInput || kind == ArgKind::kParam || kind == ArgKind::kOutput || kind == ArgKind::kScratch ||
         kind == ArgKind::kParamOut;
}

ArgLayout arg_layout(ArgKind kind) {
  switch (kind) {
    case ArgKind::kInput:
    case ArgKind::kParam:
    case ArgKind::kOutput:
    case ArgKind::kScratch:
    case ArgKind::kParamOut:
    case ArgKind::kI64:
      return {8, 8};
    case ArgKind::kI32:
    case ArgKind::kF32:
      return {4, 4};
    case ArgKind::kTensorMap:
      return {128, 64};
  }
  return {0, 0};
}

std::string tensor_map_problem(const TensorMapSpec& spec, DType dtype) {
  const int64_t element = static_cast<int64_t>(dtype_size(dtype));
  auto bytes = [&](const char* what, int64_t elements) {
    return fmt::format("{} {} x {} bytes of {} = {} bytes", what, elements, element, dtype_name(dtype),
                       elements * element);
  };
  for (auto [what, extent] : {std::pair{"box_cols", spec.box_cols}, std::pair{"box_rows", spec.box_rows}}) {
    if (extent < 1 || extent > 256) return fmt::format("{} {} is outside 1..256", what, extent);
  }
  if (spec.swizzle != 0 && spec.swizzle != 32 && spec.swizzle != 64 && spec.swizzle != 128) {
    return fmt::format("swizzle {} is not 0, 32, 64 or 128 (bytes)", spec.swizzle);
  }
  // cuTensorMapEncodeTiled (no interleave): the box's inner extent is whole 16-byte units, and a
  // swizzled box row fits in the swizzle span.
  if (spec.box_cols * element % 16 != 0) {
    return fmt::format("{} is not a multiple of 16", bytes("box_cols", spec.box_cols));
  }
  if (spec.swizzle != 0 && spec.box_cols * element > spec.swizzle) {
    return fmt::format("{} exceeds the {}-byte swizzle span", bytes("box_cols", spec.box_cols), spec.swizzle);
  }
  constexpr int64_t kMaxExtent = int64_t{1} << 32;
  for (auto [what, extent] : {std::pair{"cols", &spec.cols}, std::pair{"rows", &spec.rows}}) {
    std::optional<int64_t> value = extent->const_value();
    if (value && (*value < 1 || *value > kMaxExtent)) return fmt::format("{} {} is outside 1..2^32", what, *value);
  }
  if (std::optional<int64_t> stride = spec.row_stride.const_value()) {
    int64_t stride_bytes = 0;
    if (__builtin_mul_overflow(*stride, element, &stride_bytes)) {
      return fmt::format("row stride {} x {} bytes of {} is not below 2^40 bytes", *stride, element, dtype_name(dtype));
    }
    if (stride_bytes % 16 != 0) return fmt::format("{} is not a multiple of 16", bytes("row stride", *stride));
    if (stride_bytes >= (int64_t{1} << 40)) return fmt::format("{} is not below 2^40", bytes("row stride", *stride));
    std::optional<int64_t> cols = spec.cols.const_value();
    if (cols && *stride < *cols) return fmt::format("row stride {} is less than cols {}", *stride, *cols);
  }
  return "";
}

const char* param_init_name(ParamInit init) {
  switch (init) {
    case ParamInit::kTrained:
      return "trained";
    case ParamInit::kZero:
      return "zero";
    case ParamInit::kHost:
      return "host";
  }
  return "?";
}

std::vector<std::string> unused_state_names(const std::string& param_name, const ParamHints& hints) {
  const size_t dot = param_name.rfind('.');
  const std::string prefix = dot == std::string::npos ? "" : param_name.substr(0, dot + 1);
  std::vector<std::string> names;
  for (const std::string& state : hints.unused_state) names.push_back(prefix + state);
  return names;
}

std::string arg_c_type(const KernelArg& arg) {
  switch (arg.kind) {
    case ArgKind::kInput:
    case ArgKind::kParam:
      return fmt::format("const {}*", dtype_c_type(arg.dtype));
    case ArgKind::kOutput:
    case ArgKind::kScratch:
    case ArgKind::kParamOut:
      return fmt::format("{}*", dtype_c_type(arg.dtype));
    case ArgKind::kI32:
      return "int";
    case ArgKind::kI64:
      return "long long";
    case ArgKind::kF32:
      return "float";
    case ArgKind::kTensorMap:
      return "const __grid_constant__ tn_tensor_map";
  }
  return "?";
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t extent : shape) {
    if (__builtin_mul_overflow(n, extent, &n))
      throw Error(fmt::format("shape {} has 2^63 elements or more", shape_text(shape)));
  }
  return n;
}

int normalize_axis(int64_t axis, size_t rank, const std::string& key) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    throw OpError(key,
                  fmt::format("axis {} is out of range for a rank-{} input (valid: {}..{})", axis, rank, -r, r - 1));
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the right, as NumPy does.
    const Expr* da = i < rank - a.size() ? nullptr : &a[i - (rank - a.size())];
    const Expr* db = i < rank - b.size() ? nullptr : &b[i - (rank - b.size())];
    if (!da)
      out[i] = *db;
    else if (!db)
      out[i] = *da;
    else if (*da == *db)
      out[i] = *da;
    else if (da->const_value() == 1)
      out[i] = *db;
    else if (db->const_value() == 1)
      out[i] = *da;
    else
      throw OpError("inputs", fmt::format("shapes {} and {} do not broadcast: dim {} is {} vs {}", shape_str(a),
                                          shape_str(b), i, da->str(), db->str()));
  }
  return out;
}

DType common_float_dtype(const OpDef& def, const OpContext& ctx) {
  DType dtype = ctx.inputs.at(0).dtype;
  for (size_t i = 1; i < ctx.inputs.size(); ++i)
    if (ctx.inputs[i].dtype != dtype)
      throw OpError("inputs", fmt::format("input {} is {} but input 0 is {}; {} needs one dtype", i,
                                          dtype_name(ctx.inputs[i].dtype), dtype_name(dtype), def.name));
  bool supported = false;
  for (DType d : def.dtypes) supported |= d == dtype;
  if (!supported) {
    std::string list;
    for (DType d : def.dtypes) list += (list.empty() ? "" : ", ") + std::string(dtype_name(d));
    throw OpError("inputs",
                  fmt::format("{} does not support {} inputs (supported: {})", def.name, dtype_name(dtype), list));
  }
  return dtype;
}

void append_lowering(Lowering& out, Lowering part, const Expr& when, const std::string& what) {
  const int offset = static_cast<int>(out.kernels.size());
  for (KernelSource& kernel : part.kernels) out.kernels.push_back(std::move(kernel));
  for (Launch& launch : part.launches) {
    launch.kernel += offset;
    launch.when = when * launch.when;
    out.launches.push_back(std::move(launch));
  }
  for (ScratchSpec& spec : part.scratch) {
    auto same =
        std::find_if(out.scratch.begin(), out.scratch.end(), [&](const ScratchSpec& s) { return s.name == spec.name; });
    if (same == out.scratch.end()) {
      out.scratch.push_back(std::move(spec));
    } else if (same->dtype == spec.dtype) {
      same->elements = max(same->elements, spec.elements);
    } else {
      throw Error(fmt::format("internal: {} names scratch buffer '{}' with two dtypes", what, spec.name));
    }
  }
}

}  // namespace teeny
