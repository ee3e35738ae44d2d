#!/usr/bin/env python3
"""PyTorch twin of graphs/transformer_block.yaml (one GPT-2-small block, f32): same model and
weights; teeny must match PyTorch.

Tolerance: |teeny - torch| <= 2e-4 + 2e-4 * |torch| on the block output (f32 throughout, TF32
off; the difference is summation order and exp/tanh implementations only).
"""
import sys

import torch
import torch.nn as nn

import dense_twin
import vision_twin

D, HEADS, FF = 768, 12, 3072


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        dense_twin.add_block(self, "", D, FF)

    def forward(self, x):
        return dense_twin.block_forward(self, "", x, HEADS)


def main():
    args = dense_twin.parse_args(__doc__)
    device = vision_twin.setup_torch(args.seed)
    model = TransformerBlock()
    dense_twin.randomise_norms(model, args.seed)
    model = model.to(device).eval()
    make_input = lambda batch, seq: torch.randn(batch, seq, D, device=device)
    return dense_twin.run_twin(args, "transformer_block.yaml", model, make_input, "x", "out", rtol=2e-4, atol=2e-4)


if __name__ == "__main__":
    sys.exit(main())
