"""What bench_dense.py, bench_vision.py and bench_gemm.py share: PyTorch's timing, teeny's profile, and the
results file.

Both benchmarks write into one file per day and GPU, bench/results/<YYYY-MM-DD>-<gpu>.json (gpu:
torch.cuda.get_device_name() as a slug, "NVIDIA H200" -> nvidia-h200), each under its own suite
key, so a run of one keeps the other's results of the same day. Every case keeps its numbers;
each band of cases gets the geometric mean and the worst of teeny's time over PyTorch's best
(the fastest of the ways PyTorch was measured: eager, CUDA-graph replay, and the GPU span of its
kernels alone, which is how `teeny profile` times teeny; bench_gemm --torch-compile adds the
kernels of the torch.compile'd call). A case may also time teeny compiled with `--tuning none`
(its heuristic alone); its ratio gets a geometric mean and worst per band too. bench/README.md
describes the format; scripts/bench_table.py renders the README's table from it.

Only import_torch, median_us, kernel_span_us and torch_medians need PyTorch, and they import it when called, so
bench_table.py and tests use the rest without it.
"""
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS_DIR = os.path.join(REPO, "bench", "results")
FORMAT_VERSION = 1
# The ways PyTorch is timed, as per-case fields; a case's best is the fastest of those measured.
# Eager and CUDA graph: CUDA events around a call, so they include the host's launch time;
# kernels: the GPU span of the call's kernels (CUPTI), measured as teeny's own time is.
TORCH_MODES = {"eager": "eager_us", "CUDA graph": "graph_us", "kernels": "kernels_us"}
# Opt-in modes (bench_gemm --torch-compile): the GPU span of the kernels of the torch.compile'd call.
OPTIONAL_TORCH_MODES = {"torch.compile": "compiled_us"}
MODE_FIELDS = {**TORCH_MODES, **OPTIONAL_TORCH_MODES}


def import_torch(script):
    """PyTorch with a CUDA device, or exit 3 (teeny's "GPU environment" code) saying what is missing."""
    try:
        import torch
    except ImportError as error:
        print(f"{script}: needs PyTorch with CUDA, on the GPU machine ({error})", file=sys.stderr)
        sys.exit(3)
    if not torch.cuda.is_available():
        print(f"{script}: no CUDA device for PyTorch", file=sys.stderr)
        sys.exit(3)
    return torch


def median_us(fn, iterations, warmup=20):
    """Median of CUDA events around each synchronised iteration, after `warmup` iterations."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)

# The PyTorch columns of the scripts' tables, one per mode, and a case's cells for them.
def torch_header(modes=TORCH_MODES):
    return " | ".join(f"torch {mode} us" for mode in modes)


TORCH_HEADER = torch_header()


def torch_cells(torch_us, modes=TORCH_MODES):
    return " | ".join(f"{torch_us[mode]:.1f}" if mode in torch_us else "-" for mode in modes)


def kernel_span_us(fn, iterations):
    """Median over calls of the GPU span of fn's kernels and copies (first start to last end), from
    CUPTI's activity records through torch.profiler: what `teeny profile` reports for teeny's
    launches. Events around a call also hold the host's launch time, which dominates short calls.
    None (with a warning) when the calls did not all run the same number of kernels."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            fn()
            torch.cuda.synchronize()
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type == DeviceType.CUDA)
    if not spans or len(spans) % iterations:
        print(f"warning: {len(spans)} GPU activities in {iterations} calls; PyTorch's kernel time not measured",
              file=sys.stderr)
        return None
    per_call = len(spans) // iterations
    calls = [spans[i:i + per_call] for i in range(0, len(spans), per_call)]
    return statistics.median(max(end for _, end in call) - call[0][0] for call in calls)


def torch_medians(fn, inputs, iterations):
    """fn(*inputs) eager, then captured once as a CUDA graph (after three warm-up calls on a side
    stream, as capture requires) and replayed, then its kernels alone: {mode: median us} for the
    modes of TORCH_MODES measured."""
    import torch
    with torch.no_grad():
        kernels = kernel_span_us(lambda: fn(*inputs), iterations)
        eager = median_us(lambda: fn(*inputs), iterations)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(*inputs)
        replay = median_us(graph.replay, iterations)
    measured = {"eager": eager, "CUDA graph": replay, "kernels": kernels}
    return {mode: us for mode, us in measured.items() if us is not None}


def teeny_profile(teeny, bundle, binds, iterations):
    """`teeny profile --format json` of a compiled bundle: (median GPU time of an iteration in us,
    FLOPs, bytes, the profile's environment block)."""
    bind_flags = [flag for name, value in binds.items() for flag in ("--bind", f"{name}={value}")]
    out = subprocess.run([teeny, "profile", bundle, *bind_flags, "--warmup", "20", "--iterations",
                          str(iterations), "--format", "json"], check=True, capture_output=True, text=True)
    report = json.loads(out.stdout)
    run = report["runs"][0]
    flops = sum(launch["flops"] for launch in run["launches"])
    nbytes = sum(launch["bytes"] for launch in run["launches"])
    return run["gpu_time"]["median_us"], flops, nbytes, report["environment"]


def case_result(case, band, teeny_us, torch_us, flops, nbytes, rate, untuned_us=None, **extra):
    """One case's record. torch_us: {mode: median us} for the modes of MODE_FIELDS measured;
    untuned_us: teeny's time compiled with `--tuning none`, where measured (teeny_us is then the
    tuned compile's)."""
    best_mode = min(torch_us, key=torch_us.get)
    result = {"case": case, "band": band, **extra, "teeny_us": teeny_us}
    for mode, us in torch_us.items():
        result[MODE_FIELDS[mode]] = us
        result["teeny_over_" + MODE_FIELDS[mode][:-3]] = teeny_us / us
    result.update({"torch_best": best_mode, "torch_best_us": torch_us[best_mode],
                   "teeny_over_best": teeny_us / torch_us[best_mode]})
    if untuned_us is not None:
        result.update({"teeny_untuned_us": untuned_us, "teeny_untuned_over_best": untuned_us / torch_us[best_mode]})
    result.update({"flops": flops, "bytes": nbytes, "rate": rate})
    return result


def geomean_and_worst(members, ratio):
    """(geometric mean of members' `ratio` field, the member where it is largest)."""
    ratios = [case[ratio] for case in members]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)), max(members, key=lambda case: case[ratio])


def band_summaries(cases):
    """Per band, in first-seen order: case count, geometric mean and worst of teeny / best PyTorch;
    where every case of the band timed teeny untuned too, the same of untuned / best."""
    bands = {}
    for case in cases:
        bands.setdefault(case["band"], []).append(case)
    summaries = []
    for band, members in bands.items():
        geomean, worst = geomean_and_worst(members, "teeny_over_best")
        summary = {"band": band, "cases": len(members), "geomean_teeny_over_best": geomean,
                   "worst": {"case": worst["case"], "teeny_over_best": worst["teeny_over_best"]}}
        if all("teeny_untuned_over_best" in case for case in members):
            geomean, worst = geomean_and_worst(members, "teeny_untuned_over_best")
            summary.update({"geomean_teeny_untuned_over_best": geomean,
                            "worst_untuned": {"case": worst["case"],
                                              "teeny_untuned_over_best": worst["teeny_untuned_over_best"]}})
        summaries.append(summary)
    return summaries



def print_bands(rows):
    """Prints band_summaries(rows) as a Markdown table (with the untuned columns where timed)."""
    bands = band_summaries(rows)
    untuned = any("worst_untuned" in band for band in bands)
    print("\n| band | cases | geomean teeny/best | worst |"
          + (" geomean untuned/best | worst untuned |" if untuned else ""))
    print("| --- | ---: | ---: | --- |" + (" ---: | --- |" if untuned else ""))
    for band in bands:
        line = (f"| {band['band']} | {band['cases']} | {band['geomean_teeny_over_best']:.2f} | "
                f"{band['worst']['teeny_over_best']:.2f} {band['worst']['case']} |")
        if "worst_untuned" in band:
            line += (f" {band['geomean_teeny_untuned_over_best']:.2f} | "
                     f"{band['worst_untuned']['teeny_untuned_over_best']:.2f} {band['worst_untuned']['case']} |")
        print(line)

def gpu_slug(device_name):
    """"NVIDIA H200" -> "nvidia-h200": lower case, runs of anything else than [a-z0-9] as one dash."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")


def git_commit():
    """TEENY_COMMIT if set (a copy of the tree whose .git names another commit, as on the GPU
    machine), else git's HEAD, "-dirty" when tracked files differ from it."""
    if os.environ.get("TEENY_COMMIT"):
        return os.environ["TEENY_COMMIT"]
    out = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def write_results(suite, device_name, run_info, cases, results_dir=RESULTS_DIR, today=None):
    """Puts `suite` (its run_info, cases and band summaries) into <results_dir>/<date>-<gpu>.json,
    keeping the other suites already there; written to a temp file and renamed into place.
    Returns the path."""
    date = (today or datetime.date.today()).isoformat()
    path = os.path.join(results_dir, f"{date}-{gpu_slug(device_name)}.json")
    results = {"format": FORMAT_VERSION, "date": date, "gpu": device_name, "suites": {}}
    if os.path.exists(path):
        with open(path) as f:
            try:
                results = json.load(f)
            except json.JSONDecodeError as error:
                raise SystemExit(f"{path} is not valid JSON ({error}); move it away and run again")
        if results.get("format") != FORMAT_VERSION or results.get("gpu") != device_name:
            raise SystemExit(f"{path} holds format {results.get('format')} results of '{results.get('gpu')}', "
                             f"not format {FORMAT_VERSION} of '{device_name}'; move it away and run again")
    results["suites"][suite] = {**run_info, "teeny_commit": git_commit(), "cases": cases,
                                "bands": band_summaries(cases)}
    os.makedirs(results_dir, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=results_dir)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    return path
