#!/usr/bin/env bash
# Copies the GPU tests (the end-to-end test_app among them), the benchmark and titan_train of a
# build, with the shared libraries they load, into one folder, so they run on a GPU machine
# that has the CUDA driver, the toolkit and Open MPI but none of Debian's -dev packages (a
# cluster node, a CUDA container):
#
#   scripts/bundle_gpu_binaries.sh build .devcarry        # here
#   LD_LIBRARY_PATH=.devcarry/lib .devcarry/bin/test_gpu   # there
#
# Left out on purpose: the C runtime and libstdc++ (the machine's own are as new or newer),
# the CUDA libraries (they must match the driver), NCCL (218 MB; the machine's comes with the
# nvidia-nccl-cu13 pip package: docs/cuda.md says how to put it on LD_LIBRARY_PATH) and Open
# MPI's (they must match its mpirun and orted).
set -euo pipefail
build=${1:?usage: bundle_gpu_binaries.sh BUILD_DIR OUT_DIR}
out=${2:?usage: bundle_gpu_binaries.sh BUILD_DIR OUT_DIR}
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for binary in "$build/test/test_gpu" "$build/titan_bench" "$build/titan_train" \
              "$build/test/test_comm_gpu" "$build/test/test_nccl_watchdog" \
              "$build/test/nccl_watchdog_probe" "$build/test/test_gpu_parallel" \
              "$build/test/test_app"; do
  cp "$binary" "$out/bin/"
  strip "$out/bin/$(basename "$binary")"
  ldd "$binary" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*) ;;
      libcuda*|libcublas*|libnccl*) ;;
      libmpi*|libopen-rte*|libopen-pal*|libhwloc*|libevent*|libudev*|libz.so*) ;;
      *) cp -n "$lib" "$out/lib/" ;;
    esac
  done
done
du -sh "$out"
