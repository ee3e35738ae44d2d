"""Shared pieces of the vision PyTorch twins (lenet5.py, yolo_head.py).

A twin builds the same model as a graph in graphs/, with module names equal to the graph's dotted
param names, exports its weights as safetensors and a random input as .npy, runs
`teeny compile` + `teeny run` on them, and compares teeny's output with PyTorch's within stated
tolerances. Exit status: 0 match, 1 mismatch, 2 a teeny command failed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(description, default_batch):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")),
                        help="teeny binary (default: $TEENY, else build/teeny)")
    parser.add_argument("--batch", type=int, nargs="+", default=[default_batch], help="batch sizes to check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", help="keep the weights, inputs, bundles and outputs here")
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                        help="gpu (default): teeny runs on the GPU; cpu: teeny's host reference executor runs "
                        "(no GPU needed)")
    return parser.parse_args()


def setup_torch(seed):
    """Deterministic fp32 PyTorch: cuDNN and matmul without TF32, the GPU when there is one."""
    torch.manual_seed(seed)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def random_batchnorm(model, calibration):
    """`model` with BatchNorm weights drawn away from 1 and biases away from 0, and the running
    statistics of one training-mode pass over `calibration` (a cumulative average), so every
    normalisation does real work; returned in eval mode."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.momentum = None
        model.train()
        model(calibration)
    return model.eval()


def save_safetensors(path, tensors):
    """Writes {name: float32 array} in the safetensors format (header length, JSON header, data)."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for data in blobs:
            f.write(data)


def export_weights(model, path, rename=lambda name: name):
    """The state dict by dotted name (or `rename`'s of it), without BatchNorm's step counter (not a
    graph param)."""
    tensors = {rename(name): value.detach().float().cpu().numpy() for name, value in model.state_dict().items()
               if not name.endswith("num_batches_tracked")}
    save_safetensors(path, tensors)
    return sorted(tensors)


def teeny(args, *command):
    print("$", " ".join([args.teeny, *command]), flush=True)
    result = subprocess.run([args.teeny, *command])
    if result.returncode != 0:
        print(f"teeny exited with {result.returncode}", file=sys.stderr)
        sys.exit(2)


def compare(label, got, want, rtol, atol):
    """True when |got - want| <= atol + rtol * |want| everywhere; prints the figures either way."""
    if got.shape != want.shape:
        print(f"{label}: MISMATCH shape {got.shape} vs PyTorch {want.shape}")
        return False
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    allowed = atol + rtol * np.abs(want)
    bad = ~(err <= allowed)  # NaN counts as a mismatch
    verdict = "ok" if not bad.any() else f"MISMATCH ({int(bad.sum())} of {err.size} outside)"

    def at(index):
        index = np.unravel_index(index, err.shape)
        return (f"{err[index]:.3g} at {tuple(int(i) for i in index)} "
                f"(teeny {got[index]:.6g}, PyTorch {want[index]:.6g})")

    # The largest error and the error closest to (or furthest past) its tolerance, which for
    # small values is usually a different element.
    print(f"{label}: {verdict}; max abs err {at(np.argmax(np.where(np.isnan(err), np.inf, err)))}; "
          f"nearest its tolerance {at(np.argmax(np.where(np.isnan(err), np.inf, err / allowed)))}; "
          f"tolerance atol {atol:g} + rtol {rtol:g}")
    return not bad.any()


def run_twin(args, graph, model, make_input, output, rtol, atol, variants=(("fused", []),), references=None,
             rename=lambda name: name):
    """Exports `model` (its param names through `rename`), runs every compile variant of `graph` at
    every batch size, compares. `references` optionally maps a label to another model whose own
    error against `model` is printed for scale (e.g. PyTorch bf16 vs the float64 reference)."""
    workdir = args.workdir or tempfile.mkdtemp(prefix="teeny-twin-")
    os.makedirs(workdir, exist_ok=True)
    weights = os.path.join(workdir, "weights.safetensors")
    names = export_weights(model, weights, rename)
    print(f"exported {len(names)} tensors to {weights}")
    bundles = []
    for label, flags in variants:
        bundle = os.path.join(workdir, f"{label}.teeny")
        teeny(args, "compile", os.path.join(REPO, "graphs", graph), "-o", bundle, *flags)
        bundles.append((label, bundle))
    ok = True
    for batch in args.batch:
        x = make_input(batch)
        x_path = os.path.join(workdir, f"x_b{batch}.npy")
        np.save(x_path, x.cpu().numpy())
        with torch.no_grad():
            want = model(x).float().cpu().numpy()
            for label, other in (references or {}).items():
                theirs = other(x).float().cpu().numpy()
                print(f"  for scale: {label} vs the reference: max abs err {np.abs(theirs - want).max():.3g}")
        for label, bundle in bundles:
            out_dir = os.path.join(workdir, f"out_{label}_b{batch}")
            teeny(args, "run", bundle, "--bind", f"B={batch}", "--weights", weights, "--input", f"x={x_path}",
                  "--output-dir", out_dir, "--device", args.device)
            got = np.load(os.path.join(out_dir, f"{output}.npy"))
            ok &= compare(f"{graph} {label} B={batch} '{output}'", got, want, rtol, atol)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1
