#!/usr/bin/env python3
"""GEMM benchmark over a grid of real-model shapes: teeny's `linear` against PyTorch's best.

For every (K, N) of SHAPES (Llama-2-7B, Mistral-7B, GPT-2, BERT-large, ResNet's classifier and
three awkward sizes), every dtype and every M of M_VALUES, one graph `y = linear(x[M, K], N)`
(bias on) is compiled once with M symbolic and profiled at each M (`teeny profile --format json`:
the median GPU time of an iteration, CUPTI), and PyTorch's F.linear is timed eager, as a
replayed CUDA graph and by its kernels' GPU time (bench_common.TORCH_MODES; TF32 off for f32).
Per dtype and band of M (decode: M <= 16, small: 17-256, large: >= 257) it reports the geometric mean and worst of teeny / PyTorch's best, and per case
the achieved rate: weight GB/s against HBM bandwidth where M <= 64 (the weight stream bounds it),
else TFLOP/s against the dtype's peak. Results go into bench/results/<date>-<gpu>.json, suite
"gemm" (scripts/bench_common.py).

Run on the GPU machine after building:
  python3 scripts/bench_gemm.py [--teeny build/teeny] [--m 1,8,4096] [--dtype bf16] [--shape 4096x11008]
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile

from bench_common import (RESULTS_DIR, REPO, TORCH_HEADER, band_summaries, case_result, import_torch, teeny_profile,
                          torch_cells, torch_medians,
                          write_results)

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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")))
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--m", help="comma-separated M values (default: the whole grid)")
    parser.add_argument("--dtype", help="comma-separated dtypes (default: bf16,f16,f32)")
    parser.add_argument("--shape", help="comma-separated KxN shapes (default: every shape)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where <date>-<gpu>.json goes")
    args = parser.parse_args()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    torch.manual_seed(0)
    ms = parse_list(args.m, int) or M_VALUES
    dtypes = parse_list(args.dtype) or list(DTYPES)
    shapes = [s for s in SHAPES if not args.shape or f"{s[1]}x{s[2]}" in parse_list(args.shape)]
    workdir = tempfile.mkdtemp(prefix="teeny-bench-gemm-")

    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, TF32 off\n")
    print(f"| case | teeny us | {TORCH_HEADER} | teeny/best | teeny rate |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    rows, env = [], None
    for dtype in dtypes:
        for model, k, n in shapes:
            path = os.path.join(workdir, f"gemm_{k}x{n}_{dtype}.yaml")
            with open(path, "w") as f:
                f.write(graph_text(k, n, dtype))
            bundle = path[:-5] + ".teeny"
            subprocess.run([args.teeny, "compile", path, "-o", bundle], check=True, capture_output=True)
            weight = (torch.randn(n, k, device=device) * 0.02).to(DTYPES[dtype])
            bias = (torch.randn(n, device=device) * 0.02).to(DTYPES[dtype])
            for m in ms:
                teeny_us, flops, nbytes, env = teeny_profile(args.teeny, bundle, {"M": m}, args.iterations)
                x = torch.randn(m, k, device=device).to(DTYPES[dtype])
                torch_us = torch_medians(lambda x: F.linear(x, weight, bias), [x], args.iterations)
                label = f"{model} M={m} K={k} N={n} {dtype}"
                row = case_result(label, f"{dtype} {m_band(m)}", teeny_us, torch_us,
                                  flops, nbytes, rate(m, k, n, dtype, teeny_us, env), binds={"M": m})
                rows.append(row)
                print(f"| {label} | {teeny_us:.1f} | {torch_cells(torch_us)} | {row['teeny_over_best']:.2f} | "
                      f"{row['rate']} |", flush=True)
    run_info = {"script": "scripts/bench_gemm.py", "argv": sys.argv[1:], "started": started,
                "torch": torch.__version__, "tf32": False, "iterations": args.iterations, "teeny_environment": env}
    path = write_results("gemm", torch.cuda.get_device_name(), run_info, rows, args.results_dir)
    print("\n| band | cases | geomean teeny/best | worst |\n| --- | ---: | ---: | --- |")
    for band in band_summaries(rows):
        print(f"| {band['band']} | {band['cases']} | {band['geomean_teeny_over_best']:.2f} | "
              f"{band['worst']['teeny_over_best']:.2f} {band['worst']['case']} |")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
