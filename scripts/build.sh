#!/usr/bin/env bash
# Builds titan_train into build/ (Release, Ninja, ccache when present).
#
#   scripts/build.sh                      configure once, then rebuild only what changed
#   scripts/build.sh -DTITAN_CUDA=OFF     (re)configure with these CMake options, then build
#   BUILD_DIR=build-cpu scripts/build.sh  another tree
#
# The CUDA backend is built when nvcc is found; -DTITAN_CUDA=OFF skips it. A tree that is
# already configured is not configured again unless options are given: Ninja re-runs CMake by
# itself when a CMakeLists.txt changes, so a build with nothing to do takes milliseconds.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
if [[ $# -gt 0 || ! -f $build_dir/build.ninja ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build "$build_dir"
