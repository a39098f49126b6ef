#!/usr/bin/env bash
# Builds build-cpu/ the way a machine without the CUDA toolkit builds titan_train, on a machine
# that has it: /usr/local/cuda is hidden from the build (a private mount namespace with an empty
# folder mounted over it), so nothing can find nvcc or a CUDA header, and CMake picks the CPU
# build by itself, as on a fresh Debian 12. Where hiding is not allowed (not root, or no mount
# namespaces in a container), it says so and configures with -DTITAN_CUDA=OFF instead, which
# still keeps every toolkit path off the compile lines.
#
#   scripts/build_cpu_only.sh                       build-cpu/, plain (Release)
#   BUILD_DIR=build-asan scripts/build_cpu_only.sh -DTITAN_SANITIZE=address,undefined
#                                                   another tree, with these CMake options
#                                                   (scripts/sanitize.sh does this)
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-cpu}
cuda_root=/usr/local/cuda

if [[ -d $cuda_root ]] && unshare --mount true 2>/dev/null; then
  echo "build_cpu_only: building $BUILD_DIR with $cuda_root hidden"
  unshare --mount bash -c "mount -t tmpfs -o ro tmpfs '$cuda_root' && scripts/build.sh \"\$@\"" \
    bash "$@"
else
  [[ -d $cuda_root ]] && echo "build_cpu_only: cannot hide $cuda_root here (needs root and mount namespaces); building $BUILD_DIR with -DTITAN_CUDA=OFF"
  scripts/build.sh -DTITAN_CUDA=OFF "$@"
fi

if ! grep -q '^TITAN_CUDA:BOOL=OFF' "$BUILD_DIR/CMakeCache.txt"; then
  echo "build_cpu_only: error: $BUILD_DIR was configured with the CUDA backend; remove $BUILD_DIR and run again" >&2
  exit 1
fi
