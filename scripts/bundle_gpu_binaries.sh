#!/usr/bin/env bash
# Copies the GPU test and benchmark binaries of a build, with the non-CUDA shared libraries
# they load, into one folder, so they run on a GPU machine that has the CUDA driver and
# toolkit but none of Debian's -dev packages (a cluster node, a container with only CUDA):
#
#   scripts/bundle_gpu_binaries.sh build .devcarry        # here
#   LD_LIBRARY_PATH=.devcarry/lib .devcarry/bin/test_gpu   # there
#
# The CUDA libraries (cudart, cuBLASLt, NCCL) are left out on purpose: the GPU machine's own
# must match its driver.
set -euo pipefail
build=${1:?usage: bundle_gpu_binaries.sh BUILD_DIR OUT_DIR}
out=${2:?usage: bundle_gpu_binaries.sh BUILD_DIR OUT_DIR}
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for binary in "$build/test/test_gpu" "$build/titan_bench"; do
  cp "$binary" "$out/bin/"
  strip "$out/bin/$(basename "$binary")"
  ldd "$binary" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda*|libcublas*|libnccl*) ;;
      *) cp -n "$lib" "$out/lib/" ;;
    esac
  done
done
du -sh "$out"
