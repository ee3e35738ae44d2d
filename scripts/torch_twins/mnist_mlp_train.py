#!/usr/bin/env python3
"""Training twin of graphs/mnist_mlp_train.yaml: `teeny train` and PyTorch train mnist_mlp
(784 -> 256 relu -> 10, cross-entropy) from the same initial weights on the same batches of
scikit-learn's digits, and must agree step by step.

The data: the 1797 8x8 digits, pixels scaled to [0, 1], each upscaled to 24x24 (a 3x3 block per
pixel) and padded by 2 to 28x28, so the 784-input MLP is unchanged; a fixed permutation holds out
360 samples and trains on the other 1437. PyTorch's model starts from torch.manual_seed(--seed),
its weights go to teeny as init.safetensors (`fc1.weight`, ...), and PyTorch takes, at every step,
the samples teeny's batch order gives (docs/training.md, "Data order", reproduced below), with the
spec's optimizer, clipping and schedule (`LambdaLR(factor(k + 1))`, "Optimizer semantics").
`--optimizer sgd` trains a copy of the spec whose optimizer is SGD with Nesterov momentum instead.

Compared, each within |teeny - torch| <= atol + rtol * |torch|:
  - the loss of each of the first 50 steps (teeny's progress lines): atol 1e-5, rtol 1e-4;
  - after the last step (--steps, default 200: the schedule's length), every param in teeny's
    checkpoint: atol 1e-4, rtol 1e-3; every optimizer state with rtol 1e-3 and an atol scaled to
    its size: exp_avg 1e-6, exp_avg_sq 1e-8, momentum_buffer 1e-5;
  - held-out accuracy (teeny's by `teeny run` of graphs/mnist_mlp.yaml on the checkpoint's params):
    within 2 samples of PyTorch's, and both at least 85%.
Why these: both sides start from the same bits and compute in f32 (TF32 off in PyTorch), so they
differ only by rounding, mostly the order of summation in the matmuls and in the loss's and the
clip norm's reductions (teeny's host reference adds in double and rounds once, its GPU kernels add
in f32 in their own order): a few f32 epsilons of each sum, about 1e-6 on a loss near 2. Training
compounds the params' differences, slowly at these learning rates, and AdamW's normalised step
(m / sqrt(v)) can turn a rounding difference in a near-zero gradient into one of its step size,
hence the params' rtol. The tolerances sit one to two orders of magnitude above what rounding
gives, while a wrong batch, schedule step or update formula moves the losses by 1e-2 or more
within the first steps.

Usage: TEENY=build/teeny python3 scripts/torch_twins/mnist_mlp_train.py [--device cpu] [--steps N]
(--device cpu runs teeny's host reference executor and PyTorch on the CPU). Exit status: 0 match,
1 mismatch, 2 a teeny command failed.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml
from safetensors.numpy import load_file, save_file
from sklearn.datasets import load_digits

from train_twin import (REPO, array_batch, compare_accuracy, compare_checkpoint, compare_losses,
                       run_in_workdir, teeny, teeny_losses, torch_device, Trainer, twin_parser)

SPEC = os.path.join(REPO, "graphs", "mnist_mlp_train.yaml")
HELD_OUT = 360
LOSS_STEPS = 50
LOSS_TOL = (1e-5, 1e-4)  # (atol, rtol)
PARAM_TOL = (1e-4, 1e-3)
STATE_TOL = {"exp_avg": (1e-6, 1e-3), "exp_avg_sq": (1e-8, 1e-3), "momentum_buffer": (1e-5, 1e-3)}
SGD = {"type": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4,
       "schedule": "warmup_cosine", "warmup_steps": 10, "total_steps": 200, "min_lr_ratio": 0.1}

def parse_args():
    parser = twin_parser(__doc__)
    parser.add_argument("--optimizer", choices=["spec", "sgd"], default="spec",
                        help="spec (default): the spec's AdamW; sgd: SGD with Nesterov momentum")
    return parser.parse_args()


def digits_784():
    """sklearn's digits as [1797, 784] f32 in [0, 1] (8x8 -> 24x24 -> padded 28x28) and i32 labels."""
    digits = load_digits()
    images = np.stack([np.pad(np.kron(im / 16.0, np.ones((3, 3))), 2) for im in digits.images])
    return images.reshape(len(images), 784).astype(np.float32), digits.target.astype(np.int32)


class MnistMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def torch_train(model, train_section, x, y, batch, seed, steps, device):
    """PyTorch on teeny's batches; returns the trainer and each step's loss."""
    trainer = Trainer(model, train_section)
    xs, ys = torch.from_numpy(x).to(device), torch.from_numpy(y).long().to(device)
    losses = []
    for step in range(steps):
        rows = torch.tensor(array_batch(len(x), batch, seed, step), device=device)
        losses.append(trainer.step(lambda: F.cross_entropy(model(xs[rows]), ys[rows])))
    return trainer, losses


def main():
    return run_in_workdir(parse_args(), run_twin)


def run_twin(args, workdir):
    path = lambda name: os.path.join(workdir, name)
    device = torch_device(args)

    with open(SPEC) as f:
        spec = yaml.safe_load(f)
    spec_path = SPEC
    if args.optimizer == "sgd":
        spec["train"]["optimizer"] = SGD
        spec["name"] += "_sgd"
        spec_path = path("mnist_mlp_train_sgd.yaml")
        with open(spec_path, "w") as f:
            yaml.safe_dump(spec, f, sort_keys=False)
    train_section = spec["train"]
    args.steps = args.steps or int(spec["train"]["optimizer"]["total_steps"])
    batch = spec["dims"]["B"]["default"]

    x, y = digits_784()
    held_out = np.random.RandomState(0).permutation(len(x))
    test, train = held_out[:HELD_OUT], held_out[HELD_OUT:]
    np.save(path("x.npy"), x[train])
    np.save(path("labels.npy"), y[train])
    np.save(path("test_x.npy"), x[test])

    torch.manual_seed(args.seed)
    model = MnistMlp().to(device)
    save_file({k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}, path("init.safetensors"))

    teeny(args, "compile", spec_path, "-o", path("train.teeny"))
    teeny(args, "compile", os.path.join(REPO, "graphs", "mnist_mlp.yaml"), "-o", path("mnist_mlp.teeny"))
    log = teeny(args, "train", path("train.teeny"), "--device", args.device, "--data", f"x={path('x.npy')}",
                "--data", f"labels={path('labels.npy')}", "--seed", str(args.seed), "--weights",
                path("init.safetensors"), "--steps", str(args.steps), "--log-every", "1", "--save",
                path("ckpt.safetensors"))
    print("\n".join(line for line in log.splitlines() if not line.startswith("step ")))
    got_losses = teeny_losses(log)

    print(f"PyTorch {torch.__version__} on {device}: {args.steps} steps of {train_section['optimizer']['type']}")
    trainer, want_losses = torch_train(model, train_section, x[train], y[train], batch, args.seed, args.steps,
                                       device)

    ok = compare_losses(got_losses, want_losses, args.steps, min(LOSS_STEPS, args.steps), LOSS_TOL)
    ckpt = load_file(path("ckpt.safetensors"))
    state_tol = lambda name: STATE_TOL[name.split(".")[-1]] if name.startswith("optimizer.") else PARAM_TOL
    ok &= compare_checkpoint(ckpt, trainer.state(), state_tol)

    # `teeny run --weights` takes params only: the checkpoint without its optimizer.* entries.
    save_file({k: v for k, v in ckpt.items() if not k.startswith("optimizer.")}, path("params.safetensors"))
    teeny(args, "run", path("mnist_mlp.teeny"), "--device", args.device, "--bind", f"B={HELD_OUT}", "--weights",
          path("params.safetensors"), "--input", f"x={path('test_x.npy')}", "--output",
          f"probs={path('probs.npy')}")
    with torch.no_grad():
        torch_scores = model(torch.from_numpy(x[test]).to(device)).cpu().numpy()
    ok &= compare_accuracy(np.load(path("probs.npy")), torch_scores, y[test], 0.85)

    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
