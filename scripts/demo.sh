#!/usr/bin/env bash
# The main job: set up and build teeny, validate the bundled MNIST MLP, compile it to a bundle
# and inspect it; on a machine with an NVIDIA GPU, also run it with --check and profile it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
BUNDLE=${BUNDLE:-$BUILD/mnist_mlp.teeny}

"$ROOT/scripts/setup.sh" teeny
cd "$ROOT"

step() {
  echo
  echo "== teeny $*"
  "$BUILD/teeny" "$@"
}

step check graphs/mnist_mlp.yaml --bind B=32
step ops linear
step compile graphs/mnist_mlp.yaml -o "$BUNDLE"
step inspect "$BUNDLE" --bind B=32 --node fc2

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  step run "$BUNDLE" --bind B=32 --init random --check
  step profile "$BUNDLE" --bind B=32 --iterations 200
else
  echo
  echo "== no NVIDIA GPU here (nvidia-smi finds none): skipping teeny run and teeny profile"
fi
