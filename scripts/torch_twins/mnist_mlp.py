#!/usr/bin/env python3
"""PyTorch twin of graphs/mnist_mlp.yaml: fc1 (784 -> 256) -> relu -> fc2 (256 -> 10) -> softmax,
f32; same weights, teeny must match PyTorch.

Tolerance: |teeny - torch| <= 1e-6 + 1e-4 * |torch| on the probabilities (f32 throughout, TF32
off; summation order and exp only).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import vision_twin


class MnistMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return F.softmax(self.fc2(F.relu(self.fc1(x))), dim=-1)


def main():
    args = vision_twin.parse_args(__doc__, default_batch=64)
    device = vision_twin.setup_torch(args.seed)
    model = MnistMlp().to(device).eval()
    make_input = lambda batch: torch.rand(batch, 784, device=device)
    return vision_twin.run_twin(args, "mnist_mlp.yaml", model, make_input, "probs", rtol=1e-4, atol=1e-6)


if __name__ == "__main__":
    sys.exit(main())
