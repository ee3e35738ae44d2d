// What conv2d's gradient ops share (ops/grad_conv2d_dx.cpp, ops/grad_conv2d_dweight.cpp; kernels
// in ops/kernels/grad_conv2d.cuh): the forward node's attrs, the check that dy is the forward
// output of x, the tiles of their implicit GEMMs, kernel-name pieces, and the conformance sweep
// both run.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/op.h"
#include "ops/vision_common.h"

namespace teeny::ops {

// The forward conv's attrs (conv2d's without `bias`).
std::vector<AttrSpec> grad_conv_attr_specs();

// The forward geometry of x (of type `x`) under the node's attrs, with dy (input 0) checked to be
// its output [B, Co, OH, OW]. An error about x is reported at `x_key` ("inputs" where x is an
// input, "attrs.shape" where an attr gives its shape). Throws OpError naming `op`.
ConvGeometry grad_conv_geometry(const std::string& op, const OpContext& ctx, const TensorType& x,
                                const std::string& x_key);

// The tile of a gradient's implicit GEMM (tn_conv_tile of conv2d.cuh): a CTA's rows x columns of
// the result, a thread's register block, 16 the reduction slice; always 128 threads.
struct GradConvTile {
  int block_rows = 0, block_cols = 0;
  int thread_rows = 0, thread_cols = 0;
  std::string tn_template() const;  // "tn_conv_tile<64, 64, 16, 8, 4>"
  std::string name() const;         // "64x64"
};
inline constexpr int kGradConvTileThreads = 128;
// The tile with the fewest rows (at least 8, at most 64) covering `rows`, and `cols` columns (64
// or 32).
GradConvTile grad_conv_tile(int64_t rows, int cols);

// "tn_conv_shape<C, Co, groups, tn_window<...>>" for the kernels' template arguments.
std::string grad_conv_shape_template(const ConvGeometry& g);
// The conv for kernel names: "k3x3s2x2p1x1_6to10g2".
std::string grad_conv_name(const ConvGeometry& g);

// One forward conv of the gradient ops' conformance sweep: x [B, C, H, W] with `chw` constant.
struct GradConvCase {
  std::string label;
  std::array<int64_t, 3> chw{};
  nlohmann::json attrs;  // conv2d's attrs without bias
  DType dtype = DType::kF32;
  std::vector<Bindings> bindings = {{{"B", 1}}, {{"B", 3}}};
};
// The sweep: 1x1 images, 7x7, 17x13, stride 2, padding, dilation 2, groups 2 and depthwise,
// channel counts that are not multiples of 8, several tiles and parts; each kernel path in
// every dtype.
std::vector<GradConvCase> grad_conv_cases();
// x's and dy's shapes in a case, as YAML lists over B: {"[B, 6, 17, 13]", "[B, 10, 9, 7]"}.
std::array<std::string, 2> grad_conv_case_shapes(const GradConvCase& c);

// Every tap of the convolution `a` from x [B, C, H, W] to dy [B, Co, OH, OW], padding skipped:
// tap(dy index, x index, weight index) for each output element, input element its window reads
// and the weight element that reads it (flat, row-major). Both gradients' host references walk it.
template <typename Tap>
void for_each_conv_tap(const ConvAttrs& a, const std::vector<int64_t>& x_shape, const std::vector<int64_t>& dy_shape,
                       Tap tap) {
  const int64_t batch = x_shape[0], channels = x_shape[1], in_h = x_shape[2], in_w = x_shape[3];
  const int64_t out_c = dy_shape[1], out_h = dy_shape[2], out_w = dy_shape[3];
  const int64_t cg = channels / a.groups, cog = out_c / a.groups;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t co = 0; co < out_c; ++co)
      for (int64_t oh = 0; oh < out_h; ++oh)
        for (int64_t ow = 0; ow < out_w; ++ow) {
          const int64_t gi = ((b * out_c + co) * out_h + oh) * out_w + ow;
          for (int64_t c = 0; c < cg; ++c) {
            const int64_t ci = (co / cog) * cg + c;
            for (int64_t kh = 0; kh < a.kh; ++kh)
              for (int64_t kw = 0; kw < a.kw; ++kw) {
                const int64_t ih = oh * a.sh - a.ph + kh * a.dh, iw = ow * a.sw - a.pw + kw * a.dw;
                if (ih < 0 || ih >= in_h || iw < 0 || iw >= in_w) continue;
                tap(gi, ((b * channels + ci) * in_h + ih) * in_w + iw, ((co * cg + c) * a.kh + kh) * a.kw + kw);
              }
          }
        }
}

}  // namespace teeny::ops
