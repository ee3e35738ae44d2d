#!/usr/bin/env bash
# The main job: set up and build teeny, then validate the bundled MNIST MLP (every node's
# inferred symbolic and bound shape) and list the registered ops.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}

"$ROOT/scripts/setup.sh" teeny
cd "$ROOT"

echo "== teeny check graphs/mnist_mlp.yaml --bind B=32"
"$BUILD/teeny" check graphs/mnist_mlp.yaml --bind B=32
echo
echo "== teeny ops"
"$BUILD/teeny" ops
echo
echo "== teeny ops linear"
"$BUILD/teeny" ops linear
