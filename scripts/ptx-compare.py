#!/usr/bin/env python3
"""Compare two PTX snapshots (tools/ptx_snapshot.cpp) launch by launch.

usage: scripts/ptx-compare.py BASE_DIR NEW_DIR [--diffs N]

Launches are matched by (graph, node, launch index), which survive kernel renames. Each PTX is
normalised before comparing, so only the instruction stream counts:
  - comments, blank lines, .loc/.file lines, .section blocks (debug info) and .reg
    declarations (register counts) are dropped; whitespace is collapsed;
  - labels and .global/.const variables that nothing references are dropped (lineinfo's
    $L__tmp markers; constexpr constants NVRTC emits as globals, which template arguments
    replace);
  - registers (%r12), labels ($L__BB0_3) and declared or mangled symbols (the entry, its
    params, shared/global variables, _Z... names, which change when code moves into a device
    template) are renamed in order of first appearance, registers and labels per function.
Instructions, operands' order, types, constants, .version/.target, .reqntid/.maxntid and
declaration sizes are kept, so any change to them is reported.

Prints the identical count, the differing launches (with a unified diff of the first few) and
launches present on one side only; exits 1 if anything differs.
"""
import argparse
import csv
import difflib
import re
import sys
from collections import Counter
from pathlib import Path

IDENT = re.compile(r"(?<![\w.$%])[%$A-Za-z_][\w$]*")
REG_DECL = re.compile(r"^\.reg\s+\.\w+\s+%([A-Za-z_]+)<\d+>")
FUNC_DECL = re.compile(r"\.(entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)")
VAR_DECL = re.compile(r"^(?:\.(?:visible|extern|weak|common)\s+)*\.(param|shared|global|const|local)\b(.*)")
GLOBAL_DECL = re.compile(r"^(?:\.(?:visible|extern|weak|common)\s+)*\.(?:global|const)\s+(?:\.\w+\s+|\d+\s+)*([A-Za-z_$][\w$]*)")
LABEL_DEF = re.compile(r"^([$A-Za-z_][\w$]*):$")


def strip_debug(text):
    """Lines without comments, debug info or .reg declarations, whitespace collapsed."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    lines, in_section = [], False
    for line in text.splitlines():
        line = " ".join(line.split("//", 1)[0].split())
        if in_section:
            in_section = line != "}"
        elif line.startswith(".section"):
            in_section = not line.endswith("}")
        elif line and not line.startswith((".loc", ".file")):
            lines.append(line)
    return lines


def declared_symbols(lines):
    """{name: kind} for the functions and variables the PTX declares."""
    symbols = {}
    for line in lines:
        for kind, name in FUNC_DECL.findall(line):
            symbols.setdefault(name, "fn")
        match = VAR_DECL.match(line)
        if match:
            name = IDENT.search(re.sub(r"\.\w+|(?<![\w$])\d+", " ", match.group(2)))
            if name:
                symbols.setdefault(name.group(0), match.group(1))
    return symbols


def unreferenced(line, counts):
    """A label or .global/.const variable that only its own declaration names."""
    match = LABEL_DEF.match(line) or GLOBAL_DECL.match(line)
    return bool(match) and counts[match.group(1)] == 1


class Canonical:
    """Canonical names in order of first appearance, numbered per class."""

    def __init__(self):
        self.names, self.counts = {}, {}

    def __call__(self, token, cls):
        if token not in self.names:
            self.names[token] = "{}{}".format(cls, self.counts.get(cls, 0))
            self.counts[cls] = self.counts.get(cls, 0) + 1
        return self.names[token]


def normalize(text):
    """The PTX's instruction stream with canonical names, one line per statement."""
    lines = strip_debug(text)
    prefixes = sorted({m.group(1) for m in map(REG_DECL.match, lines) if m}, key=len, reverse=True)
    register = re.compile(r"%({})\d+".format("|".join(prefixes))) if prefixes else None
    lines = [line for line in lines if not line.startswith(".reg ")]
    counts = Counter(IDENT.findall("\n".join(lines)))
    lines = [line for line in lines if not unreferenced(line, counts)]
    symbols = declared_symbols(lines)

    module, local = Canonical(), Canonical()

    def rename(match):
        token = match.group(0)
        reg = register.fullmatch(token) if register else None
        if reg:
            return local(token, "%" + reg.group(1))
        if token.startswith("$L"):
            return local(token, "$L")
        kind = symbols.get(token) or ("sym" if token.startswith("_Z") else None)
        return module(token, kind) if kind else token

    out = []
    for line in lines:
        if FUNC_DECL.search(line):
            local = Canonical()  # registers and labels are per function
        out.append(IDENT.sub(rename, line))
    return out


def read_index(root):
    with open(root / "index.tsv", newline="") as f:
        return {(row["graph"], row["node"], row["launch"]): row for row in csv.DictReader(f, delimiter="\t")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--diffs", type=int, default=3, help="unified diffs to print (default 3)")
    args = parser.parse_args()
    base, new = read_index(args.base), read_index(args.new)

    identical, differing = 0, []
    for key in sorted(base.keys() & new.keys()):
        old_lines = normalize((args.base / base[key]["file"]).read_text())
        new_lines = normalize((args.new / new[key]["file"]).read_text())
        if old_lines == new_lines:
            identical += 1
        else:
            differing.append((key, old_lines, new_lines))
    only_base = sorted(base.keys() - new.keys())
    only_new = sorted(new.keys() - base.keys())

    def name(key):
        return "{} {}.{}".format(*key)

    print("{} launches identical, {} differ, {} only in {}, {} only in {}".format(
        identical, len(differing), len(only_base), args.base, len(only_new), args.new))
    for i, (key, old_lines, new_lines) in enumerate(differing):
        print("differs: {} ({} -> {})".format(name(key), base[key]["kernel"], new[key]["kernel"]))
        if i < args.diffs:
            diff = list(difflib.unified_diff(old_lines, new_lines, "base", "new", n=2, lineterm=""))
            print("\n".join("    " + line for line in diff[:60]))
            if len(diff) > 60:
                print("    ... {} more diff lines".format(len(diff) - 60))
    for key in only_base:
        print("only in base: " + name(key))
    for key in only_new:
        print("only in new: " + name(key))
    return 1 if differing or only_base or only_new else 0


if __name__ == "__main__":
    sys.exit(main())
