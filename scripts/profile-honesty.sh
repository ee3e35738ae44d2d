#!/usr/bin/env bash
# Honesty checks for `teeny profile` on a GPU machine:
#  1. teeny's CUPTI per-kernel durations against Nsight Compute's gpu__time_duration.sum
#     (--clock-control none, so clocks behave as in teeny's run), in two pairings:
#       teeny --mode sequence  vs  ncu --cache-control none  (warm caches)
#       teeny --mode isolated  vs  ncu --cache-control all   (caches flushed before each kernel)
#  2. CUPTI-on vs CUPTI-off (CUDA events, TEENY_PROFILE_NO_CUPTI=1) end-to-end GPU time,
#     i.e. what tracing costs.
# Prints the differences; exits non-zero only when a step cannot run.
#
# usage: scripts/profile-honesty.sh [BUILD_DIR] [GRAPH.yaml ...]
#   BUILD_DIR defaults to $BUILD_DIR or build-gpu (scripts/gpu-test.sh's); graphs default to
#   graphs/mnist_mlp.yaml, graphs/lenet5.yaml and graphs/transformer_block.yaml.
#   BIND="--bind B=256" adds binds to every command. NCU=/path/to/ncu picks ncu.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-${BUILD_DIR:-$root/build-gpu}}"
shift || true
graphs=("$@")
[[ ${#graphs[@]} -eq 0 ]] &&
  graphs=("$root/graphs/mnist_mlp.yaml" "$root/graphs/lenet5.yaml" "$root/graphs/transformer_block.yaml")
teeny="$build/teeny"
ncu="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"
bind=(${BIND:-})
[[ -x "$teeny" ]] || { echo "no teeny binary at $teeny (build first)"; exit 1; }
[[ -x "$ncu" ]] || { echo "no ncu found (set NCU=...)"; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for graph in "${graphs[@]}"; do
  name="$(basename "$graph" .yaml)"
  bundle="$work/$name.teeny"
  echo "=== $name ==="
  "$teeny" compile "$graph" -o "$bundle" >/dev/null

  for mode in sequence isolated; do
    "$teeny" profile "$bundle" "${bind[@]}" --mode "$mode" --iterations 200 --min-time 1 \
      --format json >"$work/$name.$mode.json"
  done
  TEENY_PROFILE_NO_CUPTI=1 "$teeny" profile "$bundle" "${bind[@]}" --iterations 200 --min-time 1 \
    --format json >"$work/$name.events.json"

  # ncu times each kernel of `teeny run` (20 iterations of the whole graph).
  for cache in none all; do
    "$ncu" --clock-control none --cache-control "$cache" --metrics gpu__time_duration.sum \
      --print-units base --csv "$teeny" run "$bundle" "${bind[@]}" --iterations 20 \
      >"$work/$name.ncu.$cache.csv" 2>"$work/$name.ncu.$cache.log" || {
      echo "ncu failed (cache-control $cache):"; tail -5 "$work/$name.ncu.$cache.log"; exit 1; }
  done

  python3 - "$work" "$name" <<'EOF'
import csv, io, json, statistics, sys
work, name = sys.argv[1], sys.argv[2]

def ncu_durations(path):
    """Kernel durations in us, in launch order, from ncu's CSV (header line starts with "ID")."""
    # stdout also holds teeny's own output and ==PROF== lines: keep the quoted CSV lines.
    lines = [l for l in open(path).read().splitlines() if l.startswith('"')]
    rows = [r for r in csv.DictReader(io.StringIO("\n".join(lines))) if r["Metric Name"] == "gpu__time_duration.sum"]
    unit = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}
    name = "Kernel Name" if rows and "Kernel Name" in rows[0] else "Function Name"
    return [(r[name], float(r["Metric Value"].replace(",", "")) * unit[r["Metric Unit"]]) for r in rows]

def compare(teeny_json, ncu_csv, label):
    report = json.load(open(teeny_json))
    env = report["environment"]
    if not env["cupti"]:
        print(f"  [{label}] teeny did not use CUPTI: {env['timing_method']}")
    launches = report["runs"][0]["launches"]
    kernels = ncu_durations(ncu_csv)
    n = len(launches)
    if len(kernels) % n:
        print(f"  [{label}] ncu saw {len(kernels)} kernels, not a multiple of {n} launches; skipped")
        return
    print(f"  [{label}]")
    print(f"    {'#':>2}  {'node':<12} {'kernel':<36} {'teeny_us':>9} {'ncu_us':>9} {'diff_us':>8} {'diff%':>7}")
    for launch in launches:
        i = launch["index"]
        samples = [d for k, (kname, d) in enumerate(kernels) if k % n == i]
        names = {kname for k, (kname, _) in enumerate(kernels) if k % n == i}
        if names != {launch["entry"]}:
            print(f"    {i:>2}  kernel names differ: teeny {launch['entry']}, ncu {sorted(names)}")
            continue
        t = launch["duration"]["median_us"]
        m = statistics.median(samples)
        print(f"    {i:>2}  {launch['node']:<12} {launch['kernel'][:36]:<36} {t:>9.3f} {m:>9.3f} {t - m:>8.3f} {100 * (t - m) / m:>6.1f}%")

compare(f"{work}/{name}.sequence.json", f"{work}/{name}.ncu.none.csv", "teeny sequence vs ncu --cache-control none")
compare(f"{work}/{name}.isolated.json", f"{work}/{name}.ncu.all.csv", "teeny isolated vs ncu --cache-control all")

on = json.load(open(f"{work}/{name}.sequence.json"))
off = json.load(open(f"{work}/{name}.events.json"))
def e2e(report):
    return report["runs"][0]["gpu_time"]["median_us"], report["runs"][0]["enqueue_time"]["median_us"]
(on_gpu, on_host), (off_gpu, off_host) = e2e(on), e2e(off)
print("  [CUPTI on vs off (CUDA events)] end-to-end GPU time per iteration, median:")
print(f"    CUPTI {on_gpu:.3f} us, events {off_gpu:.3f} us, difference {on_gpu - off_gpu:+.3f} us ({100 * (on_gpu - off_gpu) / off_gpu:+.1f}%)")
print(f"    host enqueue per iteration: CUPTI {on_host:.3f} us, events {off_host:.3f} us")
print(f"    (events mode records two events around every launch; its end-to-end includes them)")
EOF
done
