#include "ops/kernel_util.h"

#include <fmt/format.h>

#include <algorithm>

namespace teeny::ops {

KernelSource template_kernel(std::string name, std::string header, std::string function, std::vector<KernelArg> params,
                             int max_threads, const char* file, int line, int min_blocks) {
  KernelSource kernel;
  kernel.name = std::move(name);
  kernel.header = std::move(header);
  kernel.function = std::move(function);
  kernel.params = std::move(params);
  kernel.max_threads = max_threads;
  kernel.min_blocks = min_blocks;
  kernel.file = file;
  kernel.line = line;
  return kernel;
}

RowPlan plan_rows(const Expr& cols, DType dtype) {
  constexpr int kElementsPerThread = 16;  // registers per thread for the cached row
  constexpr int kMaxThreads = 512;        // <= 128 registers per thread at full occupancy
  constexpr int kMaxItems = 8;
  const int width = vector_width(dtype);
  RowPlan plan;
  plan.items = std::max(1, kElementsPerThread / width);
  const std::optional<int64_t> n = cols.const_value();
  if (!n) return plan;  // symbolic: 256 threads; long rows take the streaming path
  // A row of up to 32 elements a lane gets one warp: its reductions are shuffles only, with
  // no block barrier (GPT-2's 768-wide bf16 rows ran at 2.3 TB/s on 64-thread blocks). Longer
  // rows take more threads, kElementsPerThread a lane.
  constexpr int kWarpRowElements = 32;
  int64_t threads = 32;
  if (*n > 32 * kWarpRowElements)
    while (threads < kMaxThreads && threads * plan.items * width < *n) threads *= 2;
  plan.threads = static_cast<int>(threads);
  const int64_t items = (*n + threads * width - 1) / (threads * width);
  if (items <= kMaxItems) plan.items = static_cast<int>(std::max<int64_t>(1, items));
  if (plan.threads == 32) plan.rows_per_block = 4;
  return plan;
}

AttrSpec attr_spec(std::string name, AttrType type, std::string doc, std::optional<nlohmann::json> default_value,
                   std::vector<std::string> choices) {
  AttrSpec spec;
  spec.name = std::move(name);
  spec.type = type;
  spec.doc = std::move(doc);
  spec.default_value = std::move(default_value);
  spec.choices = std::move(choices);
  return spec;
}

int vector_width(DType dtype) { return static_cast<int>(16 / dtype_size(dtype)); }

bool is_16_byte_multiple(const Expr& elements, DType dtype) {
  return elements.is_const() && *elements.const_value() * static_cast<int64_t>(dtype_size(dtype)) % 16 == 0;
}

Expr grid_stride_blocks(const Expr& blocks, int threads) {
  constexpr int kThreadsPerSm = 2048;
  return min(blocks, device_sms() * Expr(kThreadsPerSm / threads));
}

DType output_float_dtype(const OpDef& def, const OpContext& ctx, DType input) {
  if (ctx.requested_dtype && *ctx.requested_dtype != input)
    throw OpError("dtype", fmt::format("op '{}' produces its inputs' dtype, {}; it cannot produce {} (there are "
                                       "no implicit conversions)",
                                       def.name, dtype_name(input), dtype_name(*ctx.requested_dtype)));
  return input;
}

DType chosen_float_dtype(const OpDef& def, const OpContext& ctx, DType fallback) {
  if (!ctx.requested_dtype) return fallback;
  const DType out = *ctx.requested_dtype;
  if (std::find(def.dtypes.begin(), def.dtypes.end(), out) == def.dtypes.end()) {
    std::vector<std::string> names;
    for (DType d : def.dtypes) names.push_back(dtype_name(d));
    throw OpError("dtype", fmt::format("op '{}' cannot produce dtype {} (supported: {})", def.name, dtype_name(out),
                                       fmt::join(names, ", ")));
  }
  return out;
}

std::vector<Expr> element_strides(const TensorType& type) {
  const size_t rank = type.shape.size();
  std::vector<Expr> strides(rank, Expr(1));
  if (rank == 0) return strides;
  Expr running = type.row_stride;
  for (size_t k = rank - 1; k-- > 0;) {
    strides[k] = running;
    running = running * type.shape[k];
  }
  return strides;
}

std::vector<int64_t> host_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) strides[k - 1] = strides[k] * shape[k];
  return strides;
}

Expr product_range(const Shape& shape, size_t begin, size_t end) {
  return product(Shape(shape.begin() + begin, shape.begin() + end));
}

HostAxisView host_axis_view(const std::vector<int64_t>& shape, size_t axis) {
  HostAxisView view;
  for (size_t k = 0; k < axis; ++k) view.outer *= shape[k];
  view.len = shape[axis];
  for (size_t k = axis + 1; k < shape.size(); ++k) view.inner *= shape[k];
  return view;
}

void require_same_shape(const std::string& op, const TensorType& a, const char* a_name, const TensorType& b,
                        const char* b_name) {
  if (a.shape != b.shape)
    throw OpError("inputs", fmt::format("{}: {} has shape {} but {} has {}; they must match", op, a_name,
                                        shape_str(a.shape), b_name, shape_str(b.shape)));
}

}  // namespace teeny::ops
