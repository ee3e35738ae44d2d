#!/usr/bin/env python3
"""PyTorch twin of graphs/lenet5.yaml: same model and weights; teeny must match PyTorch.

Tolerance: |teeny - torch| <= 1e-5 + 1e-4 * |torch| on the logits (fp32 throughout, TF32 off;
the difference is summation order only).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import vision_twin


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5)
        self.c3 = nn.Conv2d(6, 16, 5)
        self.f5 = nn.Linear(400, 120)
        self.f6 = nn.Linear(120, 84)
        self.f7 = nn.Linear(84, 10)

    def forward(self, x):
        s2 = F.max_pool2d(F.relu(self.c1(x)), 2)
        s4 = F.avg_pool2d(F.relu(self.c3(s2)), 2)
        r5 = F.relu(self.f5(s4.flatten(1)))
        r6 = F.relu(self.f6(r5))
        return self.f7(r6)


def main():
    args = vision_twin.parse_args(__doc__, default_batch=64)
    device = vision_twin.setup_torch(args.seed)
    model = LeNet5().to(device).eval()
    make_input = lambda batch: torch.randn(batch, 1, 32, 32, device=device)
    return vision_twin.run_twin(args, "lenet5.yaml", model, make_input, "f7", rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
    sys.exit(main())
