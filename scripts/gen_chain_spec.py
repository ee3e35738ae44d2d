#!/usr/bin/env python3
"""Writes an N-node chain spec: an input x of shape [B, 64], then N relu nodes, each taking the
one before, and the last as the output. Every node lowers to the same kernel, so a compile has
one NVRTC job whatever N is: what scales with N is teeny's own work (scripts/bench_compile_scaling.py).

usage: gen_chain_spec.py N [OUT.yaml]   (stdout without OUT)
"""
import sys


def chain_spec(nodes):
    lines = [
        f"name: chain{nodes}",
        "dims:",
        "  B: {min: 1, max: 4096, default: 8}",
        "inputs:",
        "  x: {dtype: f32, shape: [B, 64]}",
        "nodes:",
    ]
    previous = "x"
    for i in range(nodes):
        lines.append(f"  - {{name: n{i}, op: relu, inputs: [{previous}]}}")
        previous = f"n{i}"
    lines.append(f"outputs: [{previous}]")
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) not in (2, 3) or not argv[1].isdigit() or int(argv[1]) < 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 1
    text = chain_spec(int(argv[1]))
    if len(argv) == 3:
        with open(argv[2], "w") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
