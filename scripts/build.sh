#!/usr/bin/env bash
# Configures and builds titan_train into build/ (Release, Ninja, ccache when present).
# The CUDA backend is built when nvcc is found; pass -DTITAN_CUDA=OFF to skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build
