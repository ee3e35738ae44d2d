#!/usr/bin/env python3
"""Regenerates the README's benchmark tables from the newest files in bench/results/.

Each suite (dense, vision, gemm, train, ...) comes from the newest file that holds it, on whichever
GPU that was, and the suites are shown in one table per GPU, the newest GPU's first; with --gpu
SLUG, one table of that GPU's newest file of each suite. Per band of cases: how many, the
geometric mean of teeny's median time over PyTorch's best (the fastest of the ways
bench_common.TORCH_MODES names, or of those a suite measured), and the worst case; where a suite
also timed teeny untuned (`--tuning none`), the same for that. The tables replace the README's text
between BEGIN and END below.

  python3 scripts/bench_table.py            rewrite README.md's tables
  python3 scripts/bench_table.py --print    print the table only
"""
import argparse
import json
import os
import re
import sys

from bench_common import MODE_FIELDS, REPO, RESULTS_DIR, TORCH_MODES

BEGIN = "<!-- bench-table:begin (scripts/bench_table.py writes this part) -->"
END = "<!-- bench-table:end -->"
RESULTS_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-([a-z0-9-]+)\.json$")
SUITES = ("dense", "vision")


def load_results(results_dir):
    """[(date, gpu slug, path, results)], oldest first (a day's files by their latest suite start)."""
    found = []
    for name in sorted(os.listdir(results_dir)) if os.path.isdir(results_dir) else []:
        match = RESULTS_NAME.match(name)
        if not match:
            continue
        path = os.path.join(results_dir, name)
        with open(path) as f:
            try:
                results = json.load(f)
            except json.JSONDecodeError as error:
                raise SystemExit(f"bench_table: {path} is not valid JSON: {error}")
        if not isinstance(results.get("suites"), dict):
            raise SystemExit(f"bench_table: {path} has no \"suites\" object")
        found.append((match.group(1), match.group(2), path, results))
    latest_start = lambda entry: max((s.get("started") or "" for s in entry[3]["suites"].values()), default="")
    return sorted(found, key=lambda entry: (entry[0], latest_start(entry)))


def require_results(found):
    if not found:
        raise SystemExit("bench_table: no results files (<date>-<gpu>.json): run scripts/bench_dense.py and "
                         "scripts/bench_vision.py on a GPU first")


def newest_suites(found, gpu=None):
    """{suite: (path, results)} for the newest results of `gpu` (default: the newest file's GPU)."""
    require_results(found)
    gpu = gpu or found[-1][1]
    chosen = {}
    for _, slug, path, results in found:
        if slug == gpu:
            for suite in results["suites"]:
                chosen[suite] = (path, results)
    if not chosen:
        raise SystemExit(f"bench_table: no results for GPU '{gpu}'; there are: "
                         + ", ".join(sorted({slug for _, slug, _, _ in found})))
    return chosen


def newest_per_gpu(found):
    """[{suite: (path, results)}], one per GPU, newest first: each suite from its newest file of any GPU."""
    require_results(found)
    newest = {}
    for _, slug, path, results in found:
        for suite in results["suites"]:
            newest[suite] = (slug, path, results)
    by_gpu = {}
    for _, slug, _, _ in reversed(found):
        by_gpu.setdefault(slug, {})
    for suite, (slug, path, results) in newest.items():
        by_gpu[slug][suite] = (path, results)
    return [chosen for chosen in by_gpu.values() if chosen]


def shown_path(path):
    """Relative to the repository when inside it (bench/results/...), else as given."""
    relative = os.path.relpath(os.path.abspath(path), REPO)
    return path if relative.startswith("..") else relative


def render_table(chosen):
    """The Markdown that goes between the README's markers."""
    suites = [suite for suite in SUITES if suite in chosen] + sorted(set(chosen) - set(SUITES))
    files = sorted({shown_path(path) for path, _ in chosen.values()})
    gpu = chosen[suites[0]][1]["gpu"]
    torch_versions = sorted({chosen[suite][1]["suites"][suite].get("torch", "?") for suite in suites})
    untuned = any("worst_untuned" in band for suite in suites for band in chosen[suite][1]["suites"][suite]["bands"])
    lines = [f"teeny's median GPU time over PyTorch's best ({' or '.join(TORCH_MODES)}, whichever is fastest;",
             "a suite that measured other ways names them)"
             f" per band of cases; below 1, teeny is faster. {gpu}, PyTorch "
             f"{', '.join(torch_versions)}; from " + ", ".join(f"`{file}`" for file in files) + ".", ""]
    if untuned:
        lines[-1:-1] = ["teeny is compiled with its tuning file; untuned: with `--tuning none`, its heuristic alone."]
        lines += ["| suite | band | cases | geomean | worst case | untuned geomean | untuned worst case |",
                  "| --- | --- | ---: | ---: | --- | ---: | --- |"]
    else:
        lines += ["| suite | band | cases | geomean | worst case |", "| --- | --- | ---: | ---: | --- |"]
    for suite in suites:
        data = chosen[suite][1]["suites"][suite]
        label = suite + (f" (cases matching '{data['only']}' only)" if data.get("only") else "")
        modes = [mode for mode, field in MODE_FIELDS.items() if any(field in case for case in data["cases"])]
        if modes != list(TORCH_MODES):
            label += f" (PyTorch {' or '.join(modes)})"
        for band in data["bands"]:
            worst = band["worst"]
            line = (f"| {label} | {band['band']} | {band['cases']} | {band['geomean_teeny_over_best']:.2f} | "
                    f"{worst['teeny_over_best']:.2f} {worst['case']} |")
            if "worst_untuned" in band:
                line += (f" {band['geomean_teeny_untuned_over_best']:.2f} | "
                         f"{band['worst_untuned']['teeny_untuned_over_best']:.2f} {band['worst_untuned']['case']} |")
            elif untuned:
                line += " - | - |"
            lines.append(line)
    return "\n".join(lines) + "\n"


def replace_between_markers(text, table, readme):
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise SystemExit(f"bench_table: {readme} has no '{BEGIN}' ... '{END}' section")
    return text[:begin + len(BEGIN)] + "\n" + table + text[end:]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", default=RESULTS_DIR)
    parser.add_argument("--readme", default=os.path.join(REPO, "README.md"))
    parser.add_argument("--gpu", help="only this GPU's results, e.g. nvidia-h200 (default: each suite's newest)")
    parser.add_argument("--print", action="store_true", help="print the table instead of rewriting the README")
    args = parser.parse_args()
    found = load_results(args.results_dir)
    groups = [newest_suites(found, args.gpu)] if args.gpu else newest_per_gpu(found)
    table = "\n".join(render_table(chosen) for chosen in groups)
    if args.print:
        print(table, end="")
        return 0
    with open(args.readme) as f:
        text = f.read()
    with open(args.readme, "w") as f:
        f.write(replace_between_markers(text, table, args.readme))
    print(f"bench_table: wrote the table into {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
