#!/usr/bin/env python3
"""Convolution benchmark: teeny's conv2d against PyTorch's best on the same GPU, in the same run.

Cases: every distinct conv (Cin, Cout, k, stride, H_in) of torchvision's ResNet-50 at 224x224 (v1.5:
the stride on the bottleneck's 3x3; stem, 1x1 reduce, 3x3, 1x1 expand and the 1x1 downsample per stage)
and of a YOLOv8-s neck at 640x640 (1x1 and 3x3 convs on the 80/40/20 maps, 128/256/512 channels, the
two stride-2 downsamples), padding k // 2, no bias; at batch 1, 8, 32 and 128, in f32 and bf16.
teeny: a one-node conv2d graph per (conv, dtype), compiled once per batch (`teeny compile --bind B=N`)
and profiled (`teeny profile --format json`: runs[0].gpu_time.median_us). PyTorch: F.conv2d eager,
replayed as a CUDA graph and by its kernels' GPU time (bench_common.TORCH_MODES), with
cudnn.benchmark on, TF32 off (f32 is f32, as teeny's 3xTF32), and bf16 input and weight in
channels-last (cuDNN's fast layout for 16-bit; f32 stays NCHW, as teeny's). Per case: teeny / PyTorch's
best (< 1 means teeny is faster) and the TFLOP/s of both (2·Cout·Cin/groups·k²·B·Hout·Wout / time).
Per band (dtype and batch: "bf16 B=32") the geometric mean and worst of teeny / PyTorch's best. Prints a
Markdown table and writes every case to bench/results/<date>-<gpu>.json (suite "conv";
scripts/bench_common.py).

Run on the GPU machine after building:
  python3 scripts/bench_conv.py [--teeny build/teeny] [--batches 1,8] [--dtypes bf16] [--filter SUBSTRING]
      [--list]
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile

from bench_common import RESULTS_DIR, REPO, TORCH_MODES, case_result, print_bands, teeny_profile, write_results

BATCHES = [1, 8, 32, 128]
DTYPES = ["f32", "bf16"]


def resnet50_convs():
    """(module, Cin, Cout, k, stride, H_in) of each conv of torchvision's resnet50, in network order."""
    convs = [("conv1", 3, 64, 7, 2, 224)]
    c_in, size = 64, 56  # after the 3x3 stride-2 max pool
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], 1):
        for block in range(blocks):
            name, stride = f"layer{stage}.{block}", 2 if stage > 1 and block == 0 else 1
            convs += [(f"{name}.conv1", c_in, width, 1, 1, size), (f"{name}.conv2", width, width, 3, stride, size),
                      (f"{name}.conv3", width, 4 * width, 1, 1, size // stride)]
            if block == 0:
                convs.append((f"{name}.downsample.0", c_in, 4 * width, 1, stride, size))
            c_in, size = 4 * width, size // stride
    return convs


# Ultralytics' YOLOv8-s neck (width 0.5: P3/P4/P5 = 128/256/512 channels at 80/40/20): the C2f blocks'
# 1x1 cv1 (on the upsampled concat) and cv2, their bottlenecks' 3x3, and the stride-2 downsample convs.
YOLO_NECK = [("model.12.cv1", 768, 256, 1, 1, 40), ("model.12.m.0.cv1", 128, 128, 3, 1, 40),
             ("model.15.cv1", 384, 128, 1, 1, 80), ("model.15.m.0.cv1", 64, 64, 3, 1, 80),
             ("model.15.cv2", 192, 128, 1, 1, 80), ("model.16", 128, 128, 3, 2, 80),
             ("model.19", 256, 256, 3, 2, 40), ("model.21.cv1", 768, 512, 1, 1, 20)]


def distinct_convs():
    """Each conv geometry once, labelled by its first module: a list of dicts."""
    seen, out = set(), []
    for model, convs in (("ResNet-50", resnet50_convs()), ("YOLOv8-s neck", YOLO_NECK)):
        for module, c_in, c_out, k, stride, size in convs:
            if (c_in, c_out, k, stride, size) in seen:
                continue
            seen.add((c_in, c_out, k, stride, size))
            geometry = f"{k}x{k}{f' s{stride}' if stride > 1 else ''} {c_in}->{c_out} @{size}"
            out.append({"label": f"{model} {module} {geometry}", "c_in": c_in, "c_out": c_out, "k": k,
                        "stride": stride, "pad": k // 2, "size": size,
                        "out_size": (size + 2 * (k // 2) - k) // stride + 1})
    return out


def graph_text(conv, dtype):
    size = conv["size"]
    return (f"name: conv\ndims: {{B: {{min: 1, max: 1024, default: 16}}}}\n"
            f"inputs: {{x: {{dtype: {dtype}, shape: [B, {conv['c_in']}, {size}, {size}]}}}}\n"
            f"nodes:\n  - {{name: op, op: conv2d, inputs: [x], attrs: {{out_channels: {conv['c_out']}, "
            f"kernel_size: {conv['k']}, stride: {conv['stride']}, padding: {conv['pad']}, bias: false}}}}\n"
            f"outputs: [op]\n")


def conv_flops(conv, batch):
    return 2 * conv["c_out"] * conv["c_in"] * conv["k"] ** 2 * batch * conv["out_size"] ** 2


def compile_bundle(teeny, graph, batch):
    """`teeny compile` with B bound, so the kernels pick their tiles for the real problem size."""
    bundle = f"{graph[:-5]}-B{batch}.teeny"
    argv = [teeny, "compile", graph, "-o", bundle, "--bind", f"B={batch}"]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_conv: `{' '.join(argv)}` failed (exit {out.returncode}):\n{out.stderr.strip()}")
    return bundle


def torch_conv(torch, conv, batch, dtype):
    """F.conv2d with its own random weight, and the input to time it on. torch_medians passes its
    inputs as given, so the layout is set here, once: for bf16 both weight and input are channels-last
    (an NCHW input would add a layout transform to every timed call, or an NCHW kernel), and the
    output comes out channels-last too; f32 stays NCHW."""
    import torch.nn.functional as F
    layout = torch.contiguous_format if dtype == torch.float32 else torch.channels_last
    w = (torch.randn(conv["c_out"], conv["c_in"], conv["k"], conv["k"], device="cuda") * 0.1).to(
        dtype=dtype, memory_format=layout)
    x = torch.randn(batch, conv["c_in"], conv["size"], conv["size"], device="cuda").to(dtype=dtype,
                                                                                       memory_format=layout)
    return (lambda x: F.conv2d(x, w, None, conv["stride"], conv["pad"])), x


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")))
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)), help="comma-separated (default: %(default)s)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated (default: %(default)s)")
    parser.add_argument("--filter", help="only the convs whose label contains this")
    parser.add_argument("--list", action="store_true", help="print the convs and stop (no GPU needed)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where <date>-<gpu>.json goes")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.dtypes = args.dtypes.split(",")
    if not set(args.dtypes) <= set(DTYPES):
        parser.error(f"--dtypes: each of {', '.join(DTYPES)}")
    return args


def main():
    args = parse_args()
    convs = [c for c in distinct_convs() if not args.filter or args.filter in c["label"]]
    if args.list:
        for conv in convs:
            print(f"{conv['label']:<52} {conv_flops(conv, 1) / 1e9:6.2f} GFLOP/image")
        print(f"{len(convs)} convs x {len(args.batches)} batches x {len(args.dtypes)} dtypes = "
              f"{len(convs) * len(args.batches) * len(args.dtypes)} cases")
        return 0
    from bench_common import import_torch, torch_cells, torch_header, torch_medians
    torch = import_torch("bench_conv")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    torch_dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    started = datetime.datetime.now().isoformat(timespec="seconds")
    workdir = tempfile.mkdtemp(prefix="teeny-bench-conv-")
    graphs = {}
    for dtype in args.dtypes:
        for i, conv in enumerate(convs):
            graphs[dtype, i] = os.path.join(workdir, f"conv{i}_{dtype}.yaml")
            with open(graphs[dtype, i], "w") as f:
                f.write(graph_text(conv, dtype))

    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          "cudnn.benchmark, TF32 off, bf16 channels-last\n")
    print(f"| case | teeny us | {torch_header()} | best | teeny/best | teeny TFLOP/s | torch TFLOP/s |")
    print("| --- | ---: |" + " ---: |" * len(TORCH_MODES) + " --- | ---: | ---: | ---: |")
    rows, env = [], None
    for dtype in args.dtypes:
        for batch in args.batches:
            for i, conv in enumerate(convs):
                bundle = compile_bundle(args.teeny, graphs[dtype, i], batch)
                teeny_us, flops, nbytes, env = teeny_profile(args.teeny, bundle, {"B": batch}, args.iterations)
                fn, x = torch_conv(torch, conv, batch, torch_dtypes[dtype])
                torch_us = torch_medians(fn, [x], args.iterations)
                del fn, x  # B=128's tensors go before the next case's
                flop = conv_flops(conv, batch)
                tflops = flop / teeny_us / 1e6
                label = f"{conv['label']} B={batch} {dtype}"
                row = case_result(label, f"{dtype} B={batch}", teeny_us, torch_us, flops, nbytes,
                                  f"{tflops:.1f} TFLOP/s", batch=batch, dtype=dtype, binds={"B": batch})
                row.update({"tflops": tflops, "torch_best_tflops": flop / row["torch_best_us"] / 1e6})
                rows.append(row)
                print(f"| {label} | {teeny_us:.1f} | {torch_cells(torch_us)} | {row['torch_best']} | "
                      f"{row['teeny_over_best']:.2f} | {tflops:.1f} | {row['torch_best_tflops']:.1f} |", flush=True)
    run_info = {"script": "scripts/bench_conv.py", "argv": sys.argv[1:], "started": started,
                "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "cudnn_benchmark": True,
                "tf32": False, "torch_16bit_layout": "channels_last", "iterations": args.iterations,
                "batches": args.batches, "dtypes": args.dtypes, "filter": args.filter, "teeny_environment": env}
    path = write_results("conv", torch.cuda.get_device_name(), run_info, rows, args.results_dir)
    print_bands(rows)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
