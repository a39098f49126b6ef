#!/usr/bin/env bash
# The container test (ctest label `container`, system tier): builds the CPU image from the shipped
# Dockerfile with podman and trains in it through its entrypoint. What a pass shows:
#   - the CPU-only build succeeds on a machine that has no CUDA toolkit (the image's Debian 12),
#     and builds a titan_train without the CUDA backend;
#   - the runtime stage holds what a run needs (binaries, configs, corpus, libraries) and no
#     compiler, build tool or build tree;
#   - the entrypoint: overrides after the image name train (exit 0, metrics in the log and in a
#     mounted outputs folder, a checkpoint there too), NPROC=2 starts two ranks, --config replaces
#     the default config, a bad override exits 2 with titan_train's one-line error, and a command
#     (titan_train --help, titan_tokenize, bash) runs as itself;
#   - dockerfilelint finds nothing in the Dockerfile, CUDA stages included.
# With --with-tests, the build stage also builds the tests and runs the fast tier inside the
# image (those that need no tool of scripts/setup.sh --tests: the labels node, torch and python
# left out), before staging.
#
# Nothing is downloaded: the image is built with --network none from what scripts/setup.sh
# --tests prepared in .cache/ (scripts/container/offline_base.sh): a Debian 12 minbase made by
# debootstrap, whose apt reads a local repository of every package the Dockerfile installs,
# mounted into each RUN step; and dockerfilelint from .cache/npm/dockerfilelint. Everything
# podman makes lives in a temporary folder with its own storage and containers.conf, removed at
# the end; the machine's own podman configuration and images are neither read nor changed.
#
# Needs root (rootful podman) and skips otherwise (exit 77).
# Environment:
#   TITAN_CONTAINER_KEEP  a folder to keep podman's storage in between runs (nothing is cleaned
#                         up; the base image and cached build layers are reused): for working on
#                         the Dockerfile, not for CI.
set -euo pipefail
cd "$(dirname "$0")/../.."

with_tests=false
case ${1:-} in
  "") ;;
  --with-tests) with_tests=true ;;
  *) echo "test_container.sh: unknown argument '$1'; use --with-tests or nothing" >&2; exit 2 ;;
esac

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIPPED: the container test needs root (rootful podman); run it as root"
  exit 77
fi

started=$SECONDS
say() { echo "container test [$((SECONDS - started)) s]: $*"; }
fail() {
  echo "container test: FAILED: $*" >&2
  exit 1
}

# ---- what scripts/setup.sh --tests prepared ----------------------------------------------------------
# podman (rootful, so no uidmap/slirp4netns) with runc as its runtime (the one probed here), the
# offline base and its package repository, dockerfilelint.
cache=$PWD/.cache
for tool in podman runc; do
  command -v "$tool" > /dev/null || fail "$tool is missing: run scripts/setup.sh --tests"
done
[[ -f $cache/container/base.tar && -f $cache/container/debs/Packages ]] ||
  fail "the offline Debian 12 base is missing ($cache/container): run scripts/setup.sh --tests as root"
lint=$cache/npm/dockerfilelint/node_modules/.bin/dockerfilelint
[[ -x $lint ]] || fail "dockerfilelint is missing ($lint): run scripts/setup.sh --tests"

# ---- a private podman -----------------------------------------------------------------------------
if [[ -n ${TITAN_CONTAINER_KEEP:-} ]]; then
  work=$(realpath -m "$TITAN_CONTAINER_KEEP")
  mkdir -p "$work"
else
  work=$(mktemp -d /var/tmp/titan-container-test.XXXXXX)
fi
# outputs/ is mounted into the runs: empty, so that a kept folder's checkpoint is not resumed.
rm -rf "$work/outputs"
mkdir -p "$work/tmp" "$work/outputs"
base=localhost/titan-test-base:bookworm
image=localhost/titan-train-test:cpu

pm() {
  podman --root "$work/storage" --runroot "$work/run" --tmpdir "$work/libpod" \
    --storage-driver overlay "$@"
}

cleanup() {
  local rc=$?
  if [[ -z ${TITAN_CONTAINER_KEEP:-} ]]; then
    pm rm --all --force > /dev/null 2>&1 || true
    pm rmi --all --force > /dev/null 2>&1 || true
    # Whatever podman left mounted under the folder (nothing, normally) must go before rm.
    awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r | xargs -r umount -l || true
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT

# runc sets each container's rlimits to podman's defaults (about a million files and processes),
# which this machine refuses ("error setting rlimit type 7: operation not permitted"; it allows
# at most 20000 files and about 32768 processes). Ask for what a training run needs, within the
# caller's own hard limits.
limit() {  # limit WANTED HARD: the smaller of the two
  if [[ $2 == unlimited ]] || (($1 <= $2)); then echo "$1"; else echo "$2"; fi
}
nofile=$(limit 20000 "$(ulimit -Hn)")
nproc=$(limit 4096 "$(ulimit -Hu)")
cat > "$work/containers.conf" << EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF=$work/containers.conf  # read instead of the machine's containers.conf
export TMPDIR=$work/tmp                          # podman build's copy of the context

# ---- the Debian 12 base -----------------------------------------------------------------------------
if ! pm image exists "$base"; then
  say "importing the offline Debian 12 base ($cache/container/base.tar)"
  pm import "$cache/container/base.tar" "$base" > /dev/null
fi

# ---- the CPU image --------------------------------------------------------------------------------
# --network none: the build installs its packages from the local repository mounted at the path
# the base's sources.list names, so it needs no mirror and cannot reach one.
# TITAN_DEVICE is given although it is the default: podman 4.3's buildah resolves a stage named
# by a build argument (`FROM build-base-${TITAN_DEVICE}`) only when the argument is passed
# (containers/buildah#4312); Docker's BuildKit does with the default.
build_args=(--build-arg TITAN_DEVICE=cpu --build-arg CPU_BASE="$base")
# With --with-tests the whole tree, tests included, builds and passes the fast tier on a machine
# with no CUDA toolkit (ctest's arguments, as build_stage.sh takes them in TITAN_TEST).
$with_tests && build_args+=(--build-arg "TITAN_TEST=-L fast -LE node|torch|python|shellcheck")
say "building the CPU image from the Dockerfile (podman build --network none$($with_tests && echo ', with the fast tests'))"
build_started=$SECONDS
if ! pm build --network none --volume "$cache/container/debs:/var/cache/titan-debs:ro" \
  "${build_args[@]}" -t "$image" -f Dockerfile . > "$work/build.log" 2>&1; then
  tail -40 "$work/build.log" >&2
  fail "podman build of the CPU image failed (the last lines of its log are above)"
fi
build_s=$((SECONDS - build_started))
grep -q "titan_train: CUDA backend OFF" "$work/build.log" ||
  fail "the image's build did not configure a CPU-only tree: no 'CUDA backend OFF' line in its log"
if $with_tests; then
  grep -qE "100% tests passed" "$work/build.log" ||
    fail "the build stage's fast tests did not all pass: no '100% tests passed' in the build log"
fi
grep -E "titan_train: CUDA backend|tests passed" "$work/build.log" | sed 's/^/  build log: /'
size_mb=$(($(pm image inspect --format '{{.Size}}' "$image") / 1000000))
base_mb=$(($(pm image inspect --format '{{.Size}}' "$base") / 1000000))
say "built in ${build_s} s; runtime image ${size_mb} MB, of which the base is ${base_mb} MB"

# Runs the image with arguments; leaves the exit code in $rc and the output in $work/run.log.
run_image() {
  rc=0
  pm run --rm --network host "$@" > "$work/run.log" 2>&1 || rc=$?
}
show_and_fail() {
  cat "$work/run.log" >&2
  fail "$*"
}

# ---- training through the entrypoint, with overrides ----------------------------------------------
say "podman run IMAGE --training.steps 3 --metrics.log_freq 1 (outputs mounted)"
run_image -v "$work/outputs:/titan_train/outputs" "$image" \
  --training.steps 3 --metrics.log_freq 1 --metrics.jsonl outputs/metrics.jsonl
((rc == 0)) || show_and_fail "training 3 steps in the image exited $rc, expected 0"
for step in 1 2 3; do
  grep -qE "step +$step/[0-9]+ \([0-9]+%\) +loss +[0-9.]+" "$work/run.log" || show_and_fail "no metrics line for step $step in the log"
done
grep -q "trained 3 steps" "$work/run.log" || show_and_fail "no 'trained 3 steps' line in the log"
[[ -f $work/outputs/metrics.jsonl ]] ||
  show_and_fail "no metrics.jsonl in the mounted outputs folder ($work/outputs)"
lines=$(wc -l < "$work/outputs/metrics.jsonl")
((lines == 3)) || fail "the mounted metrics.jsonl has $lines lines, expected 3 (one a step)"

say "podman run -e NPROC=2 IMAGE --parallelism.tp 2 ... (two ranks under mpirun, a checkpoint)"
run_image -e NPROC=2 -v "$work/outputs:/titan_train/outputs" "$image" --training.steps 2 \
  --metrics.log_freq 1 --parallelism.tp 2 --checkpoint.enable true --checkpoint.interval 2
((rc == 0)) || show_and_fail "training on two ranks in the image exited $rc, expected 0"
grep -q "tp 2 = 2 ranks on cpu" "$work/run.log" || show_and_fail "the log does not show a mesh of 2 ranks with tp 2"
grep -q "trained 2 steps" "$work/run.log" || show_and_fail "no 'trained 2 steps' line in the log"
# A complete sharded checkpoint: both ranks' files and the metadata written last.
for file in metadata.json rank00000.safetensors rank00001.safetensors; do
  [[ -f $work/outputs/checkpoint/step-2/$file ]] ||
    show_and_fail "no checkpoint step-2/$file in the mounted outputs folder ($work/outputs/checkpoint)"
done

say "podman run IMAGE --config configs/llama3_8b.yaml --print-config"
run_image "$image" --config configs/llama3_8b.yaml --print-config
((rc == 0)) || show_and_fail "--config configs/llama3_8b.yaml --print-config exited $rc, expected 0"
grep -q "flavor: llama3_8b" "$work/run.log" || show_and_fail "--config did not replace the default config: no 'flavor: llama3_8b'"

say "podman run IMAGE --training.steps banana (a bad override)"
run_image "$image" --training.steps banana
((rc == 2)) || show_and_fail "a bad override exited $rc, expected 2"
errors=$(grep -c "^titan_train: error: training.steps: .*banana" "$work/run.log" || true)
((errors == 1)) || show_and_fail "expected titan_train's one error line naming training.steps and 'banana', found $errors"

# ---- commands ------------------------------------------------------------------------------------
say "podman run IMAGE titan_train --help / titan_tokenize / bash"
run_image "$image" titan_train --help
if ((rc != 0)) || ! grep -q -- "--training.steps" "$work/run.log"; then
  show_and_fail "titan_train --help exited $rc or did not list --training.steps"
fi
run_image "$image" bash -c 'titan_tokenize corpus/kjv.txt /tmp/kjv.bin > /dev/null && stat -c %s /tmp/kjv.bin'
if ((rc != 0)) || ! grep -qE "^[0-9]{7,}$" "$work/run.log"; then
  show_and_fail "titan_tokenize of the corpus in the image exited $rc or wrote no token file"
fi

# ---- what the runtime image holds ----------------------------------------------------------------
# shellcheck disable=SC2016  # the script runs in the image's bash, which expands it
run_image "$image" bash -c '
  for tool in gcc g++ cc c++ cpp ld as make cmake ninja nvcc; do command -v "$tool" || true; done
  for dir in /src /stage /titan_train/build; do [[ -e $dir ]] && echo "$dir"; done
  true'
((rc == 0)) || show_and_fail "looking for a toolchain in the image exited $rc"
[[ ! -s $work/run.log ]] ||
  show_and_fail "the runtime image holds build tools or a build tree (listed above); the runtime stage must not"
run_image "$image" bash -c 'ldd /usr/local/bin/titan_train; titan_train --list-devices'
((rc == 0)) || show_and_fail "ldd/--list-devices in the image exited $rc"
if grep "=>" "$work/run.log" | grep -qiE "cuda|nccl|cublas"; then
  show_and_fail "the CPU image's titan_train loads a CUDA library (ldd above)"
fi
grep -q "built without the CUDA backend" "$work/run.log" ||
  show_and_fail "titan_train --list-devices in the CPU image does not say it was built without CUDA"

# ---- lint of the Dockerfile (both images' stages) ---------------------------------------------------
if ! "$lint" -c test/system Dockerfile > "$work/lint.log" 2>&1; then
  cat "$work/lint.log" >&2
  fail "dockerfilelint found problems in the Dockerfile (above)"
fi
say "dockerfilelint $(node -p "require('$cache/npm/dockerfilelint/node_modules/dockerfilelint/package.json').version"): no issues in the Dockerfile"

say "passed (image build ${build_s} s, runtime image ${size_mb} MB on a ${base_mb} MB base)"
