#!/usr/bin/env bash
# Checks that the working tree emits the same PTX instruction streams as REF for every
# graphs/*.yaml and every op's conformance cases (register, label and symbol names aside).
#
#   scripts/ptx-diff.sh [REF]        REF: a commit, default HEAD
#
# Builds REF in a git worktree and the working tree (uncommitted edits included), each with its
# own build dir under $PTX_DIFF_DIR (default ${TMPDIR:-/tmp}/teeny-ptx-diff; kept between runs,
# ccache makes rebuilds cheap), snapshots both with teeny_ptx_snapshot (tools/ptx_snapshot.cpp)
# and compares them with scripts/ptx-compare.py, which prints what differs; exit 1 if anything
# does. A REF older than the snapshot tool gets today's tool and CMake lines.
# This is not a CTest because it needs two builds. To compare against a snapshot kept earlier:
#   cmake --build BUILD --target teeny_ptx_snapshot && BUILD/teeny_ptx_snapshot /tmp/ptx-new &&
#   scripts/ptx-compare.py OLD_SNAPSHOT /tmp/ptx-new
set -euo pipefail

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
commit=$(git -C "$repo" rev-parse --verify "${1:-HEAD}^{commit}")
work=${PTX_DIFF_DIR:-${TMPDIR:-/tmp}/teeny-ptx-diff}
ref_tree="$work/ref-src"

mkdir -p "$work"
git -C "$repo" worktree remove --force "$ref_tree" 2>/dev/null || true
git -C "$repo" worktree prune
git -C "$repo" worktree add --detach --quiet "$ref_tree" "$commit"
trap 'git -C "$repo" worktree remove --force "$ref_tree"' EXIT
if ! grep -q teeny_ptx_snapshot "$ref_tree/CMakeLists.txt"; then
  mkdir -p "$ref_tree/tools"
  cp "$repo/tools/ptx_snapshot.cpp" "$ref_tree/tools/"
  { echo; grep teeny_ptx_snapshot "$repo/CMakeLists.txt"; } >>"$ref_tree/CMakeLists.txt"
fi

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
snapshot() {  # SOURCE_DIR BUILD_DIR OUT_DIR
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
  cmake --build "$2" --target teeny_ptx_snapshot
  "$2/teeny_ptx_snapshot" "$3"
}
echo "== $commit"
snapshot "$ref_tree" "$work/build-ref" "$work/ptx-ref"
echo "== working tree $repo"
snapshot "$repo" "$work/build-new" "$work/ptx-new"
python3 "$repo/scripts/ptx-compare.py" "$work/ptx-ref" "$work/ptx-new"
