#!/usr/bin/env python3
"""Attention benchmark over a grid: teeny's `sdpa` against PyTorch's best, same GPU, same run.

Cases (bf16 by default; --dtype f16 also works):
  - prefill: head dim 64, 128, 256 x S = Sq = Skv in 128 .. 16384 x causal and not x two batch x
    head counts, one under a wave of 64-query tiles on 132 SMs (or a single head where even one head
    makes more) and one of at least two waves;
  - grouped-query attention: 32 query heads on 4 or 8 k/v heads (8:1, 4:1), head dim 128, causal,
    S 1024 and 4096, batch 4;
  - decode: Sq 1 and 4 against Skv 1k .. 128k, 32 query heads on 8 k/v heads (Llama-3-8B's), head
    dim 128, batch 1 and 8, no mask.
teeny: one graph per (head dim, causal, kv_groups, Sq and Skv tied or not) with N, Sq, Skv symbolic,
compiled once and profiled at each binding (`teeny profile --format json`: median GPU time of an
iteration, CUPTI). PyTorch: F.scaled_dot_product_attention on [B, H, S, D] tensors (enable_gqa for
grouped heads; is_causal is top-left aligned, as teeny's mask), under each SDPA backend that
accepts the case (flash, cuDNN, memory-efficient, and the default choice), eager, replayed as a
CUDA graph and by its kernels' GPU time (bench_common.TORCH_MODES); PyTorch's best is the fastest
of all of them. Per case: teeny / PyTorch's best, achieved TFLOP/s (prefill: 4·Sq·Skv·D per head,
half under causal) or GB/s of K and V read (decode); per band (prefill per head dim, GQA, decode)
the geometric mean and worst. Results go into bench/results/<date>-<gpu>.json, suite "attention".

Run on the GPU machine after building:
  python3 scripts/bench_attention.py [--teeny build/teeny] [--only SUBSTRING] [--list]
"""
import argparse
import datetime
import math
import os
import subprocess
import sys
import tempfile

from bench_common import RESULTS_DIR, REPO, TORCH_MODES, case_result, print_bands, teeny_profile, write_results

SMS, TILE = 132, 64  # the H200's SMs; the prefill kernels' query tile
PREFILL_DIMS = [64, 128, 256]
PREFILL_LENGTHS = [128, 512, 1024, 2048, 4096, 8192, 16384]
GQA = [(8, 1024), (8, 4096), (4, 1024), (4, 4096)]  # (query heads per k/v head, S)
DECODE_LENGTHS = [1024, 4096, 16384, 32768, 131072]


def prefill_heads(seq, waves):
    """Batch x heads giving under a wave of query tiles ("< 1 wave"; one head where one head is
    already more) or at least two waves."""
    tiles = math.ceil(seq / TILE)
    return max(1, (SMS - 1) // tiles) if waves == "< 1 wave" else max(1, math.ceil(2 * SMS / tiles))


def cases(only):
    """Every case: a dict of label, band, head dim, causal, kv_groups, B, H (query heads), Sq, Skv."""
    out = []
    for dim in PREFILL_DIMS:
        for seq in PREFILL_LENGTHS:
            for causal in (False, True):
                for waves in ("< 1 wave", ">= 2 waves"):
                    n = prefill_heads(seq, waves)
                    out.append({"label": f"d{dim} S={seq}{' causal' if causal else ''} BH={n} ({waves})",
                                "band": f"prefill d{dim}", "dim": dim, "causal": causal, "groups": 1, "batch": 1,
                                "heads": n, "sq": seq, "skv": seq})
    for groups, seq in GQA:
        out.append({"label": f"GQA {groups}:1 d128 S={seq} causal B=4 H=32", "band": "grouped-query", "dim": 128,
                    "causal": True, "groups": groups, "batch": 4, "heads": 32, "sq": seq, "skv": seq})
    for batch in (1, 8):
        for sq in (1, 4):
            for skv in DECODE_LENGTHS:
                out.append({"label": f"decode Sq={sq} Skv={skv} B={batch} H=32/8 d128", "band": "decode",
                            "dim": 128, "causal": False, "groups": 4, "batch": batch, "heads": 32, "sq": sq,
                            "skv": skv})
    return [c for c in out if not only or only in c["label"]]


def graph_text(dim, causal, groups, dtype):
    return (f"name: attention_d{dim}{'_causal' if causal else ''}_g{groups}\n"
            f"dims:\n  N: {{min: 1, max: 1048576, default: 1}}\n  Q: {{min: 1, max: 1048576, default: 1}}\n"
            f"  T: {{min: 1, max: 1048576, default: 1}}\n"
            f"inputs:\n  q: {{dtype: {dtype}, shape: [N*{groups}, Q, {dim}]}}\n"
            f"  k: {{dtype: {dtype}, shape: [N, T, {dim}]}}\n  v: {{dtype: {dtype}, shape: [N, T, {dim}]}}\n"
            f"nodes:\n  - {{name: o, op: sdpa, inputs: [q, k, v], "
            f"attrs: {{causal: {'true' if causal else 'false'}, kv_groups: {groups}}}}}\noutputs: [o]\n")


def bundle_for(teeny, workdir, case, dtype, bundles):
    """The compiled graph of the case's head dim, mask and kv_groups (compiled once)."""
    key = (case["dim"], case["causal"], case["groups"])
    if key not in bundles:
        graph = os.path.join(workdir, f"attention_{'_'.join(map(str, key))}.yaml")
        with open(graph, "w") as f:
            f.write(graph_text(*key, dtype))
        bundle = graph[:-5] + ".teeny"
        out = subprocess.run([teeny, "compile", graph, "-o", bundle], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"bench_attention: compiling {graph} failed (exit {out.returncode}):\n{out.stderr.strip()}")
        bundles[key] = bundle
    return bundles[key]


def torch_best(torch, case, dtype, iterations):
    """{mode: median us}, each mode's fastest over the SDPA backends that take the case, and the
    backend of the fastest of all."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    from bench_common import torch_medians

    batch, heads, groups, dim = case["batch"], case["heads"], case["groups"], case["dim"]
    q = torch.randn(batch, heads, case["sq"], dim, device="cuda", dtype=dtype)
    k = torch.randn(batch, heads // groups, case["skv"], dim, device="cuda", dtype=dtype)
    v = torch.randn_like(k)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=case["causal"], enable_gqa=groups > 1)
    best, best_backend = {}, None
    backends = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for name, backend in backends.items():
        try:
            if backend is None:
                measured = torch_medians(fn, [q, k, v], iterations)
            else:
                with sdpa_kernel([backend]):
                    measured = torch_medians(fn, [q, k, v], iterations)
        except RuntimeError:  # the backend does not take this case (head dim, GQA, mask)
            continue
        for mode, us in measured.items():
            if us < best.get(mode, math.inf):
                best[mode] = us
        if best_backend is None or min(measured.values()) <= min(best.values()):
            best_backend = name
    return best, best_backend


def rate(case, flops, us, itemsize):
    if case["band"] == "decode":
        kv_bytes = 2 * case["batch"] * case["heads"] // case["groups"] * case["skv"] * case["dim"] * itemsize
        return f"{kv_bytes / us / 1e3:.0f} GB/s of K and V"
    return f"{flops / us / 1e6:.1f} TFLOP/s"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")))
    parser.add_argument("--dtype", choices=["bf16", "f16"], default="bf16")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--only", help="only the cases whose label contains this")
    parser.add_argument("--list", action="store_true", help="print the cases and stop (no GPU needed)")
    parser.add_argument("--results-dir", default=RESULTS_DIR)
    return parser.parse_args()


def main():
    args = parse_args()
    grid = cases(args.only)
    if args.list:
        for case in grid:
            print(f"{case['band']:>14}  {case['label']}")
        print(f"{len(grid)} cases")
        return 0
    from bench_common import import_torch, torch_cells, torch_header
    torch = import_torch("bench_attention")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    started = datetime.datetime.now().isoformat(timespec="seconds")
    workdir = tempfile.mkdtemp(prefix="teeny-bench-attention-")
    bundles, rows, env = {}, [], None
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}\n")
    print(f"| case | teeny us | {torch_header()} | best | teeny/best | teeny rate |")
    print("| --- | ---: |" + " ---: |" * len(TORCH_MODES) + " --- | ---: | --- |")
    for case in grid:
        bundle = bundle_for(args.teeny, workdir, case, args.dtype, bundles)
        binds = {"N": case["batch"] * case["heads"] // case["groups"], "Q": case["sq"], "T": case["skv"]}
        teeny_us, flops, nbytes, env = teeny_profile(args.teeny, bundle, binds, args.iterations)
        torch_us, backend = torch_best(torch, case, dtype, args.iterations)
        row = case_result(case["label"], case["band"], teeny_us, torch_us, flops, nbytes,
                          rate(case, flops, teeny_us, dtype.itemsize), binds=binds, torch_backend=backend)
        rows.append(row)
        print(f"| {case['label']} | {teeny_us:.1f} | {torch_cells(torch_us)} | {row['torch_best']} ({backend}) | "
              f"{row['teeny_over_best']:.2f} | {row['rate']} |", flush=True)
    run_info = {"script": "scripts/bench_attention.py", "argv": sys.argv[1:], "started": started,
                "torch": torch.__version__, "dtype": args.dtype, "iterations": args.iterations,
                "teeny_environment": env}
    path = write_results("attention", torch.cuda.get_device_name(), run_info, rows, args.results_dir)
    print_bands(rows)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
