#!/usr/bin/env python3
"""PyTorch twin of graphs/transformer_block_bf16.yaml (one GPT-2-small block in bf16).

The reference is the f32 PyTorch block evaluated in float64 on the same bf16-rounded weights and
input, so it carries no rounding of its own; teeny stores every intermediate tensor in bf16 (f32
accumulation inside kernels), so it differs by bf16 rounding (2^-9 relative) propagated through
the block. Tolerance: |teeny - ref| <= 0.06 + 0.03 * |ref|. PyTorch's own bf16 block is printed
against the same reference for scale: teeny's error should be of the same order.
"""
import copy
import sys

import torch

import dense_twin
import transformer_block
import vision_twin


def main():
    args = dense_twin.parse_args(__doc__)
    device = vision_twin.setup_torch(args.seed)
    model = transformer_block.TransformerBlock()
    dense_twin.randomise_norms(model, args.seed)
    # Round every weight to bf16 once: those exact values are what teeny loads.
    model = model.to(torch.bfloat16).to(device).eval()
    reference = copy.deepcopy(model).double()
    bf16 = lambda x: model(x.to(torch.bfloat16)).double()
    make_input = lambda batch, seq: torch.randn(batch, seq, transformer_block.D, device=device).to(torch.bfloat16).double()
    return dense_twin.run_twin(args, "transformer_block_bf16.yaml", reference, make_input, "x", "out", rtol=0.03,
                               atol=0.06, references={"PyTorch bf16": bf16})


if __name__ == "__main__":
    sys.exit(main())
