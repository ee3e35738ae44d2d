"""Shared pieces of the dense PyTorch twins (transformer_block.py, transformer_block_bf16.py,
tiny_lm.py, llama_block.py).

A twin builds the same model as a graph in graphs/ with module names equal to the graph's dotted
param names (`<node>.<slot>`), exports its weights as safetensors and an input as .npy, runs
`teeny compile` once and `teeny run --bind B=.. --bind S=..` per shape, and compares teeny's output
with PyTorch's within stated tolerances, printing the max errors (`--device cpu`: teeny's host
reference executor instead of the GPU). Exit status: 0 match, 1 mismatch, 2 a teeny command
failed. The safetensors/.npy writing, the teeny call and the comparison are the vision twins'
(vision_twin.py), so every twin reports the same way.
"""
import argparse
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import vision_twin

REPO = vision_twin.REPO


def parse_args(description, batches=(1, 3), seqs=(128, 77)):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")),
                        help="teeny binary (default: $TEENY, else build/teeny)")
    parser.add_argument("--batch", type=int, nargs="+", default=list(batches), help="values of B to check")
    parser.add_argument("--seq", type=int, nargs="+", default=list(seqs), help="values of S to check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", help="keep the weights, inputs, bundles and outputs here")
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                        help="gpu (default): teeny runs on the GPU; cpu: teeny's host reference executor runs "
                        "(no GPU needed), and PyTorch on the CPU where the twin takes its device from setup_torch")
    return parser.parse_args()


def setup_torch(args):
    """vision_twin.setup_torch (seeded, TF32 off), on the CPU with --device cpu."""
    device = vision_twin.setup_torch(args.seed)
    return torch.device("cpu") if args.device == "cpu" else device


# ---- the GPT-2-style pre-norm block, with the graph's flat node names ------------------------

BLOCK_MODULES = ("ln1", "q", "k", "v", "proj", "ln2", "fc", "fc_proj")


def add_block(owner, prefix, d, ff):
    """Registers one block's modules on `owner` as `<prefix>ln1`, `<prefix>q`, ... (graph node names)."""
    owner.add_module(prefix + "ln1", nn.LayerNorm(d, eps=1e-5))
    for name in ("q", "k", "v", "proj"):
        owner.add_module(prefix + name, nn.Linear(d, d))
    owner.add_module(prefix + "ln2", nn.LayerNorm(d, eps=1e-5))
    owner.add_module(prefix + "fc", nn.Linear(d, ff))
    owner.add_module(prefix + "fc_proj", nn.Linear(ff, d))


def block_forward(owner, prefix, x, heads):
    """x [B, S, d] -> [B, S, d], as the graph: ln1 -> q/k/v -> split_heads -> causal sdpa ->
    merge_heads -> proj -> +x -> ln2 -> fc -> gelu(tanh) -> fc_proj -> +."""
    m = lambda name: getattr(owner, prefix + name)
    batch, seq, d = x.shape
    dh = d // heads
    # split_heads: [b, h, s, :] = x[b, s, h*Dh:(h+1)*Dh] (teeny's [B*H, S, Dh] with B and H apart:
    # PyTorch's flash and memory-efficient attention take only 4-D inputs)
    split = lambda t: t.view(batch, seq, heads, dh).transpose(1, 2)
    h = m("ln1")(x)
    attn = F.scaled_dot_product_attention(split(m("q")(h)), split(m("k")(h)), split(m("v")(h)), is_causal=True)
    merged = attn.transpose(1, 2).reshape(batch, seq, d)
    res1 = x + m("proj")(merged)
    return res1 + m("fc_proj")(F.gelu(m("fc")(m("ln2")(res1)), approximate="tanh"))


def randomise_norms(model, generator_seed):
    """LayerNorm weights ~ 1 + 0.1 N(0, 1), biases ~ 0.1 N(0, 1), so loading them is tested (the
    defaults 1 and 0 would hide a param that never arrived)."""
    g = torch.Generator().manual_seed(generator_seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.copy_(1 + 0.1 * torch.randn(module.weight.shape, generator=g))
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=g))


def export_weights(model, path):
    """The state dict by dotted name, as f32 (exact for bf16 weights; teeny converts on load)."""
    tensors = {name: value.detach().float().cpu().numpy() for name, value in model.state_dict().items()}
    vision_twin.save_safetensors(path, tensors)
    return sorted(tensors)


def run_twin(args, graph, model, make_input, input_name, output, rtol, atol, references=None):
    """Compiles `graph` once, then for every (B, S): saves an input, runs teeny and `model`,
    compares. `references` optionally maps a label to another model whose own error against
    `model` is printed for scale (e.g. PyTorch bf16 vs f32)."""
    workdir = args.workdir or tempfile.mkdtemp(prefix="teeny-twin-")
    os.makedirs(workdir, exist_ok=True)
    weights = os.path.join(workdir, "weights.safetensors")
    names = export_weights(model, weights)
    print(f"exported {len(names)} tensors to {weights}")
    bundle = os.path.join(workdir, graph.replace(".yaml", ".teeny"))
    vision_twin.teeny(args, "compile", os.path.join(REPO, "graphs", graph), "-o", bundle)
    ok = True
    for batch in args.batch:
        for seq in args.seq:
            x = make_input(batch, seq)
            x_path = os.path.join(workdir, f"{input_name}_b{batch}_s{seq}.npy")
            np.save(x_path, x.float().cpu().numpy() if x.is_floating_point() else x.cpu().numpy())
            with torch.no_grad():
                want = model(x).double().cpu().numpy()
                for label, other in (references or {}).items():
                    theirs = other(x).double().cpu().numpy()
                    print(f"  for scale: {label} vs the reference: max abs err {np.abs(theirs - want).max():.3g}")
            out_dir = os.path.join(workdir, f"out_b{batch}_s{seq}")
            vision_twin.teeny(args, "run", bundle, "--device", args.device, "--bind", f"B={batch}", "--bind",
                              f"S={seq}", "--weights", weights, "--input", f"{input_name}={x_path}", "--output-dir",
                              out_dir)
            got = np.load(os.path.join(out_dir, f"{output}.npy"))
            ok &= vision_twin.compare(f"{graph} B={batch} S={seq} '{output}'", got, want, rtol, atol)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1
