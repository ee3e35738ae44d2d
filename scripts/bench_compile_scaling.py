#!/usr/bin/env python3
"""How teeny's own time grows with the node count: `teeny check`, `teeny compile` and
`teeny inspect` of relu chains (scripts/gen_chain_spec.py) of 10^3, 10^4 and 10^5 nodes.

Every chain lowers to one kernel, compiled by NVRTC once before timing (a throwaway cache
directory), so the times are teeny's own. Each command runs `--repeat` times and its best is
kept: wall seconds, and CPU seconds (user + system) of the process. The exponent k of t ~ n^k
between successive sizes is printed: 1 is linear, 2 quadratic.

usage: bench_compile_scaling.py [--teeny build/teeny] [--sizes 1000,10000,100000] [--repeat 1]
"""
import argparse
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_chain_spec import chain_spec  # noqa: E402


def timed(command, env):
    """(wall seconds, CPU seconds, exit code, stderr) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode, done.stderr.strip()


def best(command, env, repeat):
    runs = [timed(command, env) for _ in range(repeat)]
    failed = [run for run in runs if run[2] != 0]
    if failed:
        return None, None, failed[0][3].splitlines()[-1] if failed[0][3] else f"exit {failed[0][2]}"
    return min(run[0] for run in runs), min(run[1] for run in runs), ""


def exponent(sizes, times):
    out = [None]
    for (n0, t0), (n1, t1) in zip(zip(sizes, times), zip(sizes[1:], times[1:])):
        out.append(math.log(t1 / t0) / math.log(n1 / n0) if t0 and t1 else None)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--teeny", default=os.path.join(os.path.dirname(HERE), "build", "teeny"))
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    with tempfile.TemporaryDirectory(prefix="teeny-scaling-") as work:
        env = dict(os.environ, TEENY_CACHE_DIR=os.path.join(work, "cache"))
        warm = os.path.join(work, "warm.yaml")
        with open(warm, "w") as out:
            out.write(chain_spec(1))
        subprocess.run([args.teeny, "compile", warm, "-o", os.path.join(work, "warm.teeny")], env=env, check=True,
                       stdout=subprocess.DEVNULL)

        rows = {}
        for n in sizes:
            spec, bundle = os.path.join(work, f"chain{n}.yaml"), os.path.join(work, f"chain{n}.teeny")
            with open(spec, "w") as out:
                out.write(chain_spec(n))
            rows[n] = {
                "check": best([args.teeny, "check", spec], env, args.repeat),
                "compile": best([args.teeny, "compile", spec, "-o", bundle], env, args.repeat),
            }
            rows[n]["inspect"] = (best([args.teeny, "inspect", bundle, "--device-sms", "132"], env, args.repeat)
                                  if os.path.isdir(bundle) else (None, None, "no bundle"))

    print(f"teeny {args.teeny}; best of {args.repeat}; seconds (CPU = user + system)")
    print(f"{'command':8} {'nodes':>7} {'wall':>8} {'CPU':>8} {'k (CPU)':>8}")
    for command in ("check", "compile", "inspect"):
        cpu = [rows[n][command][1] for n in sizes]
        for n, k in zip(sizes, exponent(sizes, cpu)):
            wall, cpu_s, problem = rows[n][command]
            if problem:
                print(f"{command:8} {n:>7} {'-':>8} {'-':>8} {'':>8}  {problem}")
                continue
            print(f"{command:8} {n:>7} {wall:8.2f} {cpu_s:8.2f} {'' if k is None else f'{k:8.2f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
