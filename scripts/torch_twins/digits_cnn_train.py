#!/usr/bin/env python3
"""Training twin of graphs/digits_cnn_train.yaml: `teeny train` and PyTorch train a small CNN with
batch norm in training mode (conv -> bn -> relu -> maxpool -> strided conv -> bn -> relu -> global
average pool -> linear, cross-entropy, SGD with Nesterov momentum) from the same initial weights on
the same batches of scikit-learn's 8x8 digits (pixels / 16; 360 held out by a fixed permutation),
and must agree step by step; then both evaluate in inference mode, with the running statistics.

Compared, each within |teeny - torch| <= atol + rtol * |torch|:
  - the loss of each of the first 50 steps: atol 1e-5, rtol 1e-4;
  - after the last step (--steps, default 200: the schedule's length), every tensor of teeny's
    checkpoint: params and the running statistics (atol 1e-4, rtol 1e-3) and the momentum buffers
    (atol 1e-4, rtol 1e-3);
  - inference: teeny's run of the spec without its `train:` section (the loss node and labels
    dropped, the classifier's logits out) on PyTorch's final params and running statistics against
    PyTorch's model.eval() on the held-out digits (atol 1e-4, rtol 1e-4: the same weights, so only
    summation order differs), and held-out accuracy of each side's own params within 2 samples of
    the other's, both at least 90%.
Why these: both sides start from the same bits and compute in f32 (TF32 off), so they differ by
summation order: in the convolutions, the batch statistics (sums over B x H x W) and the loss. Batch
norm divides by the batch's standard deviation, which amplifies a relative rounding difference of a
variance by about one half, still of f32 epsilon's order; SGD compounds the params' differences
slowly at this learning rate. A wrong batch, a statistic over the wrong axes, a biased running
variance or a missed momentum term moves the losses by 1e-2 or more within the first steps, and the
running statistics by far more than their tolerance.

Usage: TEENY=build/teeny python3 scripts/torch_twins/digits_cnn_train.py [--device cpu] [--steps N]
Exit status: 0 match, 1 mismatch, 2 a teeny command failed.
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

from train_twin import (REPO, array_batch, compare, compare_accuracy, compare_checkpoint, compare_losses,
                       run_in_workdir, teeny, teeny_losses, torch_device, Trainer, twin_parser)

SPEC = os.path.join(REPO, "graphs", "digits_cnn_train.yaml")
HELD_OUT = 360
LOSS_STEPS = 50
LOSS_TOL = (1e-5, 1e-4)
STATE_TOL = (1e-4, 1e-3)
INFERENCE_TOL = (1e-4, 1e-4)


class DigitsCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def parse_args():
    parser = twin_parser(__doc__)
    return parser.parse_args()


def digits():
    """sklearn's digits as [1797, 1, 8, 8] f32 in [0, 1] and i32 labels."""
    d = load_digits()
    return (d.images / 16.0).astype(np.float32)[:, None], d.target.astype(np.int32)


def inference_spec(spec, path):
    """The training spec in inference mode: no `train:`, no loss, the logits out."""
    spec = dict(spec, name=spec["name"] + "_eval", outputs=["fc"])
    del spec["train"]
    spec["inputs"] = {"x": spec["inputs"]["x"]}
    spec["nodes"] = [n for n in spec["nodes"] if n["name"] != "loss"]
    with open(path, "w") as f:
        yaml.safe_dump(spec, f, sort_keys=False)


def float_state(model):
    """The state dict without num_batches_tracked (an integer counter teeny does not keep)."""
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items() if v.is_floating_point()}


def main():
    return run_in_workdir(parse_args(), run_twin)


def run_twin(args, workdir):
    path = lambda name: os.path.join(workdir, name)
    device = torch_device(args)

    with open(SPEC) as f:
        spec = yaml.safe_load(f)
    section, batch = spec["train"], spec["dims"]["B"]["default"]
    args.steps = args.steps or int(spec["train"]["optimizer"]["total_steps"])
    inference_spec(spec, path("eval.yaml"))

    x, y = digits()
    order = np.random.RandomState(0).permutation(len(x))
    test, train = order[:HELD_OUT], order[HELD_OUT:]
    np.save(path("x.npy"), x[train])
    np.save(path("labels.npy"), y[train])
    np.save(path("test_x.npy"), x[test])

    torch.manual_seed(args.seed)
    model = DigitsCnn().to(device)
    save_file(float_state(model), path("init.safetensors"))

    teeny(args, "compile", SPEC, "-o", path("train.teeny"))
    teeny(args, "compile", path("eval.yaml"), "-o", path("eval.teeny"))
    log = teeny(args, "train", path("train.teeny"), "--device", args.device, "--data", f"x={path('x.npy')}",
                "--data", f"labels={path('labels.npy')}", "--seed", str(args.seed), "--weights",
                path("init.safetensors"), "--steps", str(args.steps), "--log-every", "1", "--save",
                path("ckpt.safetensors"))
    print("\n".join(line for line in log.splitlines() if not line.startswith("step ")))

    print(f"PyTorch {torch.__version__} on {device}: {args.steps} steps of SGD, batch norm in training mode")
    model.train()
    trainer = Trainer(model, section)
    xs, ys = torch.from_numpy(x[train]).to(device), torch.from_numpy(y[train]).long().to(device)
    want_losses = []
    for step in range(args.steps):
        rows = torch.tensor(array_batch(len(train), batch, args.seed, step), device=device)
        want_losses.append(trainer.step(lambda: F.cross_entropy(model(xs[rows]), ys[rows])))

    ok = compare_losses(teeny_losses(log), want_losses, args.steps, min(LOSS_STEPS, args.steps), LOSS_TOL)
    ckpt = load_file(path("ckpt.safetensors"))
    ok &= compare_checkpoint(ckpt, trainer.state(), lambda name: STATE_TOL)

    model.eval()
    with torch.no_grad():
        want_logits = model(torch.from_numpy(x[test]).to(device)).cpu().numpy()
    run = lambda weights, out: teeny(args, "run", path("eval.teeny"), "--device", args.device, "--bind",
                                     f"B={HELD_OUT}", "--weights", weights, "--input", f"x={path('test_x.npy')}",
                                     "--output", f"fc={out}")
    save_file(float_state(model), path("torch_final.safetensors"))
    run(path("torch_final.safetensors"), path("logits_torch_params.npy"))
    ok &= compare("inference on PyTorch's params (running statistics)", np.load(path("logits_torch_params.npy")),
                  want_logits, INFERENCE_TOL)
    save_file({k: v for k, v in ckpt.items() if not k.startswith("optimizer.")}, path("params.safetensors"))
    run(path("params.safetensors"), path("logits.npy"))
    ok &= compare_accuracy(np.load(path("logits.npy")), want_logits, y[test], 0.9)

    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
