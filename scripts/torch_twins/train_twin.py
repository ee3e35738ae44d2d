"""Shared pieces of the training twins (mnist_mlp_train.py, tiny_lm_train.py): teeny's batch order
(docs/training.md, "Data order"), its learning-rate schedule and optimizers in PyTorch terms, a
PyTorch training loop that follows them (with f32 master weights for a 16-bit model, as teeny's
optimizers keep them), the teeny calls and the comparisons. Not a twin itself: no graph has its name.
"""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def twin_parser(description):
    """The options every training twin takes; a twin adds its own to the parser."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")),
                        help="teeny binary (default: $TEENY, else build/teeny)")
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                        help="gpu (default): teeny and PyTorch on the GPU; cpu: teeny's host reference executor "
                        "and PyTorch on the CPU")
    parser.add_argument("--steps", type=int, help="training steps (default: the schedule's total_steps)")
    parser.add_argument("--seed", type=int, default=0, help="PyTorch's init and teeny's batch order")
    parser.add_argument("--workdir", help="keep the data, weights, bundles and checkpoints here")
    return parser


def run_in_workdir(args, run_twin):
    """run_twin(args, workdir) in --workdir, or in a temporary directory removed afterwards."""
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        return run_twin(args, args.workdir)
    with tempfile.TemporaryDirectory(prefix="teeny-train-twin-") as workdir:
        return run_twin(args, workdir)


def torch_device(args):
    """Where PyTorch trains (the GPU unless --device cpu or none), in f32 without TF32, as teeny, and
    with cuDNN's deterministic algorithms: a weight gradient summed by atomics in another order on
    each run would let the reference drift from run to run over hundreds of steps."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    return torch.device("cuda" if args.device == "gpu" and torch.cuda.is_available() else "cpu")


# docs/training.md, "Data order"
M64 = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class SplitMix64:
    def __init__(self, seed, stream):
        self.state = seed ^ mix(stream)

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        return mix(self.state)


def epoch_order(n, seed, epoch):
    g, p = SplitMix64(seed, epoch), list(range(n))
    for i in range(n - 1, 0, -1):
        j = g.next() % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def array_batch(n, batch, seed, step):
    """The sample indices of 0-based step `step`: drop_last batches of a reshuffled epoch."""
    per_epoch = n // batch
    p = epoch_order(n, seed, step // per_epoch)
    b = step % per_epoch
    return p[b * batch:(b + 1) * batch]


def token_offsets(tokens, seq, batch, seed, step):
    """The window offsets of 0-based step `step` of token data: row r reads tokens [o, o + seq)."""
    g = SplitMix64(seed, step)
    return [g.next() % (tokens - seq) for _ in range(batch)]


def lr_factor(opt, s):
    """docs/training.md, "Optimizer semantics": the schedule's factor at 1-based step s."""
    if opt.get("schedule", "constant") == "constant":
        return 1.0
    w, t, m = int(opt.get("warmup_steps", 0)), int(opt["total_steps"]), float(opt.get("min_lr_ratio", 0))
    if s <= w:
        return s / w
    return m + (1 - m) * (1 + math.cos(math.pi * min(1.0, (s - w) / max(1, t - w)))) / 2


def torch_optimizer(opt, params):
    # float(): PyYAML reads YAML 1.1, where a float needs a dot, so "2e-3" comes back a string.
    num = lambda key, default=None: float(opt.get(key, default))
    kind = opt["type"]
    if kind == "adamw":
        betas = tuple(float(b) for b in opt.get("betas", (0.9, 0.999)))
        return torch.optim.AdamW(params, lr=num("lr"), betas=betas, eps=num("eps", 1e-8),
                                 weight_decay=num("weight_decay", 0.01))
    if kind == "sgd":
        return torch.optim.SGD(params, lr=num("lr"), momentum=num("momentum", 0), dampening=num("dampening", 0),
                               weight_decay=num("weight_decay", 0), nesterov=opt.get("nesterov", False))
    raise ValueError(f"no PyTorch twin for optimizer '{kind}'")


class Trainer:
    """PyTorch training `model` as teeny trains a bundle: the spec's optimizer and schedule,
    clipping by the total norm, and for 16-bit params f32 master weights (docs/training.md,
    "Optimizer semantics"): the optimizer steps the f32 masters, from the 16-bit gradients, and
    the params receive the masters' rounding."""

    def __init__(self, model, train_section):
        self.model, self.section = model, train_section
        self.params = dict(model.named_parameters())
        self.masters = {name: p.detach().float().clone().requires_grad_(True)
                        for name, p in self.params.items() if p.dtype != torch.float32}
        opt = train_section["optimizer"]
        stepped = [self.masters.get(name, p) for name, p in self.params.items()]
        self.optimizer = torch_optimizer(opt, stepped)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda k: lr_factor(opt, k + 1))

    def step(self, loss_fn):
        """One step; loss_fn() computes the batch's loss. Returns the loss."""
        self.optimizer.zero_grad()
        self.model.zero_grad()
        loss = loss_fn()
        loss.backward()
        for name, master in self.masters.items():
            master.grad = self.params[name].grad.float()
        if "clip_grad_norm" in self.section:
            stepped = [self.masters.get(name, p) for name, p in self.params.items()]
            torch.nn.utils.clip_grad_norm_(stepped, self.section["clip_grad_norm"])
        self.optimizer.step()
        self.schedule.step()
        with torch.no_grad():
            for name, master in self.masters.items():
                self.params[name].copy_(master)
        return loss.item()

    def state(self):
        """The params, buffers (batch norm's running statistics) and optimizer state under teeny's
        checkpoint names."""
        tensors = {name: b for name, b in self.model.named_buffers() if b.is_floating_point()}
        for name, p in self.params.items():
            tensors[name] = p
            stepped = self.masters.get(name, p)
            for key, value in self.optimizer.state[stepped].items():
                if key != "step":
                    tensors[f"optimizer.{name}.{key}"] = value
            if name in self.masters:
                tensors[f"optimizer.{name}.master"] = stepped
        return {name: t.detach().float().cpu().numpy() for name, t in tensors.items()}


def teeny(args, *command):
    """Runs a teeny command, echoing its output; returns its stdout."""
    print("$", " ".join([args.teeny, *command]), flush=True)
    result = subprocess.run([args.teeny, *command], stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        print(result.stdout, end="")
        print(f"teeny exited with {result.returncode}", file=sys.stderr)
        sys.exit(2)
    return result.stdout


def teeny_losses(log):
    """{step: loss} from the progress lines `step k/N  loss L  ...`."""
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^step (\d+)/\d+\s+loss (\S+)", log, re.M)}


def compare(label, got, want, tol):
    """True when |got - want| <= atol + rtol * |want| everywhere; prints the figures either way."""
    atol, rtol = tol
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        print(f"  {label}: MISMATCH shape {got.shape} vs PyTorch {want.shape}")
        return False
    err = np.abs(got - want)
    bad = ~(err <= atol + rtol * np.abs(want))  # NaN counts as a mismatch
    worst = np.unravel_index(np.argmax(np.where(np.isnan(err), np.inf, err)), err.shape)
    verdict = "ok" if not bad.any() else f"MISMATCH ({int(bad.sum())} of {err.size} outside)"
    print(f"  {label}: {verdict}; max abs err {err[worst]:.3g} at {tuple(int(i) for i in worst)} "
          f"(teeny {got[worst]:.7g}, PyTorch {want[worst]:.7g}); atol {atol:g} + rtol {rtol:g}")
    return not bad.any()


def compare_losses(got_losses, want, steps, checked, tol):
    """teeny's progress-line losses against PyTorch's list: every step printed, the first `checked`
    within tol. Prints the scale and the largest difference over the whole run."""
    if sorted(got_losses) != list(range(1, steps + 1)):
        print(f"  teeny printed losses for {len(got_losses)} steps, expected {steps}")
        return False
    got = [got_losses[s + 1] for s in range(steps)]
    ok = compare(f"loss of steps 1-{checked}", got[:checked], want[:checked], tol)
    print(f"  for scale: loss {want[0]:.5g} -> {want[-1]:.5g}; max abs difference over all {steps} steps "
          f"{np.max(np.abs(np.subtract(got, want))):.3g}")
    return ok


def compare_accuracy(teeny_scores, torch_scores, labels, floor):
    """Held-out accuracy of each side's scores ([N, classes]): within 2 samples of each other and
    both at least `floor`. Prints both; returns whether they pass."""
    teeny_acc, torch_acc = (float(np.mean(np.argmax(s, axis=1) == labels)) for s in (teeny_scores, torch_scores))
    ok = abs(teeny_acc - torch_acc) * len(labels) <= 2 + 1e-9 and min(teeny_acc, torch_acc) >= floor
    print(f"  held-out accuracy ({len(labels)} digits): teeny {teeny_acc:.2%}, PyTorch {torch_acc:.2%}: "
          f"{'ok' if ok else 'MISMATCH'} (within 2 samples, both >= {floor:.0%})")
    return ok


def compare_checkpoint(ckpt, want_state, tolerance):
    """Every tensor of teeny's checkpoint against PyTorch's state of the same name;
    tolerance(name) gives its (atol, rtol)."""
    if sorted(ckpt) != sorted(want_state):
        print(f"  checkpoint tensors {sorted(ckpt)}, PyTorch's {sorted(want_state)}")
        return False
    ok = True
    for name in sorted(ckpt):
        ok &= compare(name, ckpt[name], want_state[name], tolerance(name))
    return ok
