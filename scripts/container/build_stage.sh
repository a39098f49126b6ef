#!/usr/bin/env bash
# The Dockerfile's build stage, as a script so that it runs the same outside a container (that
# is how the CUDA stage's build was checked on a machine that has the toolkit but no CUDA base
# image): installs the build dependencies, builds titan_train for one device kind, and stages
# what the runtime image holds under DIR, each file at the path it has in the image.
#
#   scripts/container/build_stage.sh cpu  DIR    # -DTITAN_CUDA=OFF (Debian 12, no CUDA toolkit)
#   scripts/container/build_stage.sh cuda DIR    # -DTITAN_CUDA=ON for $TITAN_CUDA_ARCHITECTURES
#
# Environment:
#   TITAN_CUDA_ARCHITECTURES  the cuda build's architectures. Default "90a;100a": H100/H200
#                             (sm_90a) and B200/GB200 (sm_100a).
#   TITAN_TEST                ctest's arguments (e.g. "-L fast"): build the whole tree, tests
#                             included, and run the tests they select before staging. Empty
#                             (the default): build the executables only.
#   BUILD_DIR                 the build tree (default build)
#
# DIR receives:
#   usr/local/bin/titan_train, titan_tokenize, titan_convert, titan_generate, titan_bench_cpu
#                 (cuda: titan_bench)
#                                                                       cmake --install
#   usr/local/share/titan_train/configs/*.yaml                          cmake --install
#   usr/local/share/titan_train/runtime-packages                        runtime_packages.sh list
#   titan_train/  the working folder: corpus/kjv.txt, scripts/train.sh,
#                 scripts/container/entrypoint.sh, configs (a link to the installed ones), outputs/
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() {
  echo "build_stage.sh: error: $*" >&2
  exit 2
}

device=${1:-}
case $device in
  cpu) cmake_args=(-DTITAN_CUDA=OFF) ;;
  cuda) cmake_args=(-DTITAN_CUDA=ON "-DTITAN_CUDA_ARCHITECTURES=${TITAN_CUDA_ARCHITECTURES:-90a;100a}") ;;
  *) fail "the device is '$device'; use cpu or cuda (build_stage.sh cpu|cuda DIR)" ;;
esac
[[ -n ${2:-} ]] || fail "no staging folder given (build_stage.sh $device DIR)"
stage=$(realpath -m "$2")
build_dir=${BUILD_DIR:-build}

scripts/setup.sh
# TITAN_CUDA is given either way: a cuda build on a base without nvcc fails here, and a cpu build
# never picks up a toolkit that happens to be present.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr/local \
  "${cmake_args[@]}"
if [[ -n ${TITAN_TEST:-} ]]; then
  cmake --build "$build_dir"
  read -ra test_args <<< "$TITAN_TEST"
  (cd "$build_dir" && ctest -j "$(nproc)" --output-on-failure "${test_args[@]}")
else
  # Every executable cmake --install installs (app/ and tools/*/): one not built fails it.
  targets=(titan_train titan_tokenize titan_convert titan_generate titan_bench_cpu)
  [[ $device == cuda ]] && targets+=(titan_bench)
  cmake --build "$build_dir" --target "${targets[@]}"
fi

DESTDIR=$stage cmake --install "$build_dir"
work=$stage/titan_train
install -D -m 644 corpus/kjv.txt "$work/corpus/kjv.txt"
install -D -m 755 scripts/train.sh "$work/scripts/train.sh"
install -D -m 755 scripts/container/entrypoint.sh "$work/scripts/container/entrypoint.sh"
ln -sfn /usr/local/share/titan_train/configs "$work/configs"
mkdir -p "$work/outputs"

# openmpi-bin holds mpirun, which train.sh starts the ranks with; the rest hold the libraries.
packages=$stage/usr/local/share/titan_train/runtime-packages
{
  scripts/container/runtime_packages.sh list "$stage"/usr/local/bin/titan_*
  echo openmpi-bin
} | sort -u > "$packages.tmp"
mv "$packages.tmp" "$packages"
echo "build_stage.sh: staged the $device build in $stage; its runtime packages: $(tr '\n' ' ' < "$packages")"
