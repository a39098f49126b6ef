# shellcheck shell=bash
# The body of titan_train's Slurm batch scripts, sourced by scripts/slurm/*.sbatch after their
# top part has set the resources, CONFIG and LAUNCHER. Not a script to run by itself.
#
# What it does, in order:
#   1. checks that there is a titan_train to run and a config, before anything starts;
#   2. gives the job one run folder, outputs/<job name>-<job id>: metrics.jsonl, checkpoints,
#      and a link to the job's log. A requeued job keeps its id, so it comes back to the same
#      folder and titan_train resumes from the latest checkpoint there;
#   3. on USR1 (`#SBATCH --signal=B:USR1@N`: N seconds before the time limit, or
#      `scancel --batch --signal=USR1 JOBID` by hand) passes the signal on to every rank, which
#      finish their step, save a checkpoint of it and exit 75 (docs/checkpoint.md), and then
#      requeues the job;
#   4. launches one titan_train rank per task (srun --mpi=pmix, or mpirun inside the
#      allocation) through scripts/train.sh, with the overrides given after the script's name
#      on the sbatch line, and exits with titan_train's exit code.
#
# So a requeue loses no step: keep the --signal lead time above a step plus a checkpoint save.
#
# Environment (all optional; sbatch passes the submitting shell's environment through):
#   TITAN_DIR      the titan_train checkout (default: the folder sbatch was run from)
#   TITAN_TRAIN    the binary (default: $TITAN_DIR/build/titan_train)
#   TITAN_OUTPUTS  where run folders go (default: $TITAN_DIR/outputs)
set -euo pipefail

job_fail() {
  echo "titan_train job: error: $*" >&2
  exit 2
}

[[ -n ${SLURM_JOB_ID:-} ]] || job_fail "not inside a Slurm job; submit the script with sbatch (or run scripts/train.sh directly)"
TITAN_DIR=${TITAN_DIR:-$SLURM_SUBMIT_DIR}
cd "$TITAN_DIR" 2>/dev/null || job_fail "TITAN_DIR is '$TITAN_DIR', which is not a folder; run sbatch from the titan_train checkout or set TITAN_DIR to it"
export TITAN_TRAIN=${TITAN_TRAIN:-$TITAN_DIR/build/titan_train}
[[ -x $TITAN_TRAIN ]] || job_fail "no titan_train at '$TITAN_TRAIN'; build it once on a login node (scripts/build.sh in $TITAN_DIR) or set TITAN_TRAIN to a built one"
# The config: CONFIG from the script's top, unless the sbatch line names one with --config.
arguments=("$@")
for i in "${!arguments[@]}"; do
  case ${arguments[i]} in
    --config) CONFIG=${arguments[i + 1]:-} ;;
    --config=*) CONFIG=${arguments[i]#--config=} ;;
  esac
done
[[ -f $CONFIG ]] || job_fail "the config '$CONFIG' is not a file under $TITAN_DIR; set CONFIG at the top of the batch script (e.g. configs/llama3_8b.yaml) or pass --config FILE after the script's name"

run_dir=${TITAN_OUTPUTS:-$TITAN_DIR/outputs}/$SLURM_JOB_NAME-$SLURM_JOB_ID
mkdir -p "$run_dir"
# The log Slurm writes (#SBATCH --output), linked from the run folder so the two stay together.
log=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *StdOut=//p' | head -n 1)
[[ -n $log && -f $log ]] && ln -sfn "$log" "$run_dir/slurm.log"

echo "titan_train job $SLURM_JOB_ID (start $((${SLURM_RESTART_COUNT:-0} + 1))): $SLURM_NTASKS ranks on" \
  "$SLURM_JOB_NUM_NODES node(s) $SLURM_JOB_NODELIST, launcher $LAUNCHER, config $CONFIG, run folder $run_dir"

# Since Slurm 22.05, srun no longer takes --cpus-per-task from sbatch; without this each rank
# would get one core for its CPU work.
[[ -n ${SLURM_CPUS_PER_TASK:-} ]] && export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK

# titan_train's exit code when a signal stopped it after saving (app/preemption.h).
readonly exit_preempted=75
requeue_wanted=0
on_usr1() {
  echo "titan_train job $SLURM_JOB_ID: USR1 (time limit or preemption near): saving a" \
    "checkpoint, then requeueing; the next start resumes from it in $run_dir"
  requeue_wanted=1
  # The ranks: those srun started (every step of the job) and, under mpirun, this job's ranks
  # on this node (mpirun forwards USR1 to the rest). Ranks agree on the step to stop after.
  # Only this launch's descendants: a plain `pkill -x titan_train` also stopped every other
  # titan_train of this user on the node (another job sharing it, a test running beside it).
  scancel --signal=USR1 "$SLURM_JOB_ID" 2>/dev/null || true
  [[ -n ${launch:-} ]] || return 0  # not started yet: it starts, and the requeue follows
  local pid
  for pid in $(descendants "$launch"); do
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == titan_train ]] && kill -USR1 "$pid" 2>/dev/null
  done
  return 0
}
# Every process below PID, children first.
descendants() {
  local child
  for child in $(pgrep -P "$1"); do
    echo "$child"
    descendants "$child"
  done
}
trap on_usr1 USR1

# The overrides before "$@" are defaults the sbatch line can override (the last value wins).
LAUNCHER=$LAUNCHER CONFIG_FILE=$CONFIG scripts/train.sh \
  --job.dump_folder "$run_dir" \
  --metrics.jsonl "$run_dir/metrics.jsonl" \
  --checkpoint.enable true \
  "$@" &
# Bash runs a trap only between commands, so the launch runs in the background and the script
# waits for it; a trap interrupts `wait`, which is then resumed until the launch ends.
launch=$!
status=0
wait "$launch" || status=$?
while kill -0 "$launch" 2>/dev/null; do
  status=0
  wait "$launch" || status=$?
done
if ((requeue_wanted || status == exit_preempted)); then
  echo "titan_train job $SLURM_JOB_ID: titan_train exited $status; requeueing"
  scontrol requeue "$SLURM_JOB_ID" ||
    echo "titan_train job $SLURM_JOB_ID: scontrol requeue was refused; resubmit the job to resume" >&2
fi
exit "$status"
