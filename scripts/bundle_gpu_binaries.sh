#!/usr/bin/env bash
# Copies what the GPU checks run into one folder, so that they run on a GPU machine that has the
# CUDA driver and toolkit but none of Debian's -dev packages and no Open MPI (a cluster node, a
# CUDA container, a lent H100):
#
#   scripts/bundle_gpu_binaries.sh build .devcarry      # here, after building the CUDA tree
#   bash scripts/gpu_check.sh .devcarry                 # there (docs/cuda.md)
#
# The folder holds
#   lib/        the shared libraries the binaries load, but the C runtime and libstdc++ (the
#               machine's own are as new or newer), CUDA's (they must match the driver) and
#               NCCL's (218 MB; the machine's comes with the nvidia-nccl-cu13 pip package).
#               cuDNN is not linked but loaded at the first attention (core/cuda/cudnn_library.h),
#               480 MB: the machine's nvidia-cudnn-cu13, which gpu_check.sh finds
#   tree/       the build tree's layout, holding only the stripped test binaries, titan_train,
#               titan_bench, titan_convert, titan_generate and the ctest files, so that
#               `ctest -L gpu` runs there exactly what it runs here
#   openmpi/    Debian 12's Open MPI 4.1 runtime (mpirun and its libraries), unpacked from the
#               packages, never installed: the machine's /usr stays as it was
#   env.sh      sourced there: PATH, LD_LIBRARY_PATH and Open MPI's relocation variables, and
#               the source and build paths the test binaries were compiled with
set -euo pipefail
build=$(cd "${1:?usage: bundle_gpu_binaries.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: bundle_gpu_binaries.sh BUILD_DIR OUT_DIR}
source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
grep -q '^TITAN_CUDA:BOOL=ON' "$build/CMakeCache.txt" || {
  echo "bundle_gpu_binaries.sh: $build was configured without CUDA (TITAN_CUDA is not ON); build the CUDA tree (scripts/build.sh) and bundle that" >&2
  exit 2
}
rm -rf "$out" && mkdir -p "$out/lib" "$out/tree"
out=$(cd "$out" && pwd)

# The binaries, where the build tree has them (ctest and the tests name them by absolute path).
binaries=(titan_train titan_bench titan_convert titan_generate test/test_gpu test/test_comm_gpu
          test/test_pipeline_gpu test/test_nccl_watchdog test/nccl_watchdog_probe test/test_app)
for binary in "${binaries[@]}"; do
  mkdir -p "$out/tree/$(dirname "$binary")"
  cp "$build/$binary" "$out/tree/$binary"
  strip "$out/tree/$binary"
  ldd "$build/$binary" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*) ;;
      libcuda*|libcublas*|libcudnn*|libnccl*) ;;
      libmpi*|libopen-rte*|libopen-pal*|libhwloc*|libevent*) ;;  # from openmpi/ below
      libudev*|libz.so*) ;;
      *) cp -n "$lib" "$out/lib/" ;;
    esac
  done
done
# ctest's files: each directory's CTestTestfile.cmake and the discovered cases they include.
(cd "$build" && find . \( -name CTestTestfile.cmake -o -name '*_include.cmake' \
                          -o -name '*_cases.cmake' \) -print0) |
  while IFS= read -r -d '' file; do
    mkdir -p "$out/tree/$(dirname "$file")"
    cp "$build/$file" "$out/tree/$file"
  done

# Open MPI: Debian's runtime packages, unpacked. Its paths are compiled in as /usr/...;
# OPAL_PREFIX and the variables in env.sh move them under openmpi/usr.
packages=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7
          libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 librdmacm1 libpsm2-2
          libpsm-infinipath1 libnuma1 libltdl7 libmunge2 libnl-3-200 libnl-route-3-200)
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
(cd "$debs" && apt-get download -q "${packages[@]}" >/dev/null 2>&1) || {
  echo "bundle_gpu_binaries.sh: apt-get download of Open MPI's packages failed (no network to Debian's mirror?); run it where apt works" >&2
  exit 2
}
for deb in "$debs"/*.deb; do dpkg -x "$deb" "$out/openmpi"; done
rm -rf "$out/openmpi/usr/share/doc" "$out/openmpi/usr/share/man" "$out/openmpi/usr/share/lintian"
ln -sf orterun "$out/openmpi/usr/bin/mpirun"

cat >"$out/env.sh" <<EOF
# Sourced on the GPU machine by scripts/gpu_check.sh (or by hand): the bundle's libraries and
# Open MPI first, the machine's CUDA and NCCL after.
bundle=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
ompi=\$bundle/openmpi/usr
multiarch=\$ompi/lib/x86_64-linux-gnu
export PATH=\$ompi/bin:\$PATH
export LD_LIBRARY_PATH=\$bundle/lib:\$bundle/openmpi/lib/x86_64-linux-gnu:\$multiarch:\$multiarch/openmpi/lib:\$multiarch/pmix2/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export OPAL_PREFIX=\$ompi
export OPAL_LIBDIR=\$multiarch/openmpi/lib
export OPAL_PKGLIBDIR=\$multiarch/openmpi/lib/openmpi3
export OPAL_DATADIR=\$ompi/share
export OPAL_PKGDATADIR=\$ompi/share/openmpi
export OPAL_SYSCONFDIR=\$bundle/openmpi/etc/openmpi
export PMIX_PREFIX=\$multiarch/pmix2 PMIX_PKGDATADIR=\$multiarch/pmix2/share/pmix
# PMIx looks for its plugins at its compiled-in path whatever the prefix; a machine with a
# PMIx of its own there would hand it plugins of another version.
export PMIX_MCA_mca_base_component_path=\$multiarch/pmix2/lib/pmix
export PMIX_MCA_pcompress_base_silence_warning=1
# One node, shared memory and TCP only: the fabric components would probe for hardware.
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi,psm,psm2 OMPI_MCA_osc=^ucx
# One node: mpirun starts no remote daemons, but refuses to start without an ssh to name.
export OMPI_MCA_plm_rsh_agent=false
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The paths the test binaries were compiled with (test/support/process.cpp reads the sources
# and writes scratch files there; ctest's files name the binaries there).
TITAN_BUNDLE_SOURCE_DIR=$source_dir
TITAN_BUNDLE_BUILD_DIR=$build
EOF
du -sh "$out"
