#!/usr/bin/env python3
"""Dense benchmark: teeny against PyTorch on the same GPU, in the same run.

Per op at representative shapes (elementwise and norms at [32768, 4096]; linear at 4096^3 and at
MLP/GPT-2 shapes; sdpa at B=8, H=12, S=512/2048, Dh=64) and per dense graph (mnist_mlp at B=1/64;
transformer_block, transformer_block_bf16, llama_block (bf16, grouped-query attention, RoPE,
SwiGLU), tiny_lm at B=1/64 x S=128/512): teeny's median GPU
time (`teeny profile --format json`: runs[0].gpu_time.median_us), PyTorch's medians eager,
CUDA-graph and of its kernels alone (bench_common.TORCH_MODES; TF32 off for f32), the ratio
teeny / PyTorch's best (< 1: teeny is faster), and teeny's achieved TFLOP/s or GB/s from the ops' cost expressions with the
percentage of the device ceiling (bandwidth and f32 peak from teeny's profile environment; the
bf16 tensor-core ceiling is the H200's dense 989 TFLOP/s). Prints a Markdown table and writes every
case, with the geometric mean and worst of teeny / PyTorch's best per band, to
bench/results/<date>-<gpu>.json (suite "dense"; scripts/bench_common.py). --only SUBSTRING limits
the cases (the results file says so).

Run on the GPU machine after building: python3 scripts/bench_dense.py [--teeny build/teeny]
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile

from bench_common import (REPO, RESULTS_DIR, TORCH_HEADER, case_result, import_torch, teeny_profile, torch_cells,
                          torch_medians, write_results)

torch = import_torch("bench_dense")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch_twins"))
import dense_twin  # noqa: E402
import llama_block  # noqa: E402
import tiny_lm  # noqa: E402
import transformer_block  # noqa: E402

BF16_TENSOR_PEAK_GFLOPS = 989e3  # H200 SXM dense bf16 (no sparsity)
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def weight(device, dtype, *shape, scale=0.02):
    return (torch.randn(*shape, device=device) * scale).to(dtype)


# PyTorch builders: build(device, dtype) -> fn(*inputs), with their own random weights.
def linear(k, n):
    return lambda d, t: (lambda x, w=weight(d, t, n, k), b=weight(d, t, n): F.linear(x, w, b))


def layernorm(dim):
    return lambda d, t: (lambda x, w=weight(d, t, dim), b=weight(d, t, dim): F.layer_norm(x, (dim,), w, b, 1e-5))


def rmsnorm(dim):
    # PyTorch's fused RMSNorm (F.rms_norm), the fair baseline, not a composition of eager ops.
    return lambda d, t: (lambda x, w=weight(d, t, dim): F.rms_norm(x, (dim,), w, 1e-6))


def embedding(num, dim):
    return lambda d, t: (lambda ids, w=weight(d, t, num, dim): F.embedding(ids.long(), w))


def split_heads(heads):
    def fn(x):
        b, s, e = x.shape
        return x.view(b, s, heads, e // heads).transpose(1, 2).reshape(b * heads, s, e // heads).contiguous()
    return lambda d, t: fn


def sdpa_4d(q, k, v, heads, causal):
    """teeny's [B*H, S, Dh] sdpa in PyTorch as a [B, H, S, Dh] view: PyTorch's flash and
    memory-efficient kernels take only 4-D inputs (3-D ones fall back to the math path, which
    materialises S x S and would flatter teeny)."""
    four_d = lambda t: t.view(-1, heads, *t.shape[1:])
    return F.scaled_dot_product_attention(four_d(q), four_d(k), four_d(v), is_causal=causal).flatten(0, 1)


def plain(fn):
    return lambda d, t: fn


# The bands of cases the results summarise (geometric mean and worst per band).
OP_BANDS = {"relu": "elementwise", "gelu": "elementwise", "add": "elementwise", "scale": "elementwise",
            "softmax": "softmax, norms, reduce", "log_softmax": "softmax, norms, reduce",
            "layernorm": "softmax, norms, reduce", "rmsnorm": "softmax, norms, reduce",
            "reduce_sum": "softmax, norms, reduce", "embedding": "data movement", "transpose": "data movement",
            "split_heads": "data movement", "matmul": "matmul"}


def op_band(op, dtype):
    return OP_BANDS.get(op) or f"{op} {dtype}"  # linear and sdpa: one band per dtype


R, C = 32768, 4096  # elementwise / norm rows x columns
# (label, op, attrs, [(input dtype, input shape)], dims {name: value}, PyTorch builder)
OPS = []
for dt in ("f32", "bf16"):
    rows = [(dt, ["R", C])]
    OPS += [
        (f"relu [{R}, {C}] {dt}", "relu", "{}", rows, {"R": R}, plain(F.relu)),
        (f"gelu tanh [{R}, {C}] {dt}", "gelu", "{approximate: tanh}", rows, {"R": R},
         plain(lambda x: F.gelu(x, approximate="tanh"))),
        (f"add [{R}, {C}] {dt}", "add", "{}", rows * 2, {"R": R}, plain(torch.add)),
        (f"scale [{R}, {C}] {dt}", "scale", "{value: 0.5}", rows, {"R": R}, plain(lambda x: x * 0.5)),
        (f"softmax [{R}, {C}] {dt}", "softmax", "{axis: -1}", rows, {"R": R}, plain(lambda x: F.softmax(x, -1))),
        (f"log_softmax [{R}, {C}] {dt}", "log_softmax", "{axis: -1}", rows, {"R": R},
         plain(lambda x: F.log_softmax(x, -1))),
        (f"layernorm [{R}, {C}] {dt}", "layernorm", "{}", rows, {"R": R}, layernorm(C)),
        (f"rmsnorm [{R}, {C}] {dt}", "rmsnorm", "{}", rows, {"R": R}, rmsnorm(C)),
    ]
OPS += [
    (f"reduce_sum [{R}, {C}] f32", "reduce_sum", "{axis: -1}", [("f32", ["R", C])], {"R": R},
     plain(lambda x: x.sum(-1))),
    ("embedding 50257x768, ids [64, 512]", "embedding", "{num_embeddings: 50257, dim: 768}",
     [("i32", ["B", 512])], {"B": 64}, embedding(50257, 768)),
    ("transpose [64, 512, 12, 64] -> 0213", "transpose", "{perm: [0, 2, 1, 3]}", [("f32", ["B", 512, 12, 64])],
     {"B": 64}, plain(lambda x: x.permute(0, 2, 1, 3).contiguous())),
    ("split_heads [64, 512, 768] H=12", "split_heads", "{heads: 12}", [("f32", ["B", 512, 768])], {"B": 64},
     split_heads(12)),
]
for dt in ("f32", "bf16"):
    OPS += [
        (f"linear 4096x4096x4096 {dt}", "linear", "{out_features: 4096}", [(dt, ["M", 4096])], {"M": 4096},
         linear(4096, 4096)),
        (f"linear GPT qkv 8192x768->2304 {dt}", "linear", "{out_features: 2304}", [(dt, ["M", 768])], {"M": 8192},
         linear(768, 2304)),
        (f"linear GPT mlp 8192x768->3072 {dt}", "linear", "{out_features: 3072}", [(dt, ["M", 768])], {"M": 8192},
         linear(768, 3072)),
        (f"linear GPT mlp 8192x3072->768 {dt}", "linear", "{out_features: 768}", [(dt, ["M", 3072])], {"M": 8192},
         linear(3072, 768)),
        (f"linear MNIST 64x784->256 {dt}", "linear", "{out_features: 256}", [(dt, ["M", 784])], {"M": 64},
         linear(784, 256)),
        (f"matmul [96, 512, 64] @ [96, 64, 512] {dt}", "matmul", "{}", [(dt, ["N", 512, 64]), (dt, ["N", 64, 512])],
         {"N": 96}, plain(torch.matmul)),
    ]
    for seq in (512, 2048):
        for causal in (True, False):
            OPS.append((f"sdpa B=8 H=12 S={seq} Dh=64{' causal' if causal else ''} {dt}", "sdpa",
                        f"{{causal: {'true' if causal else 'false'}}}", [(dt, ["N", seq, 64])] * 3, {"N": 96},
                        plain(lambda q, k, v, c=causal: sdpa_4d(q, k, v, 12, c))))


class MnistMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(784, 256), nn.Linear(256, 10)

    def forward(self, x):
        return F.softmax(self.fc2(F.relu(self.fc1(x))), dim=-1)


# (label, graph file, [(B, S)], input builder (device, B, S) -> tensor, model builder (device))
GRAPHS = [
    ("mnist_mlp", "mnist_mlp.yaml", [(1, None), (64, None)], lambda d, b, s: torch.randn(b, 784, device=d),
     lambda d: MnistMlp().to(d).eval()),
    ("transformer_block", "transformer_block.yaml", [(1, 128), (1, 512), (64, 128), (64, 512)],
     lambda d, b, s: torch.randn(b, s, 768, device=d), lambda d: transformer_block.TransformerBlock().to(d).eval()),
    ("transformer_block_bf16", "transformer_block_bf16.yaml", [(1, 128), (1, 512), (64, 128), (64, 512)],
     lambda d, b, s: torch.randn(b, s, 768, device=d).to(torch.bfloat16),
     lambda d: transformer_block.TransformerBlock().to(torch.bfloat16).to(d).eval()),
    ("llama_block", "llama_block.yaml", [(1, 128), (1, 512), (64, 128), (64, 512)],
     lambda d, b, s: torch.randn(b, s, llama_block.D, device=d).to(torch.bfloat16),
     lambda d: llama_block.LlamaBlock().to(torch.bfloat16).to(d).eval()),
    ("tiny_lm", "tiny_lm.yaml", [(1, 128), (1, 512), (64, 128), (64, 512)],
     lambda d, b, s: torch.randint(0, tiny_lm.VOCAB, (b, s), dtype=torch.int32, device=d),
     lambda d: tiny_lm.TinyLM().to(d).eval()),
]


def op_graph(op, attrs, inputs, dims):
    dim_text = ", ".join(f"{name}: {{min: 1, max: 1048576, default: {value}}}" for name, value in dims.items())
    input_text = ", ".join(f"x{i}: {{dtype: {dt}, shape: [{', '.join(str(n) for n in shape)}]}}"
                           for i, (dt, shape) in enumerate(inputs))
    names = ", ".join(f"x{i}" for i in range(len(inputs)))
    return (f"name: bench\ndims: {{{dim_text}}}\ninputs: {{{input_text}}}\n"
            f"nodes:\n  - {{name: op, op: {op}, inputs: [{names}], attrs: {attrs}}}\noutputs: [op]\n")


def compiled_bundle(teeny, graph_path, workdir, tag):
    """The graph compiled once (all dims left symbolic), whatever bindings it is profiled at."""
    bundle = os.path.join(workdir, f"{tag}.teeny")
    if not os.path.isdir(bundle):
        subprocess.run([teeny, "compile", graph_path, "-o", bundle], check=True, stdout=subprocess.DEVNULL)
    return bundle


def rate(flops, nbytes, us, env, tensor_cores):
    """Compute-bound work (>= 8 FLOPs per byte) as TFLOP/s against the f32 or bf16 tensor peak,
    the rest as GB/s against the memory bandwidth."""
    if flops >= 8 * nbytes:
        peak = BF16_TENSOR_PEAK_GFLOPS if tensor_cores else env.get("peak_fp32_gflops") or 0
        achieved = flops / us / 1e3  # GFLOP/s
        pct = f" ({100 * achieved / peak:.0f}% of {peak / 1e3:.0f})" if peak else ""
        return f"{achieved / 1e3:.1f} TFLOP/s{pct}"
    peak = env.get("peak_bandwidth_gbps") or 0
    achieved = nbytes / us / 1e3
    pct = f" ({100 * achieved / peak:.0f}% of {peak:.0f})" if peak else ""
    return f"{achieved:.0f} GB/s{pct}"


def torch_input(device, dt, shape, dims):
    concrete = [dims.get(n, n) if isinstance(n, str) else n for n in shape]
    if dt == "i32":
        return torch.randint(0, 50257, concrete, dtype=torch.int32, device=device)
    return torch.randn(*concrete, device=device).to(DTYPES[dt])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teeny", default=os.environ.get("TEENY", os.path.join(REPO, "build", "teeny")))
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--only", help="run only cases whose label contains this")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where <date>-<gpu>.json goes")
    args = parser.parse_args()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda")
    torch.manual_seed(0)
    workdir = tempfile.mkdtemp(prefix="teeny-bench-dense-")

    # (label, band, graph path, binds, PyTorch fn, PyTorch inputs, uses tensor cores)
    cases = []
    for i, (label, op, attrs, inputs, dims, build) in enumerate(OPS):
        if args.only and args.only not in label:
            continue
        path = os.path.join(workdir, f"op{i}.yaml")
        with open(path, "w") as f:
            f.write(op_graph(op, attrs, inputs, dims))
        dt = inputs[0][0]
        cases.append((label, op_band(op, dt), path, dims, lambda d=dt, b=build: b(device, DTYPES.get(d, torch.float32)),
                      lambda ins=inputs, dm=dims: [torch_input(device, t, s, dm) for t, s in ins],
                      dt != "f32" and op in ("linear", "matmul", "sdpa")))
    for label, graph, shapes, make_input, build in GRAPHS:
        if args.only and args.only not in label:
            continue
        for batch, seq in shapes:
            binds = {"B": batch} if seq is None else {"B": batch, "S": seq}
            cases.append((f"{label} " + ", ".join(f"{k}={v}" for k, v in binds.items()), f"graphs, B={batch}",
                          os.path.join(REPO, "graphs", graph), binds,
                          lambda b=build: b(device),
                          lambda mi=make_input, b=batch, s=seq: [mi(device, b, s)], "bf16" in label))
    if not cases:
        print(f"bench_dense: no case label contains '{args.only}'", file=sys.stderr)
        return 1

    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, TF32 off\n")
    print(f"| case | teeny us | {TORCH_HEADER} | teeny/best | teeny rate (% of ceiling) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    rows = []
    built = {}
    env = None
    for label, band, path, binds, build, make_inputs, tensor_cores in cases:
        bundle = compiled_bundle(args.teeny, path, workdir, os.path.basename(path))
        teeny_us, flops, nbytes, env = teeny_profile(args.teeny, bundle, binds, args.iterations)
        if path not in built:
            built[path] = build()
        inputs = make_inputs()
        torch_us = torch_medians(built[path], inputs, args.iterations)
        del inputs
        row = case_result(label, band, teeny_us, torch_us, flops, nbytes,
                          rate(flops, nbytes, teeny_us, env, tensor_cores), binds=binds)
        rows.append(row)
        print(f"| {label} | {teeny_us:.1f} | {torch_cells(torch_us)} | {row['teeny_over_best']:.2f} | {row['rate']} |",
              flush=True)
    run_info = {"script": "scripts/bench_dense.py", "argv": sys.argv[1:], "started": started,
                "torch": torch.__version__, "tf32": False, "iterations": args.iterations, "only": args.only,
                "teeny_environment": env}
    print("results:", write_results("dense", torch.cuda.get_device_name(), run_info, rows, args.results_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
