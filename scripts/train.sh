#!/usr/bin/env bash
# Launches titan_train: a config, overrides, a rank count and a launcher (as torchtitan's
# run_train.sh does). Quickstart 1 is this script with no arguments: set up, build, train the
# debug model on the King James Bible on one rank under mpirun, save its last step to
# outputs/quickstart_checkpoint (replaced at each such run, so that it trains from scratch
# every time), and complete three prompts with titan_generate from that checkpoint
# (docs/generation.md).
#
#   scripts/train.sh                                            # configs/debug_model.yaml
#   scripts/train.sh --config configs/llama3_8b.yaml --training.steps 10
#   NPROC=8 scripts/train.sh --parallelism.dp_replicate 2 --parallelism.tp 2
#   CONFIG_FILE=configs/llama3_8b.yaml NPROC=8 scripts/train.sh --training.device cuda
#
# Every argument goes to titan_train (`--section.key value` overrides the config). The config is
# the `--config` among them, else $CONFIG_FILE, else configs/debug_model.yaml.
#
# Environment:
#   NPROC        ranks. Default: 1; inside a Slurm allocation, the allocation's tasks.
#   LAUNCHER     auto (default): srun inside a Slurm allocation, mpirun elsewhere;
#                mpirun | srun | none (one rank, no launcher: MPI starts as a singleton).
#   TITAN_TRAIN  a titan_train binary to run as it is: nothing is set up or built (a cluster
#                job, the container). Unset: build/titan_train, built first; a first run sets
#                up the machine (scripts/setup.sh), later runs rebuild only what changed.
#   BUILD_DIR    the build tree when TITAN_TRAIN is unset (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "train.sh: error: $*" >&2
  exit 2
}

in_slurm_allocation=false
[[ -n ${SLURM_JOB_ID:-} ]] && in_slurm_allocation=true
launcher=${LAUNCHER:-auto}
case $launcher in
  auto | mpirun | srun | none) ;;
  *) fail "LAUNCHER is '$launcher'; use auto, mpirun, srun or none" ;;
esac
if [[ $launcher == auto ]]; then
  if $in_slurm_allocation && command -v srun >/dev/null; then launcher=srun; else launcher=mpirun; fi
fi
if [[ -n ${NPROC:-} && ! $NPROC =~ ^[1-9][0-9]*$ ]]; then
  fail "NPROC is '$NPROC'; set it to the number of ranks, e.g. NPROC=8"
fi
if [[ $launcher == none && ${NPROC:-1} != 1 ]]; then
  fail "LAUNCHER=none starts one rank, and NPROC is $NPROC; use LAUNCHER=mpirun or srun for more"
fi

# Quickstart 1: no arguments, the debug config, and a tree this script builds (titan_generate
# beside titan_train).
quickstart=false
[[ $# -eq 0 && -z ${TITAN_TRAIN:-} && -z ${CONFIG_FILE:-} ]] && quickstart=true

if [[ -n ${TITAN_TRAIN:-} ]]; then
  binary=$TITAN_TRAIN
  [[ -x $binary ]] || fail "TITAN_TRAIN is '$binary', which is not an executable; point it at a built titan_train or unset it to build one"
else
  build_dir=${BUILD_DIR:-build}
  [[ -f $build_dir/build.ninja && -s corpus/kjv.txt ]] || scripts/setup.sh
  BUILD_DIR=$build_dir scripts/build.sh
  binary=$build_dir/titan_train
fi

config_args=(--config "${CONFIG_FILE:-configs/debug_model.yaml}")
for arg in "$@"; do
  [[ $arg == --config || $arg == --config=* ]] && config_args=()
done
if $quickstart; then
  # The last step only (interval = the run's steps; a save also follows the last step), in a
  # folder of its own, emptied first: a checkpoint left there would be resumed, not retrained.
  checkpoint_folder=quickstart_checkpoint
  rm -rf "outputs/$checkpoint_folder"
  config_args+=(--checkpoint.enable true --checkpoint.folder "$checkpoint_folder"
                --checkpoint.interval 200 --checkpoint.keep_latest_k 1)
fi

# Quickstart 1's ending: three prompts completed by the model just trained, 100 tokens each,
# sampled with a fixed seed (so every run of the same weights prints the same lines; greedy
# decoding of a model this small repeats one word).
sample_quickstart_model() {
  echo
  echo "train.sh: titan_generate completes three prompts from outputs/$checkpoint_folder:"
  "$build_dir/titan_generate" --model "outputs/$checkpoint_folder" --max-new-tokens 100 \
    --temperature 0.8 --top-k 40 --seed 1 \
    --prompt "In the beginning" --prompt "And God said" --prompt "The LORD is my shepherd"
}

nproc_args=()
case $launcher in
  srun)
    # Open MPI under srun needs PMIx (--mpi=none and pmi2 fail: "not built with SLURM's PMI
    # support"). --kill-on-bad-exit ends every rank when one fails, besides titan_train's own
    # MPI_Abort.
    [[ -n ${NPROC:-} ]] && nproc_args=(--ntasks "$NPROC")
    launch=(srun --mpi=pmix --kill-on-bad-exit=1 "${nproc_args[@]}")
    ;;
  mpirun)
    # Inside an allocation mpirun takes its slots from Slurm; elsewhere one rank by default.
    nproc=${NPROC:-}
    if [[ -z $nproc ]] && ! $in_slurm_allocation; then nproc=1; fi
    launch=(mpirun --bind-to none)
    [[ -n $nproc ]] && launch+=(-np "$nproc")
    # One rank with --bind-to none uses the whole machine (Open MPI would pin it to one core).
    # As root Open MPI must be told; more ranks than cores (a laptop trying a mesh of 8) too.
    [[ $(id -u) -eq 0 ]] && launch+=(--allow-run-as-root)
    [[ -n $nproc ]] && ((nproc > $(nproc))) && launch+=(--oversubscribe)
    ;;
  none)
    launch=()
    ;;
esac
if ! $quickstart; then
  exec "${launch[@]}" "$binary" "${config_args[@]}" "$@"
fi
"${launch[@]}" "$binary" "${config_args[@]}"
sample_quickstart_model
