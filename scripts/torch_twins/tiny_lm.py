#!/usr/bin/env python3
"""PyTorch twin of graphs/tiny_lm.yaml: token embedding -> two pre-norm blocks (d 256, 4 heads,
MLP 1024, causal) -> layernorm -> linear head (1003, no bias) -> log_softmax, f32.

Tolerance: |teeny - torch| <= 2e-4 + 2e-4 * |torch| on the log-probabilities (f32 throughout,
TF32 off; summation order and exp/tanh/log implementations only).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import dense_twin
import vision_twin

VOCAB, D, HEADS, FF = 1003, 256, 4, 1024


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        dense_twin.add_block(self, "b0_", D, FF)
        dense_twin.add_block(self, "b1_", D, FF)
        self.ln_f = nn.LayerNorm(D, eps=1e-5)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids):
        x = self.embed(ids.long())
        x = dense_twin.block_forward(self, "b0_", x, HEADS)
        x = dense_twin.block_forward(self, "b1_", x, HEADS)
        return F.log_softmax(self.head(self.ln_f(x)), dim=-1)


def main():
    args = dense_twin.parse_args(__doc__)
    device = vision_twin.setup_torch(args.seed)
    model = TinyLM()
    dense_twin.randomise_norms(model, args.seed)
    model = model.to(device).eval()
    make_input = lambda batch, seq: torch.randint(0, VOCAB, (batch, seq), dtype=torch.int32, device=device)
    return dense_twin.run_twin(args, "tiny_lm.yaml", model, make_input, "ids", "logprobs", rtol=2e-4, atol=2e-4)


if __name__ == "__main__":
    sys.exit(main())
