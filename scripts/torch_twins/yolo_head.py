#!/usr/bin/env python3
"""PyTorch twin of graphs/yolo_head.yaml (Ultralytics-style Conv blocks, SPPF, upsample + concat
neck, per-level box heads, make_anchors + dist2bbox(xywh=True) * stride).

Runs teeny twice: with the conv-bn-silu fusion pass (default) and with --no-fuse; both must match.
BatchNorm running statistics are calibrated on a random batch (train-mode forward) so every layer
sees unit-scale activations, and the box convs are scaled so distances are a few grid cells: the
decoded boxes then depend visibly on every layer.
Tolerance: |teeny - torch| <= 1e-2 + 1e-4 * |torch| on boxes in pixels (values up to ~1500): a hundredth
of a pixel. Boxes are grid units times the level's stride (up to 32), so an f32 summation-order
difference of ~1e-4 grid units after ~20 convs (teeny's order vs cuDNN's) shows as a few 1e-3 px
(seen on the H200: max 4.3e-3 px at B=16, which a 1e-3 atol rejected near small coordinates).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import vision_twin

LEVELS = [(32, 32, 8), (16, 16, 16), (8, 8, 32)]  # (h, w, stride) of P3, P4, P5 for a 256x256 input


class Conv(nn.Module):
    """Ultralytics Conv: conv (no bias) -> BatchNorm (eps 1e-3) -> SiLU; slots conv.*, bn.*."""

    def __init__(self, c_in, c_out, k=1, s=1, p=0, g=1):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, p, groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=1e-3)

    def forward(self, x):
        return F.silu(self.bn(self.conv(x)))


def make_anchors(levels, device, offset=0.5):
    """Ultralytics make_anchors, transposed as Detect uses them: anchors [2, A], strides [1, A]."""
    points, strides = [], []
    for h, w, stride in levels:
        sx = torch.arange(w, device=device, dtype=torch.float32) + offset
        sy = torch.arange(h, device=device, dtype=torch.float32) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        strides.append(torch.full((h * w, 1), stride, dtype=torch.float32, device=device))
    return torch.cat(points).transpose(0, 1), torch.cat(strides).transpose(0, 1)


def dist2bbox(distance, anchor_points, xywh=True, dim=-1):
    """Ultralytics dist2bbox."""
    lt, rb = distance.chunk(2, dim)
    x1y1 = anchor_points - lt
    x2y2 = anchor_points + rb
    if xywh:
        return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim)
    return torch.cat((x1y1, x2y2), dim)


class YoloHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.b0 = Conv(3, 16, 3, 2, 1)
        self.b1 = Conv(16, 32, 3, 2, 1)
        self.b2_conv = nn.Conv2d(32, 32, 3, 1, 1, bias=False)  # written out as three nodes in the graph
        self.b2_bn = nn.BatchNorm2d(32, eps=1e-3)
        self.b3 = Conv(32, 64, 3, 2, 1)
        self.b4 = Conv(64, 128, 3, 2, 1)
        self.b5_conv = nn.Conv2d(128, 256, 3, 2, 1, bias=False)
        self.b5_bn = nn.BatchNorm2d(256, eps=1e-3)
        self.sppf_cv1 = Conv(256, 128, 1)
        self.sppf = Conv(512, 256, 1)
        self.n4 = Conv(384, 128, 3, 1, 1)
        self.n3 = Conv(192, 64, 3, 1, 1)
        self.h3_cv = Conv(64, 64, 3, 1, 1)
        self.h3_dw = Conv(64, 64, 3, 1, 1, g=64)
        self.h3_box = nn.Conv2d(64, 4, 1)
        self.h4_cv = Conv(128, 64, 3, 1, 1)
        self.h4_dw_conv = nn.Conv2d(64, 64, 3, 1, 1, groups=64, bias=False)
        self.h4_dw_bn = nn.BatchNorm2d(64, eps=1e-3)
        self.h4_box = nn.Conv2d(64, 4, 1)
        self.h5_cv = Conv(256, 64, 3, 1, 1)
        self.h5_dw = Conv(64, 64, 3, 1, 1, g=64)
        self.h5_box = nn.Conv2d(64, 4, 1)

    def forward(self, x):
        b2 = F.silu(self.b2_bn(self.b2_conv(self.b1(self.b0(x)))))
        b3 = self.b3(b2)
        b4 = self.b4(b3)
        b5 = F.silu(self.b5_bn(self.b5_conv(b4)))
        y = self.sppf_cv1(b5)
        m1 = F.max_pool2d(y, 5, 1, 2)
        m2 = F.max_pool2d(m1, 5, 1, 2)
        m3 = F.max_pool2d(m2, 5, 1, 2)
        sppf = self.sppf(torch.cat([y, m1, m2, m3], 1))
        n4 = self.n4(torch.cat([F.interpolate(sppf, scale_factor=2, mode="nearest"), b4], 1))
        n3 = self.n3(torch.cat([F.interpolate(n4, scale_factor=2, mode="nearest"), b3], 1))
        d3 = self.h3_box(self.h3_dw(self.h3_cv(n3))).flatten(2)
        d4 = self.h4_box(F.silu(self.h4_dw_bn(self.h4_dw_conv(self.h4_cv(n4))))).flatten(2)
        d5 = self.h5_box(self.h5_dw(self.h5_cv(sppf))).flatten(2)
        boxes = torch.cat([d3, d4, d5], 2)  # [B, 4, A] l, t, r, b
        anchors, strides = make_anchors(LEVELS, x.device)
        return dist2bbox(boxes, anchors.unsqueeze(0), xywh=True, dim=1) * strides


def build(device):
    model = YoloHead().to(device)
    with torch.no_grad():
        for box in (model.h3_box, model.h4_box, model.h5_box):
            box.weight.mul_(10.0)
            box.bias.uniform_(1.0, 4.0)
    return vision_twin.random_batchnorm(model, torch.randn(4, 3, 256, 256, device=device))


def main():
    args = vision_twin.parse_args(__doc__, default_batch=2)
    device = vision_twin.setup_torch(args.seed)
    model = build(device)
    make_input = lambda batch: torch.randn(batch, 3, 256, 256, device=device)
    return vision_twin.run_twin(args, "yolo_head.yaml", model, make_input, "decode", rtol=1e-4, atol=1e-2,
                                variants=(("fused", []), ("unfused", ["--no-fuse"])))


if __name__ == "__main__":
    sys.exit(main())
