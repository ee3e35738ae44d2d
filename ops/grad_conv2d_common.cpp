#include "ops/grad_conv2d_common.h"

#include <fmt/format.h>

namespace teeny::ops {

std::vector<AttrSpec> grad_conv_attr_specs() { return conv_attr_specs(); }

ConvGeometry grad_conv_geometry(const std::string& op, const OpContext& ctx, const TensorType& x,
                                const std::string& x_key) {
  OpContext forward = ctx;
  forward.inputs = {x};
  ConvGeometry g;
  try {
    g = conv_geometry(op, forward);
  } catch (OpError& e) {
    if (e.key == "inputs") e.key = x_key;
    throw;
  }
  const TensorType& dy = ctx.inputs.at(0);
  const Shape expected = g.output_shape();
  if (dy.shape != expected)
    throw OpError("inputs", fmt::format("{} needs dy of the conv's output shape {} for x {}, got {}", op,
                                        shape_str(expected), shape_str(x.shape), shape_str(dy.shape)));
  if (is_padded(dy))
    throw OpError("inputs", fmt::format("{} needs a contiguous dy, got row stride {} for width {}", op,
                                        dy.row_stride.str(), dy.shape[3].str()));
  return g;
}

std::string GradConvTile::tn_template() const {
  return fmt::format("tn_conv_tile<{}, {}, 16, {}, {}>", block_rows, block_cols, thread_rows, thread_cols);
}

std::string GradConvTile::name() const { return fmt::format("{}x{}", block_rows, block_cols); }

GradConvTile grad_conv_tile(int64_t rows, int cols) {
  int block_rows = 8;
  while (block_rows < 64 && block_rows < rows) block_rows *= 2;
  GradConvTile tile;
  tile.block_rows = block_rows;
  tile.block_cols = cols;
  // 8 rows of threads and 16 columns of threads: 128.
  tile.thread_rows = block_rows / 8;
  tile.thread_cols = cols / 16;
  return tile;
}

std::string grad_conv_shape_template(const ConvGeometry& g) {
  return fmt::format("tn_conv_shape<{}, {}, {}, {}>", g.in_channels, g.a.out_channels, g.a.groups,
                     window_template(g.a));
}

std::string grad_conv_name(const ConvGeometry& g) {
  std::string name = fmt::format("{}_{}to{}", window_name(g.a), g.in_channels, g.a.out_channels);
  if (g.a.groups > 1) name += fmt::format("g{}", g.a.groups);
  return name;
}

std::vector<GradConvCase> grad_conv_cases() {
  using nlohmann::json;
  const std::vector<Bindings> few_and_many = {{{"B", 1}}, {{"B", 40}}};
  std::vector<GradConvCase> cases = {
      {"3x3 dilation 2 p2, 8 -> 16, 15x13",
       {8, 15, 13},
       {{"out_channels", 16}, {"kernel_size", 3}, {"padding", 2}, {"dilation", 2}}},
      {"3x5 s[1,2] p[1,2], 8 -> 12",
       {8, 15, 13},
       {{"out_channels", 12}, {"kernel_size", {3, 5}}, {"stride", {1, 2}}, {"padding", {1, 2}}}},
      {"3x3 p1 on 1x1 images, 5 -> 7", {5, 1, 1}, {{"out_channels", 7}, {"kernel_size", 3}, {"padding", 1}}},
      {"7x7 s2 p3 on 7x7 images, 3 -> 8",
       {3, 7, 7},
       {{"out_channels", 8}, {"kernel_size", 7}, {"stride", 2}, {"padding", 3}}},
      {"3x3 groups 3, 9 -> 6 at 11x9", {9, 11, 9}, {{"out_channels", 6}, {"kernel_size", 3}, {"groups", 3}}},
      {"depthwise 3x3 p2 d2 at 7x7",
       {8, 7, 7},
       {{"out_channels", 8}, {"kernel_size", 3}, {"padding", 2}, {"dilation", 2}, {"groups", 8}}},
      // Two row tiles and three column tiles; three parts of the pixels at B = 5.
      {"3x3 p1 16 -> 72 at 24x24",
       {16, 24, 24},
       {{"out_channels", 72}, {"kernel_size", 3}, {"padding", 1}},
       DType::kF32,
       {{{"B", 1}}, {{"B", 5}}}},
      {"3x3 p1 3 -> 16 at 32x32 (40 parts at B = 40)",
       {3, 32, 32},
       {{"out_channels", 16}, {"kernel_size", 3}, {"padding", 1}},
       DType::kF32,
       few_and_many},
      {"depthwise 3x3 p1 at 64x64 (3 parts at B = 3)",
       {4, 64, 64},
       {{"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}, {"groups", 4}}}};
  // Each kernel path in every dtype, with channel counts that are not multiples of 8.
  const std::vector<GradConvCase> paths = {
      {"3x3 s2 p1 groups 2, 6 -> 10, 17x13",
       {6, 17, 13},
       {{"out_channels", 10}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"groups", 2}}},
      {"1x1, 12 -> 20 at 17x13", {12, 17, 13}, {{"out_channels", 20}, {"kernel_size", 1}}},
      {"depthwise x2 multiplier s2 p1, 6 -> 12 at 17x13",
       {6, 17, 13},
       {{"out_channels", 12}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"groups", 6}}}};
  for (DType dtype : float_dtypes())
    for (GradConvCase c : paths) {
      c.dtype = dtype;
      cases.push_back(std::move(c));
    }
  return cases;
}

std::array<std::string, 2> grad_conv_case_shapes(const GradConvCase& c) {
  // An int attr or [h, w] pair, `fallback` where absent.
  const auto pair = [&](const char* name, int64_t fallback) -> std::array<int64_t, 2> {
    if (!c.attrs.contains(name)) return {fallback, fallback};
    const nlohmann::json& v = c.attrs.at(name);
    if (v.is_array()) return {v[0].get<int64_t>(), v[1].get<int64_t>()};
    return {v.get<int64_t>(), v.get<int64_t>()};
  };
  const auto k = pair("kernel_size", 1), s = pair("stride", 1), p = pair("padding", 0), d = pair("dilation", 1);
  std::array<int64_t, 2> out{};
  for (int axis = 0; axis < 2; ++axis)
    out[axis] = (c.chw[1 + axis] + 2 * p[axis] - d[axis] * (k[axis] - 1) - 1) / s[axis] + 1;
  return {fmt::format("[B, {}, {}, {}]", c.chw[0], c.chw[1], c.chw[2]),
          fmt::format("[B, {}, {}, {}]", c.attrs.at("out_channels").get<int64_t>(), out[0], out[1])};
}

}  // namespace teeny::ops
