// What the vision ops share: the NCHW input check, the sliding window, and for conv2d and
// conv2d_bn_silu the attrs, geometry and shape rule, the lowering onto the kernels of
// ops/kernels/conv2d.cuh (implicit GEMM, its 1x1 GEMM path, depthwise) with a fused per-channel
// epilogue, and the host reference.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/op.h"

namespace teeny::ops {

// Requires x [B, C, H, W], unpadded; throws OpError("inputs", ...) naming `op`.
void check_nchw(const std::string& op, const TensorType& x);

// The largest kernel size, stride, padding and dilation (the attrs' schema says so): the
// window's arithmetic (d*(k-1)+1, 2*p) and the kernels' int template arguments stay far from
// overflow.
inline constexpr double kMaxWindow = 1 << 20;

// A sliding window per axis (height, width): kernel size, stride, zero padding, dilation.
struct Window2d {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// The window as the template argument of the kernel headers: "tn_window<3, 3, 2, 2, 1, 1, 1, 1>"
// (ops/kernels/vision.cuh).
std::string window_template(const Window2d& w);

// The window for kernel names: "k3x3s2x2", then "p1x1" unless unpadded and "d2x2" if dilated.
std::string window_name(const Window2d& w);

// A sliding window's output extent, floor((in + 2p - d(k-1) - 1) / s) + 1; when `in` is a
// constant, throws OpError at attrs.kernel_size if the window does not fit the padded input.
Expr window_extent(const char* axis, const Expr& in, int64_t k, int64_t s, int64_t p, int64_t d);

// GPU conformance cases of a one-input vision op: a graph `y = op(x)` per case, x of `shape` in
// `dtype`.
struct VisionCase {
  std::string label;
  std::string shape;  // YAML list over `dims`, e.g. "[B, 8, 15, 13]"
  nlohmann::json attrs = nlohmann::json::object();
  std::vector<std::string> dims = {"B"};
  std::vector<Bindings> bindings = {{{"B", 1}}, {{"B", 32}}};
  DType dtype = DType::kF32;
};
std::vector<ConformanceCase> vision_cases(const std::string& op, const std::vector<VisionCase>& cases);

// `cases` again in each 16-bit dtype (bf16, then f16), labels suffixed with the dtype.
std::vector<VisionCase> in_16bit_dtypes(const std::vector<VisionCase>& cases);

// The conv attrs both ops take (conv2d adds `bias`, conv2d_bn_silu adds `eps`).
std::vector<AttrSpec> conv_attr_specs();

struct ConvAttrs : Window2d {
  int64_t out_channels = 0, groups = 1;
};
ConvAttrs conv_attrs(const Attrs& attrs);

struct ConvGeometry {
  ConvAttrs a;
  DType dtype = DType::kF32;  // of x, the params and y
  int64_t in_channels = 0;
  Expr batch, in_h, in_w, out_h, out_w;
  std::string variant;  // the context's (OpContext::variant): "" is the default kernel

  int64_t cin_per_group() const { return in_channels / a.groups; }
  int64_t cout_per_group() const { return a.out_channels / a.groups; }
  int64_t reduction() const { return cin_per_group() * a.kh * a.kw; }  // GEMM K
  bool depthwise() const { return a.groups > 1 && a.groups == in_channels; }
  bool pointwise() const { return a.kh == 1 && a.kw == 1 && a.sh == 1 && a.sw == 1 && a.ph == 0 && a.pw == 0; }
  Shape weight_shape() const;  // [Co, C/groups, kH, kW]
  Shape output_shape() const;  // [B, Co, Ho, Wo]
};

// Validates x [B, C, H, W] (contiguous, constant C) and the attrs against it. Throws OpError
// naming the key; `op` names the op in messages.
ConvGeometry conv_geometry(const std::string& op, const OpContext& ctx);

// A fused conv's params: conv.weight, then conv.bias (`bias`) and bn.weight, bn.bias,
// bn.running_mean, bn.running_var (`bn`), in g.dtype.
std::vector<ParamSpec> conv_params(const ConvGeometry& g, bool bias, bool bn);

// What the conv kernel does after accumulating, per output element: y = act(bn(conv + bias) +
// residual), with a bias, or an inference batch norm folded per channel (not both), then the
// residual (with a batch norm only: ResNet's block end), then an activation of
// ops/activation.h ("none": none), so a fused node computes what its separate nodes do.
struct ConvEpilogue {
  bool bias = false;
  bool bn = false;
  double eps = 0.0;  // bn's
  bool residual = false;
  std::string activation = "none";
};

// The conv ops' kernel variants for `teeny tune` (docs/kernels.md): the implicit GEMM on CUDA
// cores ("simt", the default) or on tensor cores ("mma"); depthwise convs have one kernel.
OpTuning conv_tuning();

// The conv's kernels and launches: the depthwise kernel when groups == C, else the implicit GEMM
// of g.variant (CUDA cores by default). Args: x (input 0), the residual (input 1) if any, then
// params, all in g.dtype: `weight_slot`, then `bias_slot` (a bias) or `bn.weight, bn.bias,
// bn.running_mean, bn.running_var` (a batch norm). Kernel names start with `op`.
Lowering lower_conv(const std::string& op, const ConvGeometry& g, const std::string& weight_slot,
                    const std::string& bias_slot, const ConvEpilogue& epilogue);

// Bytes and FLOPs of the conv itself (epilogue params excluded).
Expr conv_flops(const ConvGeometry& g);
Expr conv_bytes(const ConvGeometry& g);

// Plain-loop convolution without bias, in double: y [B, Co, Ho, Wo].
std::vector<double> conv_reference(const ConvAttrs& a, const HostTensor& x, const HostTensor& weight,
                                   const std::vector<int64_t>& output_shape);

}  // namespace teeny::ops
