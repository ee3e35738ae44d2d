#!/usr/bin/env python3
"""PyTorch twin of graphs/lenet5_bf16.yaml (lenet5.yaml with bf16 activations and weights).

The reference is the LeNet-5 of lenet5.py evaluated in float64 on the same bf16-rounded weights and
input, so it carries no rounding of its own; teeny stores every intermediate tensor in bf16 (f32
accumulation inside kernels), so it differs by bf16 rounding (2^-9 relative) of the five stored
activations before the logits and of the logits themselves. Tolerance: |teeny - ref| <= 4e-3 +
1e-2 * |ref| on logits of magnitude ~0.2: the logits' own rounding is up to 2^-9 relative (5e-4 at
0.2), and teeny's host executor, which rounds every node's output to bf16 as the GPU does, is off
by at most 7.7e-4 on this model (PyTorch's default init, 3 seeds x 64 images), a fifth of the
tolerance. PyTorch's own bf16 LeNet is printed against the same reference for scale.
"""
import copy
import sys

import torch

import lenet5
import vision_twin


def main():
    args = vision_twin.parse_args(__doc__, default_batch=64)
    device = vision_twin.setup_torch(args.seed)
    # Round every weight to bf16 once: those exact values are what teeny loads.
    model = lenet5.LeNet5().to(torch.bfloat16).to(device).eval()
    reference = copy.deepcopy(model).double()
    bf16 = lambda x: model(x.to(torch.bfloat16)).double()
    make_input = lambda batch: torch.randn(batch, 1, 32, 32, device=device).to(torch.bfloat16).double()
    return vision_twin.run_twin(args, "lenet5_bf16.yaml", reference, make_input, "f7", rtol=1e-2, atol=4e-3,
                                references={"PyTorch bf16": bf16})


if __name__ == "__main__":
    sys.exit(main())
