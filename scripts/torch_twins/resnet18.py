#!/usr/bin/env python3
"""PyTorch twin of graphs/resnet18.yaml: torchvision's ResNet-18, written out here with
torchvision's module names (torchvision itself is not needed), its state dict exported under the
graph's node names (every '.' but the last written '_': layer2.0.downsample.0.weight ->
layer2_0_downsample_0.weight), so a torchvision checkpoint loads the same way.

BatchNorm weights are drawn away from 1 and 0 and the running statistics set by one training-mode
batch (cumulative average), so every normalisation does real work at ImageNet size.
Tolerance: |teeny - torch| <= 1e-4 + 1e-3 * |torch| on logits of magnitude ~1 (fp32 throughout,
TF32 off in PyTorch, f32-accurate convolutions in teeny: 20 layers of summation-order
differences). teeny's host reference executor (`--device cpu`) is off by at most 1.4e-6 against
PyTorch on the CPU (B = 1 and 2, seed 0).
"""
import sys

import torch
import torch.nn as nn

import vision_twin


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = [64, 128, 256, 512]
        cin = 64
        for i, cout in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def graph_name(name):
    """torchvision's state-dict name as the graph's `<node>.<slot>`."""
    module, slot = name.rsplit(".", 1)
    return module.replace(".", "_") + "." + slot


def build(device):
    return vision_twin.random_batchnorm(ResNet18().to(device), torch.randn(8, 3, 224, 224, device=device))


def main():
    args = vision_twin.parse_args(__doc__, default_batch=2)
    device = vision_twin.setup_torch(args.seed)
    model = build(device)
    make_input = lambda batch: torch.randn(batch, 3, 224, 224, device=device)
    return vision_twin.run_twin(args, "resnet18.yaml", model, make_input, "fc", rtol=1e-3, atol=1e-4,
                                variants=(("fused", []), ("unfused", ["--no-fuse"])), rename=graph_name)


if __name__ == "__main__":
    sys.exit(main())
