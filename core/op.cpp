#include "core/op.h"

#include <fmt/format.h>

namespace teeny {

TensorType contiguous(DType dtype, Shape shape) {
  Expr stride = shape.empty() ? Expr(1) : shape.back();
  return TensorType{dtype, std::move(shape), stride};
}

bool is_padded(const TensorType& type) {
  return !type.shape.empty() && type.row_stride != type.shape.back();
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

const char* arg_kind_name(ArgKind kind) {
  switch (kind) {
    case ArgKind::kInput: return "input";
    case ArgKind::kParam: return "param";
    case ArgKind::kOutput: return "output";
    case ArgKind::kI32: return "i32";
    case ArgKind::kI64: return "i64";
    case ArgKind::kF32: return "f32";
  }
  return "?";
}

const char* param_init_name(ParamInit init) {
  switch (init) {
    case ParamInit::kTrained: return "trained";
    case ParamInit::kZero: return "zero";
    case ParamInit::kHost: return "host";
  }
  return "?";
}

std::string arg_c_type(const KernelArg& arg) {
  switch (arg.kind) {
    case ArgKind::kInput:
    case ArgKind::kParam: return fmt::format("const {}*", dtype_c_type(arg.dtype));
    case ArgKind::kOutput: return fmt::format("{}*", dtype_c_type(arg.dtype));
    case ArgKind::kI32: return "int";
    case ArgKind::kI64: return "long long";
    case ArgKind::kF32: return "float";
  }
  return "?";
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int normalize_axis(int64_t axis, size_t rank, const std::string& key) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    throw OpError(key, fmt::format("axis {} is out of range for a rank-{} input (valid: {}..{})",
                                   axis, rank, -r, r - 1));
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the right, as NumPy does.
    const Expr* da = i < rank - a.size() ? nullptr : &a[i - (rank - a.size())];
    const Expr* db = i < rank - b.size() ? nullptr : &b[i - (rank - b.size())];
    if (!da) out[i] = *db;
    else if (!db) out[i] = *da;
    else if (*da == *db) out[i] = *da;
    else if (da->const_value() == 1) out[i] = *db;
    else if (db->const_value() == 1) out[i] = *da;
    else
      throw OpError("inputs", fmt::format("shapes {} and {} do not broadcast: dim {} is {} vs {}",
                                          shape_str(a), shape_str(b), i, da->str(), db->str()));
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
    throw OpError("inputs", fmt::format("{} does not support {} inputs (supported: {})", def.name,
                                        dtype_name(dtype), list));
  }
  return dtype;
}

}  // namespace teeny
