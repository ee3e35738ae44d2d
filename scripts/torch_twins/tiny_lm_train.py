#!/usr/bin/env python3
"""Training twin of graphs/tiny_lm_train.yaml: `teeny train --tokens` and PyTorch train tiny_lm as a
byte-level language model from the same initial weights on the same windows of the same text, and
must agree step by step.

The text: the dataset descriptions scikit-learn ships (sklearn/datasets/descr/*.rst, sorted by
name, joined), as UTF-8 bytes, so the ids are 0-255 of the head's 1003. The last 10% is held out.
PyTorch's model starts from torch.manual_seed(--seed) (LayerNorms randomised as the inference twins
do), its weights go to teeny as init.safetensors, and PyTorch reads at each step the windows that
teeny's token order gives (docs/training.md, "Data order"), with the spec's AdamW, warm-up + cosine
schedule and clipping. `--dtype bf16` trains a copy of the spec in bf16 (activations, params and
gradients in bf16, f32 master weights in the optimizer) against PyTorch's bf16 model with f32
masters stepped the same way (train_twin.Trainer).

teeny trains in two runs: steps 1-50 saved to a checkpoint, then `--resume` from it to the last
step (the schedule's 400), so a resume is part of what must agree. Compared:
  - the loss of each of the first 50 steps: f32 within 1e-4 + 2e-4 |loss|; bf16 within 1e-2 |loss|;
  - every param in the step-50 checkpoint: f32 within 1e-3 + 1e-2 |p|; bf16 within 1e-2 + 2e-2 |p|;
  - after the last step, the loss on 64 fixed held-out windows (teeny's by `teeny run` of
    graphs/tiny_lm.yaml on its final params, in f32 for both dtypes): within 2% (f32) or 4% (bf16)
    of PyTorch's, and both below the unigram entropy of the training bytes (the model learned more
    than letter frequencies).
Why these: both sides start from the same bits. In f32 (TF32 off) they differ by the order of
summation in the matmuls, attention and reductions, a few f32 epsilons of each sum, about 1e-6 of a
loss near 7; AdamW's normalised step turns rounding differences in near-zero gradients into
differences of up to its step size (lr 1e-3) in a few params, which compound over steps. In bf16 the
two round at different points (PyTorch's attention keeps P in bf16, teeny's kernels accumulate in
f32 and round outputs once), 2^-8 of each activation, and the loss itself is a bf16 number (one ulp
is 0.4% of it). A wrong window, schedule step or update formula moves the losses by more than these
within the first steps. After 400 steps the two trajectories have separated by rounding alone, so
the final check is statistical: the same held-out loss within a few percent.

Usage: TEENY=build/teeny python3 scripts/torch_twins/tiny_lm_train.py [--dtype bf16] [--steps N]
Exit status: 0 match, 1 mismatch, 2 a teeny command failed.
"""
import copy
import glob
import math
import os
import sys

import numpy as np
import sklearn
import torch
import torch.nn.functional as F
import yaml
from safetensors.torch import load_file

import dense_twin
import vision_twin
from tiny_lm import TinyLM
from train_twin import (REPO, compare_checkpoint, compare_losses, run_in_workdir, teeny, teeny_losses,
                       token_offsets, Trainer, twin_parser)

SPEC = os.path.join(REPO, "graphs", "tiny_lm_train.yaml")
CHECKED_STEPS = 50
HELD_OUT_WINDOWS = 64
TOLERANCES = {  # dtype: loss (atol, rtol), params at step 50, final held-out loss (relative)
    "f32": {"loss": (1e-4, 2e-4), "params": (1e-3, 1e-2), "held_out": 0.02},
    "bf16": {"loss": (0.0, 1e-2), "params": (1e-2, 2e-2), "held_out": 0.04},
}


def parse_args():
    parser = twin_parser(__doc__)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    return parser.parse_args()


def text_tokens():
    """The bytes of scikit-learn's dataset descriptions as int32 ids."""
    descr = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "descr")
    text = b"".join(open(path, "rb").read() for path in sorted(glob.glob(os.path.join(descr, "*.rst"))))
    return np.frombuffer(text, np.uint8).astype(np.int32)


def unigram_entropy(tokens):
    counts = np.bincount(tokens).astype(np.float64)
    p = counts[counts > 0] / len(tokens)
    return float(-(p * np.log(p)).sum())


def windows(tokens, offsets, seq):
    ids = np.stack([tokens[o:o + seq] for o in offsets])
    return ids, np.stack([tokens[o + 1:o + seq + 1] for o in offsets])


def held_out_loss(logprobs, targets):
    """Mean next-token negative log-likelihood from log-probabilities [B, S, V]."""
    picked = np.take_along_axis(logprobs, targets[..., None].astype(np.int64), axis=-1)
    return float(-picked.mean())


def torch_train(model, section, tokens, batch, seq, seed, steps, device, on_step):
    trainer = Trainer(model, section)
    data = torch.from_numpy(tokens).long().to(device)
    losses = []
    for step in range(steps):
        starts = torch.tensor(token_offsets(len(tokens), seq, batch, seed, step), device=device)
        rows = starts[:, None] + torch.arange(seq + 1, device=device)
        window = data[rows]
        ids, targets = window[:, :-1], window[:, 1:]
        logits = lambda: model.head(model.ln_f(model.hidden(ids)))
        losses.append(trainer.step(lambda: F.cross_entropy(logits().flatten(0, 1), targets.flatten())))
        on_step(step + 1, trainer)
    return losses


class TinyLMTrain(TinyLM):
    def hidden(self, ids):
        x = self.embed(ids)
        x = dense_twin.block_forward(self, "b0_", x, 4)
        return dense_twin.block_forward(self, "b1_", x, 4)


def exactly_zero_gradients(model, tokens, batch, seq, seed):
    """Names of the params whose gradient at the first step is zero up to f64 rounding (below 1e-12
    of the largest gradient): softmax is shift-invariant along the keys, so a key projection's bias,
    which adds the same q·b to every score of a query, gets a gradient of exactly zero."""
    model = copy.deepcopy(model).double()
    rows = torch.tensor(token_offsets(len(tokens), seq, batch, seed, 0))[:, None] + torch.arange(seq + 1)
    window = torch.from_numpy(tokens).long()[rows]
    logits = model.head(model.ln_f(model.hidden(window[:, :-1])))
    F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten()).backward()
    grads = {name: p.grad.abs().max().item() for name, p in model.named_parameters()}
    largest = max(grads.values())
    return sorted(name for name, g in grads.items() if g <= 1e-12 * largest)


def checkpoint_params(path):
    """A teeny checkpoint's params (no optimizer state), as f32 arrays."""
    return {k: v.float().numpy() for k, v in load_file(path).items() if not k.startswith("optimizer.")}


def main():
    return run_in_workdir(parse_args(), run_twin)


def run_twin(args, workdir):
    path = lambda name: os.path.join(workdir, name)
    device = vision_twin.setup_torch(args.seed)  # seeds the init, TF32 off
    if args.device == "cpu":
        device = torch.device("cpu")
    tol = TOLERANCES[args.dtype]

    with open(SPEC) as f:
        spec = yaml.safe_load(f)
    spec_path = SPEC
    if args.dtype == "bf16":
        spec["nodes"][0]["dtype"] = "bf16"  # the embedding's output, so every node downstream
        spec["name"] += "_bf16"
        spec_path = path("tiny_lm_train_bf16.yaml")
        with open(spec_path, "w") as f:
            yaml.safe_dump(spec, f, sort_keys=False)
    section = spec["train"]
    steps = args.steps or int(section["optimizer"]["total_steps"])
    checked = min(CHECKED_STEPS, steps)
    batch, seq = spec["dims"]["B"]["default"], spec["dims"]["S"]["default"]

    tokens = text_tokens()
    split = len(tokens) * 9 // 10
    train, held = tokens[:split], tokens[split:]
    np.save(path("tokens.npy"), train)
    val_ids, val_targets = windows(held, np.linspace(0, len(held) - seq - 1, HELD_OUT_WINDOWS).astype(int), seq)
    np.save(path("val_ids.npy"), val_ids.astype(np.int32))

    model = TinyLMTrain()
    dense_twin.randomise_norms(model, args.seed)
    dense_twin.export_weights(model, path("init.safetensors"))
    zero_grad = exactly_zero_gradients(model, train, batch, seq, args.seed)
    model = model.to(device=device, dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float32)

    bundle = path("train.teeny")
    teeny(args, "compile", spec_path, "-o", bundle)
    teeny(args, "compile", os.path.join(REPO, "graphs", "tiny_lm.yaml"), "-o", path("tiny_lm.teeny"))
    common = ["--device", args.device, "--tokens", f"ids,targets={path('tokens.npy')}", "--seed", str(args.seed),
              "--log-every", "1"]
    log = teeny(args, "train", bundle, *common, "--weights", path("init.safetensors"), "--steps", str(checked),
                "--save", path("ckpt50.safetensors"))
    if steps > checked:
        log += teeny(args, "train", bundle, *common, "--resume", path("ckpt50.safetensors"), "--steps", str(steps),
                     "--save", path("final.safetensors"))
    print("\n".join(line for line in log.splitlines() if not line.startswith("step ")))

    print(f"PyTorch {torch.__version__} on {device}, {args.dtype}: {steps} steps of AdamW")
    at_checked = {}
    keep = lambda step, trainer: at_checked.update(trainer.state()) if step == checked else None
    want_losses = torch_train(model, section, train, batch, seq, args.seed, steps, device, keep)

    ok = compare_losses(teeny_losses(log), want_losses, steps, checked, tol["loss"])
    want_params = {k: v for k, v in at_checked.items() if not k.startswith("optimizer.")}
    got_params = checkpoint_params(path("ckpt50.safetensors"))
    if args.dtype == "bf16":
        # A zero gradient computed in bf16 is rounding noise far above AdamW's eps, which
        # normalises it into steps of about lr: such params random-walk apart on the two sides.
        for name in zero_grad:
            print(f"  {name}: not compared; its gradient is zero in exact arithmetic (f64 at step 1), so in bf16 "
                  "both sides move it by AdamW-normalised rounding noise")
            want_params.pop(name)
            got_params.pop(name, None)
    ok &= compare_checkpoint(got_params, want_params, lambda name: tol["params"])

    final = path("final.safetensors" if steps > checked else "ckpt50.safetensors")
    vision_twin.save_safetensors(path("params.safetensors"), checkpoint_params(final))
    teeny(args, "run", path("tiny_lm.teeny"), "--device", args.device, "--bind", f"B={HELD_OUT_WINDOWS}", "--bind",
          f"S={seq}", "--weights",
          path("params.safetensors"), "--input", f"ids={path('val_ids.npy')}", "--output",
          f"logprobs={path('logprobs.npy')}")
    teeny_held = held_out_loss(np.load(path("logprobs.npy")), val_targets)
    model.float()  # evaluated in f32 as teeny's params are
    with torch.no_grad():
        ids = torch.from_numpy(val_ids).long().to(device)
        logits = model.head(model.ln_f(model.hidden(ids))).float()
        torch_held = held_out_loss(F.log_softmax(logits, dim=-1).cpu().numpy(), val_targets)
    entropy = unigram_entropy(train)
    close = abs(teeny_held - torch_held) <= tol["held_out"] * torch_held
    learned = max(teeny_held, torch_held) < entropy
    print(f"  held-out loss ({HELD_OUT_WINDOWS} windows of {seq}): teeny {teeny_held:.4f}, PyTorch {torch_held:.4f}: "
          f"{'ok' if close else 'MISMATCH'} (within {tol['held_out']:.0%}); unigram entropy of the text "
          f"{entropy:.4f}: {'ok' if learned else 'NOT LEARNED'}; initial loss {want_losses[0]:.4f} "
          f"(ln 1003 = {math.log(1003):.4f})")
    ok &= close and learned

    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
