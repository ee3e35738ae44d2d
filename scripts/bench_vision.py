#!/usr/bin/env python3
"""Vision benchmark: teeny against PyTorch on the same GPU, in the same run.

Per op at representative shapes, and each vision graph (lenet5, yolo_head, resnet18) at B=1 and B=16:
teeny's median GPU time (`teeny compile --bind B=N` then `teeny profile --format json`:
runs[0].gpu_time.median_us), PyTorch's
medians eager, CUDA-graph and of its kernels alone (bench_common.TORCH_MODES; cuDNN, TF32 off),
the ratio teeny / PyTorch's best (< 1 means teeny is faster), and teeny's achieved TFLOP/s or GB/s from the ops'
cost expressions. Prints a Markdown table and writes every case, with the geometric mean and worst
of teeny / PyTorch's best per band, to bench/results/<date>-<gpu>.json (suite "vision";
scripts/bench_common.py).

Run on the GPU machine after building: python3 scripts/bench_vision.py [--teeny build/teeny]
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile

from bench_common import (REPO, RESULTS_DIR, TORCH_HEADER, case_result, import_torch, teeny_profile, torch_cells,
                          torch_medians, write_results)

torch = import_torch("bench_vision")
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch_twins"))
import lenet5  # noqa: E402
import resnet18  # noqa: E402
import yolo_head  # noqa: E402

# PyTorch function builders: each takes the device and returns fn(x) with its own random weights.
def conv(c_in, c_out, k, s=1, p=0, g=1, bias=True):
    def build(device):
        w = torch.randn(c_out, c_in // g, k, k, device=device) * 0.1
        b = torch.randn(c_out, device=device) if bias else None
        return lambda x: F.conv2d(x, w, b, s, p, 1, g)
    return build


def conv_bn_silu(c_in, c_out, k, s=1, p=0, g=1):
    def build(device):
        w = torch.randn(c_out, c_in // g, k, k, device=device) * 0.1
        stats = [torch.rand(c_out, device=device) + 0.5 for _ in range(4)]
        return lambda x: F.silu(F.batch_norm(F.conv2d(x, w, None, s, p, 1, g), stats[0], stats[1], stats[2],
                                             stats[3], False, 0.0, 1e-3))
    return build


def batchnorm(c):
    def build(device):
        stats = [torch.rand(c, device=device) + 0.5 for _ in range(4)]
        return lambda x: F.batch_norm(x, stats[0], stats[1], stats[2], stats[3], False, 0.0, 1e-5)
    return build


def decode(levels):
    def build(device):
        anchors, strides = yolo_head.make_anchors(levels, device)
        return lambda x: yolo_head.dist2bbox(x, anchors.unsqueeze(0), xywh=True, dim=1) * strides
    return build


# The bands of cases the results summarise (geometric mean and worst per band); graphs: one per batch.
OP_BANDS = {"conv2d": "convolutions", "conv2d_bn_silu": "convolutions"}
OTHER_OPS_BAND = "pool, batchnorm, upsample, decode"

# (label, op, attrs (YAML flow map), input shape without the batch, PyTorch function builder)
OPS = [
    ("conv 3x3 64->64 @56", "conv2d", "{out_channels: 64, kernel_size: 3, padding: 1}", [64, 56, 56],
     conv(64, 64, 3, 1, 1)),
    ("conv 3x3 s2 64->128 @64", "conv2d", "{out_channels: 128, kernel_size: 3, stride: 2, padding: 1}",
     [64, 64, 64], conv(64, 128, 3, 2, 1)),
    ("conv 1x1 256->256 @28", "conv2d", "{out_channels: 256, kernel_size: 1}", [256, 28, 28],
     conv(256, 256, 1)),
    ("conv 5x5 1->6 @32 (LeNet c1)", "conv2d", "{out_channels: 6, kernel_size: 5}", [1, 32, 32], conv(1, 6, 5)),
    ("depthwise 3x3 128 @56", "conv2d", "{out_channels: 128, kernel_size: 3, padding: 1, groups: 128}",
     [128, 56, 56], conv(128, 128, 3, 1, 1, 128)),
    ("conv_bn_silu 3x3 s2 32->64 @64", "conv2d_bn_silu",
     "{out_channels: 64, kernel_size: 3, stride: 2, padding: 1}", [32, 64, 64], conv_bn_silu(32, 64, 3, 2, 1)),
    ("conv_bn_silu 3x3 192->64 @32", "conv2d_bn_silu", "{out_channels: 64, kernel_size: 3, padding: 1}",
     [192, 32, 32], conv_bn_silu(192, 64, 3, 1, 1)),
    ("batchnorm2d 64 @56", "batchnorm2d", "{}", [64, 56, 56], batchnorm(64)),
    ("maxpool k5 s1 p2 128 @16", "maxpool2d", "{kernel_size: 5, stride: 1, padding: 2}", [128, 16, 16],
     lambda d: lambda x: F.max_pool2d(x, 5, 1, 2)),
    ("maxpool k2 64 @56", "maxpool2d", "{kernel_size: 2}", [64, 56, 56], lambda d: lambda x: F.max_pool2d(x, 2)),
    ("avgpool k2 64 @56", "avgpool2d", "{kernel_size: 2}", [64, 56, 56], lambda d: lambda x: F.avg_pool2d(x, 2)),
    ("global_avgpool 256 @28", "global_avgpool", "{}", [256, 28, 28],
     lambda d: lambda x: F.adaptive_avg_pool2d(x, 1)),
    ("upsample x2 128 @32", "upsample_nearest2d", "{}", [128, 32, 32],
     lambda d: lambda x: F.interpolate(x, scale_factor=2, mode="nearest")),
    ("detect_decode A=1344", "yolo.detect_decode", "{levels: [[32, 32, 8], [16, 16, 16], [8, 8, 32]]}", [4, 1344],
     decode(yolo_head.LEVELS)),
]

GRAPHS = [
    ("lenet5", "lenet5.yaml", [1, 32, 32], lambda d: lenet5.LeNet5().to(d).eval()),
    ("yolo_head", "yolo_head.yaml", [3, 256, 256], lambda d: yolo_head.build(d)),
    ("resnet18", "resnet18.yaml", [3, 224, 224], lambda d: resnet18.build(d)),
]


def op_graph(op, attrs, shape):
    dims = ", ".join(str(n) for n in shape)
    return (f"name: bench\ndims: {{B: {{min: 1, max: 1024, default: 16}}}}\n"
            f"inputs: {{x: {{dtype: f32, shape: [B, {dims}]}}}}\n"
            f"nodes:\n  - {{name: op, op: {op}, inputs: [x], attrs: {attrs}}}\noutputs: [op]\n")


def compiled_bundle(teeny, graph_path, batch, workdir, tag):
    bundle = os.path.join(workdir, f"{tag}.teeny")
    # B fixed at compile time, so the conv kernels pick their tiles for the real problem size.
    subprocess.run([teeny, "compile", graph_path, "-o", bundle, "--bind", f"B={batch}"], check=True,
                   stdout=subprocess.DEVNULL)
    return bundle


def rate(flops, nbytes, us):
    # Convs are compute-bound: TFLOP/s; everything else is memory-bound: GB/s.
    if flops >= 4 * nbytes:
        return f"{flops / us / 1e6:.2f} TFLOP/s"
    return f"{nbytes / us / 1e3:.0f} GB/s"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")))
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--op-batch", type=int, default=16, help="batch for the per-op rows")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where <date>-<gpu>.json goes")
    args = parser.parse_args()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    torch.manual_seed(0)
    workdir = tempfile.mkdtemp(prefix="teeny-bench-vision-")

    cases = []
    for label, op, attrs, shape, build in OPS:
        path = os.path.join(workdir, f"op{len(cases)}.yaml")
        with open(path, "w") as f:
            f.write(op_graph(op, attrs, shape))
        cases.append((label, OP_BANDS.get(op, OTHER_OPS_BAND), path, [args.op_batch], shape, build))
    for label, graph, shape, build in GRAPHS:
        cases.append((label, None, os.path.join(REPO, "graphs", graph), [1, 16], shape, build))  # band: by batch

    rows = []
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          "TF32 off, fp32\n")
    print(f"| case | B | teeny us | {TORCH_HEADER} | teeny/best | teeny rate |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    env = None
    for label, band, path, batches, shape, build in cases:
        fn = build(device)
        for batch in batches:
            bundle = compiled_bundle(args.teeny, path, batch, workdir, f"{len(rows)}")
            teeny_us, flops, nbytes, env = teeny_profile(args.teeny, bundle, {"B": batch}, args.iterations)
            x = torch.randn(batch, *shape, device=device)
            torch_us = torch_medians(fn, [x], args.iterations)
            row = case_result(label, band or f"graphs, B={batch}", teeny_us,
                              torch_us, flops, nbytes,
                              rate(flops, nbytes, teeny_us), batch=batch)
            rows.append(row)
            print(f"| {label} | {batch} | {teeny_us:.1f} | {torch_cells(torch_us)} | {row['teeny_over_best']:.2f} | "
                  f"{row['rate']} |", flush=True)
    run_info = {"script": "scripts/bench_vision.py", "argv": sys.argv[1:], "started": started,
                "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "tf32": False,
                "iterations": args.iterations, "op_batch": args.op_batch, "teeny_environment": env}
    print("results:", write_results("vision", torch.cuda.get_device_name(), run_info, rows, args.results_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
