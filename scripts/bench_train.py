#!/usr/bin/env python3
"""Training benchmark: a training step of teeny against PyTorch's best on the same GPU, same run.

Models (each a graph in graphs/ and its PyTorch twin's module) at small and large batches:
mnist_mlp_train (B 64 and 4096), tiny_lm_train (B x S = 16 x 64 and 64 x 256, f32) and
transformer_block_bf16_train (B x S = 8 x 512 and 64 x 512, bf16 with f32 master weights).

teeny: `teeny train` of the compiled bundle on random data of the graph's shapes (two batches of
samples; token ids for tiny_lm), the median wall time of a step over the steps after the first
five (its progress lines: the batch gathered and uploaded, the forward and backward graph, the loss
read back, the update graph); its GPU time per step from `teeny profile` of the same bundle; the
memory a step holds from its `memory:` line (activations, saved tensors and gradients planned by
liveness, params and optimizer state).

PyTorch: the same model and optimizer (AdamW, clipping by the total norm; f32 with TF32 off, or
bf16 autocast over f32 params, PyTorch's own way to keep f32 master weights) on one batch already
on the GPU, timed per step with CUDA events (median): eager with the fused AdamW; the whole step
captured as a CUDA graph (capturable AdamW) and replayed; torch.compile'd model with eager fused
AdamW (--no-torch-compile leaves it out). Its memory: torch.cuda.max_memory_allocated over the
eager steps. PyTorch's best is the fastest of these; the ratio teeny / best < 1 means teeny is
faster. teeny's step includes feeding a new batch from the host every step and reading back the
loss; PyTorch's reuses one batch on the GPU and does not synchronise, so the comparison leans
PyTorch's way. Achieved TFLOP/s uses the bundle's FLOP count (every launch's cost expression).

Writes bench/results/<date>-<gpu>.json (suite "train"; scripts/bench_common.py) and prints a table.
Run on the GPU machine after building: python3 scripts/bench_train.py [--teeny build/teeny]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from bench_common import REPO, RESULTS_DIR, case_result, import_torch, median_us, write_results

torch = import_torch("bench_train")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch_twins"))
import dense_twin  # noqa: E402
from mnist_mlp_train import MnistMlp  # noqa: E402
from tiny_lm_train import TinyLMTrain  # noqa: E402

TEENY_STEPS, TEENY_SKIPPED = 30, 5
TORCH_STEPS = 30


class Block(nn.Module):
    """graphs/transformer_block_bf16_train.yaml's block (GPT-2 small: d 768, 12 heads, MLP 3072)."""

    def __init__(self):
        super().__init__()
        dense_twin.add_block(self, "", 768, 3072)

    def forward(self, x):
        return dense_twin.block_forward(self, "", x, 12)


# name: (graph, [binds], model, batch maker(binds, device) -> (inputs..., ), loss(model, *batch), bf16, rate unit)
def mnist_batch(b, device):
    return torch.rand(b["B"], 784, device=device), torch.randint(0, 10, (b["B"],), device=device)


def lm_batch(b, device):
    ids = torch.randint(0, 256, (b["B"], b["S"] + 1), device=device)
    return ids[:, :-1], ids[:, 1:]


def block_batch(b, device):
    return (torch.randn(b["B"], b["S"], 768, device=device), torch.randn(b["B"], b["S"], 768, device=device))


def lm_loss(model, ids, targets):
    return F.cross_entropy(model.head(model.ln_f(model.hidden(ids))).flatten(0, 1), targets.flatten())


MODELS = {
    "mnist_mlp_train": ([{"B": 64}, {"B": 4096}], MnistMlp, mnist_batch,
                        lambda m, x, y: F.cross_entropy(m(x), y), False, "samples"),
    "tiny_lm_train": ([{"B": 16, "S": 64}, {"B": 64, "S": 256}], TinyLMTrain, lm_batch, lm_loss, False, "tokens"),
    "transformer_block_bf16_train": ([{"B": 8, "S": 512}, {"B": 64, "S": 512}], Block, block_batch,
                                     lambda m, x, t: F.mse_loss(m(x), t), True, "tokens"),
}


def teeny_data(graph, binds, workdir):
    """teeny train's data flags: random samples of the graph's inputs (two batches), or tokens."""
    rng = np.random.default_rng(0)
    b = binds["B"]
    if graph == "tiny_lm_train":
        path = os.path.join(workdir, "tokens.npy")
        np.save(path, rng.integers(0, 256, 1 << 20).astype(np.int32))
        return ["--tokens", f"ids,targets={path}"]
    arrays = ({"x": rng.random((2 * b, 784), np.float32), "labels": rng.integers(0, 10, 2 * b).astype(np.int32)}
              if graph == "mnist_mlp_train" else
              {name: rng.standard_normal((2 * b, binds["S"], 768), np.float32) for name in ("x", "target")})
    flags = []
    for name, array in arrays.items():
        path = os.path.join(workdir, f"{name}.npy")
        np.save(path, array)
        flags += ["--data", f"{name}={path}"]
    return flags


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout


def teeny_step(teeny, bundle, graph, binds, workdir):
    """(median step ms after the first TEENY_SKIPPED, GPU ms per step, FLOPs per step, memory bytes)."""
    bind_flags = [f for k, v in binds.items() for f in ("--bind", f"{k}={v}")]
    log = run([teeny, "train", bundle, *bind_flags, *teeny_data(graph, binds, workdir), "--steps",
               str(TEENY_STEPS), "--log-every", "1"])
    steps = [float(ms) for ms in re.findall(r"^step \d+/\d+\s+loss \S+\s+(\S+) ms", log, re.M)]
    memory = re.search(r"^memory: activations and gradients (.+?) planned .*optimizer state (.+)$", log, re.M)
    profile = json.loads(run([teeny, "profile", bundle, *bind_flags, "--warmup", "3", "--iterations", "10",
                              "--format", "json"]))["runs"][0]
    flops = sum(launch["flops"] for launch in profile["launches"])
    return (statistics.median(steps[TEENY_SKIPPED:]), profile["gpu_time"]["median_us"] / 1000, flops,
            f"{memory.group(1)} + {memory.group(2)}" if memory else "?")


def torch_steps(model_cls, batch_fn, loss_fn, bf16, binds, compile_too):
    """{mode: median step us}, peak memory bytes of the eager steps."""
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = model_cls().to(device)
    batch = batch_fn(binds, device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16)

    def stepper(module, optimizer):
        def step():
            optimizer.zero_grad(set_to_none=True)
            with autocast:
                loss = loss_fn(module, *batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            optimizer.step()
        return step

    times = {}
    torch.cuda.reset_peak_memory_stats()
    eager = stepper(model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True))
    times["eager"] = median_us(eager, TORCH_STEPS, warmup=5)
    memory = torch.cuda.max_memory_allocated()

    graphed = stepper(model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True, capturable=True))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            graphed()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graphed()
    times["CUDA graph"] = median_us(graph.replay, TORCH_STEPS, warmup=5)

    if compile_too:
        compiled = stepper(torch.compile(model), torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True))
        times["torch.compile"] = median_us(compiled, TORCH_STEPS, warmup=5)
    return times, memory


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")))
    parser.add_argument("--no-torch-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--only", help="only the models whose name contains this")
    parser.add_argument("--results-dir", default=RESULTS_DIR)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    rows = []
    print("| case | teeny step ms | teeny GPU ms | torch eager ms | CUDA graph ms | torch.compile ms | teeny / best "
          "| teeny TFLOP/s | teeny memory | torch peak memory |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="teeny-bench-train-") as workdir:
        for graph, (shapes, model_cls, batch_fn, loss_fn, bf16, unit) in MODELS.items():
            if args.only and args.only not in graph:
                continue
            bundle = os.path.join(workdir, graph + ".teeny")
            run([args.teeny, "compile", os.path.join(REPO, "graphs", graph + ".yaml"), "-o", bundle])
            for binds in shapes:
                case = f"{graph} " + " ".join(f"{k}={v}" for k, v in binds.items())
                step_ms, gpu_ms, flops, memory = teeny_step(args.teeny, bundle, graph, binds, workdir)
                times, torch_memory = torch_steps(model_cls, batch_fn, loss_fn, bf16, binds,
                                                  not args.no_torch_compile)
                units = binds["B"] * binds.get("S", 1)
                rate = {"tflops": flops / (step_ms * 1e9), "per_second": units / step_ms * 1e3, "unit": unit}
                result = case_result(case, graph, step_ms * 1e3, times, flops, 0, rate, teeny_gpu_us=gpu_ms * 1e3,
                                     teeny_memory=memory, torch_peak_memory_bytes=torch_memory)
                rows.append(result)
                cell = lambda mode: f"{times[mode] / 1e3:.3f}" if mode in times else "-"
                print(f"| {case} | {step_ms:.3f} | {gpu_ms:.3f} | {cell('eager')} | {cell('CUDA graph')} | "
                      f"{cell('torch.compile')} | {result['teeny_over_best']:.2f} | {rate['tflops']:.1f} | {memory} | "
                      f"{torch_memory / 2**20:.1f} MiB |", flush=True)
    run_info = {"models": list(MODELS), "torch": torch.__version__, "tf32": False, "teeny_steps": TEENY_STEPS,
                "torch_steps": TORCH_STEPS, "torch_compile": not args.no_torch_compile, "only": args.only}
    print("results:", write_results("train", torch.cuda.get_device_name(), run_info, rows, args.results_dir))


if __name__ == "__main__":
    main()
