#!/usr/bin/env python3
"""PyTorch twin of graphs/llama_block.yaml (one Llama-style decoder block in bf16: RMSNorm,
grouped-query attention with rotary position embedding, SwiGLU MLP, no biases).

The block is written as Hugging Face's LlamaDecoderLayer computes it: RoPE by rotate_half with
inv_freq = 1 / theta^(2i/D) and cos/sin cast to the activations' dtype, and
F.scaled_dot_product_attention with enable_gqa (k/v heads repeated with repeat_interleave, as
teeny's kv_groups reads them).

The reference is that block evaluated in float64 on the same bf16-rounded weights and input
(RoPE's angles in float64 too), so it carries no rounding of its own. teeny stores every
intermediate tensor in bf16 (f32 accumulation and f32 RoPE math inside kernels), so it differs by
bf16 rounding (2^-9 relative) of each stored tensor, propagated through the block's nine
linears, attention and the two residual adds; PyTorch's own bf16 block carries the same kind of
error and is printed against the reference for scale. Tolerance: |teeny - ref| <= 0.06 +
0.03 |ref| (as the GPT-2 bf16 block's twin): at B <= 2, S <= 33 on the CPU both teeny and PyTorch
bf16 stay under 0.03 (one bf16 ulp at |ref| 4), a quarter of the tolerance or less, while a wrong
RoPE (theta 10000, interleaved pairs, positions off by one, or none) is 8 to 11 times over it,
the q and k weights being scaled so that attention depends on the positions (randomise).

    TEENY=build/teeny python3 scripts/torch_twins/llama_block.py --device cpu --batch 1 --seq 17
"""
import copy
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import dense_twin

D, HEADS, KV_HEADS, HEAD_DIM, FF = 1024, 16, 4, 64, 2816
THETA, EPS = 500000.0, 1e-5
QK_GAIN = 3.0


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_cos_sin(seq, like):
    """Hugging Face's LlamaRotaryEmbedding at positions 0..seq-1: angles in f32 (f64 for the
    float64 reference), duplicated over both halves of the head dim, cast to `like`'s dtype."""
    dtype = torch.float64 if like.dtype == torch.float64 else torch.float32
    exponents = torch.arange(0, HEAD_DIM, 2, dtype=torch.int64, device=like.device).to(dtype) / HEAD_DIM
    inv_freq = 1.0 / (THETA ** exponents)
    angles = torch.arange(seq, device=like.device, dtype=dtype)[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().to(like.dtype), emb.sin().to(like.dtype)


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(D, eps=EPS)
        self.q_proj = nn.Linear(D, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, D, bias=False)
        self.post_attention_layernorm = nn.RMSNorm(D, eps=EPS)
        self.gate_proj = nn.Linear(D, FF, bias=False)
        self.up_proj = nn.Linear(D, FF, bias=False)
        self.down_proj = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        batch, seq, _ = x.shape
        heads = lambda t, n: t.view(batch, seq, n, HEAD_DIM).transpose(1, 2)  # [B, n, S, Dh]
        h = self.input_layernorm(x)
        q = heads(self.q_proj(h), HEADS)
        k = heads(self.k_proj(h), KV_HEADS)
        v = heads(self.v_proj(h), KV_HEADS)
        cos, sin = rope_cos_sin(seq, q)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = x + self.o_proj(attn.transpose(1, 2).reshape(batch, seq, HEADS * HEAD_DIM))
        mlp_in = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(mlp_in)) * self.up_proj(mlp_in))


def randomise(model, seed):
    """RMSNorm weights ~ 1 + 0.1 N(0, 1), so loading them is tested (the default 1 would hide a
    weight that never arrived), and q and k weights scaled by QK_GAIN: with PyTorch's default init
    the attention scores have a standard deviation near 0.3, softmax is nearly uniform and the
    output hardly depends on the positions, so a wrong RoPE would pass; scaled, the scores spread
    over several units, as a trained model's do."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.RMSNorm):
                module.weight.copy_(1 + 0.1 * torch.randn(module.weight.shape, generator=g))
        model.q_proj.weight.mul_(QK_GAIN)
        model.k_proj.weight.mul_(QK_GAIN)


def main():
    args = dense_twin.parse_args(__doc__)
    device = dense_twin.setup_torch(args)
    model = LlamaBlock()
    randomise(model, args.seed)
    # Round every weight to bf16 once: those exact values are what teeny loads.
    model = model.to(torch.bfloat16).to(device).eval()
    reference = copy.deepcopy(model).double()
    bf16 = lambda x: model(x.to(torch.bfloat16)).double()
    make_input = lambda batch, seq: torch.randn(batch, seq, D, device=device).to(torch.bfloat16).double()
    return dense_twin.run_twin(args, "llama_block.yaml", reference, make_input, "x", "out", rtol=0.03, atol=0.06,
                               references={"PyTorch bf16": bf16})


if __name__ == "__main__":
    sys.exit(main())
