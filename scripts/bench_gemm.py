#!/usr/bin/env python3
"""GEMM benchmark over a grid of real-model shapes: teeny's `linear` against PyTorch's best.

For every (K, N) of SHAPES (Llama-2-7B, Mistral-7B, GPT-2, BERT-large, ResNet's classifier and
three awkward sizes), every dtype and every M of M_VALUES, one graph `y = linear(x[M, K], N)`
(bias on) is compiled with M symbolic twice: tuned (`teeny compile --tuning FILE` with the bench's
--tuning FILE, else the arch's built-in tuning) and untuned (`--tuning none`, the heuristic alone;
--no-untuned skips it). Both are profiled at each M (`teeny profile --format json`: the median GPU
time of an iteration, CUPTI). --tune first runs `teeny tune GRAPH --bind M=<m>` for every case
into one tuning file (--tuning FILE, merged and resumable, else a temporary one) and compiles the
tuned bundles with it. PyTorch's F.linear is timed eager, as a replayed CUDA graph and by its
kernels' GPU time (bench_common.TORCH_MODES; TF32 off for f32); --torch-compile adds the kernels'
GPU time of a torch.compile'd F.linear (default mode, M dynamic, compiled once per (K, N, dtype)).
Per case: teeny / PyTorch's best (the fastest mode, recorded), tuned and untuned, and the tuned
rate: weight GB/s against HBM bandwidth where M <= 64 (the weight stream bounds it), else TFLOP/s
against the dtype's peak. Per dtype and band of M (decode: M <= 16, small: 17-256, large: >= 257):
the geometric mean and worst of both ratios. Results go into bench/results/<date>-<gpu>.json,
suite "gemm" (scripts/bench_common.py; tuned is the headline teeny_us).

Run on the GPU machine after building:
  python3 scripts/bench_gemm.py [--teeny build/teeny] [--m 1,8,4096] [--dtype bf16] [--shape 4096x11008]
      [--tuning FILE|none] [--tune] [--no-untuned] [--torch-compile]
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time

from bench_common import (RESULTS_DIR, REPO, TORCH_MODES, case_result, import_torch, kernel_span_us, print_bands,
                          teeny_profile, torch_cells, torch_header, torch_medians, write_results)

torch = import_torch("bench_gemm")
import torch.nn.functional as F  # noqa: E402

# (model, K, N): y[M, N] = x[M, K] · W[N, K]ᵀ + b.
SHAPES = [
    ("Llama-2-7B up", 4096, 11008), ("Llama-2-7B down", 11008, 4096), ("Mistral-7B up", 4096, 14336),
    ("GPT-2 mlp", 768, 3072), ("BERT-large mlp", 1024, 4096), ("ResNet fc", 2048, 1000),
    ("awkward", 1000, 5003), ("awkward", 4099, 1531), ("awkward", 2999, 7001),
]
M_VALUES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384]
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
# H200 SXM dense peaks (no sparsity): tensor cores for 16-bit, CUDA cores for f32.
PEAK_TFLOPS = {"bf16": 989.0, "f16": 989.0, "f32": 67.0}


def m_band(m):
    return "M <= 16" if m <= 16 else ("M 17-256" if m <= 256 else "M >= 257")


def graph_text(k, n, dtype):
    return (f"name: gemm_{k}x{n}_{dtype}\ndims:\n  M: {{min: 1, max: {max(M_VALUES)}, default: 1}}\n"
            f"inputs:\n  x: {{dtype: {dtype}, shape: [M, {k}]}}\n"
            f"nodes:\n  - {{name: y, op: linear, inputs: [x], attrs: {{out_features: {n}}}}}\noutputs: [y]\n")


def rate(m, k, n, dtype, us, env):
    if m <= 64:
        weight_gbs = (k * n + n) * (4 if dtype == "f32" else 2) / us / 1e3
        ceiling = env.get("peak_bandwidth_gbps")
        pct = f" ({100 * weight_gbs / ceiling:.0f}% of {ceiling:.0f})" if ceiling else ""
        return f"{weight_gbs:.0f} GB/s of weight{pct}"
    tflops = 2 * m * k * n / us / 1e6
    return f"{tflops:.1f} TFLOP/s ({100 * tflops / PEAK_TFLOPS[dtype]:.0f}% of {PEAK_TFLOPS[dtype]:.0f})"


def parse_list(text, convert=str):
    return None if text is None else [convert(item) for item in text.split(",")]


def run_teeny(argv):
    """Runs a teeny command; on failure exits with its stderr, which check=True would hide."""
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_gemm: `{' '.join(argv)}` failed (exit {out.returncode}):\n{out.stderr.strip()}")


def write_graph(workdir, k, n, dtype):
    path = os.path.join(workdir, f"gemm_{k}x{n}_{dtype}.yaml")
    with open(path, "w") as f:
        f.write(graph_text(k, n, dtype))
    return path


def tune(teeny, graphs, ms, tuning):
    """`teeny tune` of every graph at every M into the one file `tuning`; returns the seconds taken.
    Candidates are checked on 8 sampled rows: the host reference of a row costs N x K MACs."""
    started = time.monotonic()
    for graph in graphs:
        for m in ms:
            run_teeny([teeny, "tune", graph, "--bind", f"M={m}", "--check-rows", "8", "-o", tuning])
        print(f"tuned {os.path.basename(graph)} at {len(ms)} M values, {time.monotonic() - started:.0f} s so far",
              flush=True)
    return time.monotonic() - started


def compile_bundle(teeny, graph, name, tuning):
    """`teeny compile` of `graph` into <graph>-<name>.teeny; tuning: a file, "none", or None (the
    arch's built-in tuning)."""
    bundle = f"{graph[:-5]}-{name}.teeny"
    run_teeny([teeny, "compile", graph, *(["--tuning", tuning] if tuning else []), "-o", bundle])
    return bundle


class CompiledLinear:
    """F.linear through torch.compile (default mode), timed by its kernels' GPU span
    (bench_common.kernel_span_us). One compile per (K, N, dtype) serves every M > 1: M is marked
    dynamic (Dynamo specialises M = 1 regardless). After a failure (no Triton, say) it warns once
    and measures nothing more."""

    def __init__(self):
        self.fn, self.error = None, None

    def new_family(self, weight, bias):
        self._guarded(lambda: self._compile(weight, bias))

    def kernels_us(self, x, iterations):
        """None when failed, or when kernel_span_us could not time the calls."""
        return self._guarded(lambda: self._time(x, iterations))

    def _compile(self, weight, bias):
        # Every family's lambda is one code object; without the reset the grid's compiles would
        # pass Dynamo's recompile limit for it and the rest would run eager.
        torch._dynamo.reset()
        self.fn = torch.compile(lambda x: F.linear(x, weight, bias))

    def _time(self, x, iterations):
        torch._dynamo.maybe_mark_dynamic(x, 0)
        with torch.no_grad():
            for _ in range(3):  # the first call compiles
                self.fn(x)
            return kernel_span_us(lambda: self.fn(x), iterations)

    def _guarded(self, step):
        if self.error is not None:
            return None
        try:
            return step()
        except Exception as error:  # Dynamo's, Inductor's or Triton's: the bench goes on without it
            lines = str(error).strip().splitlines()
            self.error = f"{type(error).__name__}: {lines[0] if lines else ''}"
            print(f"warning: torch.compile failed; PyTorch's best is without it from here on: {self.error}",
                  file=sys.stderr)
            return None


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")))
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--m", help="comma-separated M values (default: the whole grid)")
    parser.add_argument("--dtype", help="comma-separated dtypes (default: bf16,f16,f32)")
    parser.add_argument("--shape", help="comma-separated KxN shapes (default: every shape)")
    parser.add_argument("--tuning", metavar="FILE|none",
                        help="the tuned compile's tuning file (default: the arch's built-in one); none: "
                             "the heuristic, and no separate untuned compile")
    parser.add_argument("--tune", action="store_true",
                        help="first `teeny tune` every case into --tuning FILE (else a temporary file) and "
                             "compile the tuned bundles with it")
    parser.add_argument("--no-untuned", action="store_true", help="skip the untuned (--tuning none) compile")
    parser.add_argument("--torch-compile", action="store_true",
                        help="count torch.compile'd F.linear (its kernels' GPU time) in PyTorch's best")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where <date>-<gpu>.json goes")
    args = parser.parse_args()
    if args.tune and args.tuning == "none":
        parser.error("--tune writes a tuning file: give it --tuning FILE or no --tuning, not --tuning none")
    return args


def main():
    args = parse_args()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    torch.manual_seed(0)
    ms = parse_list(args.m, int) or M_VALUES
    dtypes = parse_list(args.dtype) or list(DTYPES)
    shapes = [s for s in SHAPES if not args.shape or f"{s[1]}x{s[2]}" in parse_list(args.shape)]
    workdir = tempfile.mkdtemp(prefix="teeny-bench-gemm-")
    graphs = {(dtype, k, n): write_graph(workdir, k, n, dtype) for dtype in dtypes for _, k, n in shapes}
    tuning, tune_seconds = args.tuning, None
    if args.tune:
        tuning = tuning or os.path.join(workdir, "tuning.json")
        tune_seconds = tune(args.teeny, list(graphs.values()), ms, tuning)
        print(f"tuning: {len(graphs) * len(ms)} cases into {tuning} in {tune_seconds:.0f} s\n")
    untuned = not args.no_untuned and tuning != "none"
    compiled = CompiledLinear() if args.torch_compile else None
    modes = list(TORCH_MODES) + (["torch.compile"] if compiled else [])

    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, TF32 off, teeny tuning: "
          f"{tuning or 'built-in'}\n")
    print(f"| case | teeny us |{' untuned us |' if untuned else ''} {torch_header(modes)} | best | teeny/best |"
          f"{' untuned/best |' if untuned else ''} teeny rate |")
    print("| --- | ---: |" + " ---: |" * (untuned + len(modes)) + " --- | ---: |" + " ---: |" * untuned + " --- |")
    rows, env = [], None
    for dtype in dtypes:
        for model, k, n in shapes:
            graph = graphs[dtype, k, n]
            bundle = compile_bundle(args.teeny, graph, "tuned", tuning)
            untuned_bundle = compile_bundle(args.teeny, graph, "untuned", "none") if untuned else None
            weight = (torch.randn(n, k, device=device) * 0.02).to(DTYPES[dtype])
            bias = (torch.randn(n, device=device) * 0.02).to(DTYPES[dtype])
            if compiled:
                compiled.new_family(weight, bias)
            for m in ms:
                teeny_us, flops, nbytes, env = teeny_profile(args.teeny, bundle, {"M": m}, args.iterations)
                untuned_us = (teeny_profile(args.teeny, untuned_bundle, {"M": m}, args.iterations)[0]
                              if untuned else None)
                x = torch.randn(m, k, device=device).to(DTYPES[dtype])
                torch_us = torch_medians(lambda x: F.linear(x, weight, bias), [x], args.iterations)
                compiled_us = compiled.kernels_us(x, args.iterations) if compiled else None
                if compiled_us is not None:
                    torch_us["torch.compile"] = compiled_us
                label = f"{model} M={m} K={k} N={n} {dtype}"
                row = case_result(label, f"{dtype} {m_band(m)}", teeny_us, torch_us, flops, nbytes,
                                  rate(m, k, n, dtype, teeny_us, env), untuned_us=untuned_us, binds={"M": m})
                rows.append(row)
                untuned_cells = ((f" {untuned_us:.1f} |", f" {row['teeny_untuned_over_best']:.2f} |") if untuned
                                 else ("", ""))
                print(f"| {label} | {teeny_us:.1f} |{untuned_cells[0]} {torch_cells(torch_us, modes)} | "
                      f"{row['torch_best']} | {row['teeny_over_best']:.2f} |{untuned_cells[1]} {row['rate']} |",
                      flush=True)
    run_info = {"script": "scripts/bench_gemm.py", "argv": sys.argv[1:], "started": started,
                "torch": torch.__version__, "tf32": False, "iterations": args.iterations,
                "tuning": tuning or "built-in", "tune_seconds": tune_seconds, "untuned": untuned,
                "torch_compile": bool(compiled), "torch_compile_error": compiled.error if compiled else None,
                "teeny_environment": env}
    path = write_results("gemm", torch.cuda.get_device_name(), run_info, rows, args.results_dir)
    print_bands(rows)
    if tune_seconds is not None:
        print(f"tuning took {tune_seconds:.0f} s ({tuning})")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
