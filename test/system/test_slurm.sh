#!/usr/bin/env bash
# The shipped Slurm batch scripts (scripts/slurm/*.sbatch) under a real Slurm: a private
# cluster (test/system/private_slurm.sh) that this test starts and stops, with this machine
# as one node and, where network namespaces can be made, two more "hosts" with their own
# network and hostname. Each case submits a shipped script unchanged, with sbatch options that
# fit the nodes and titan_train overrides for a few steps of the debug model on 2 ranks, on the
# CPU.
#
#   test/system/test_slurm.sh BUILD_DIR        (as root; ctest -L slurm runs it)
#
# Needs Debian's slurm-wlm and munge (scripts/setup.sh --tests installs them) and root, since it
# starts slurmd: exits 77 (ctest: skipped) with one line when not root, and fails with one line
# naming the setup step when Slurm is missing.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: test_slurm.sh BUILD_DIR}" && pwd)
cd "$repo" || exit 1

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIPPED: the slurm test starts slurmctld and slurmd as root; run it as root"
  exit 77
fi
for tool in slurmctld slurmd sbatch munged; do
  command -v "$tool" > /dev/null || {
    echo "slurm test: FAILED: $tool is missing: run scripts/setup.sh --tests (it installs slurm-wlm and munge)"
    exit 1
  }
done
source test/system/private_slurm.sh

# The hosts' shared disk, as the checkout is.
work=$(mktemp -d /var/tmp/titan-slurm.XXXXXX)
trap 'slurm_stop; rm -rf "$work"' EXIT
slurm_start "$work/cluster" 2 || exit 1
echo "slurm test: a private cluster is up in $work/cluster:"
sinfo -N -o '  %N  partition %P  %c CPUs  gres %G  %t'

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
pass() { echo "ok: $*"; }

# sbatch options that fit the shipped scripts to this node: 2 ranks, one core each.
node_fit=(--nodes=1 --ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1 --time=10)
# titan_train overrides for a short run of the debug model.
short_run=(--config configs/debug_model.yaml --training.seq_len 64 --metrics.log_freq 1)
export TITAN_TRAIN=$build/titan_train TITAN_OUTPUTS=$work/outputs

# submit_and_wait NAME SCRIPT ARGS...: sbatch --wait; sets job_id, job_rc, job_log, run_dir.
submit_and_wait() {
  local name=$1 script=$2
  shift 2
  job_log=$work/$name.out
  job_id=$(sbatch --wait --parsable --job-name="$name" --output="$job_log" "${node_fit[@]}" \
    "$script" "$@")
  job_rc=$?
  run_dir=$TITAN_OUTPUTS/$name-$job_id
}

# same_losses A B: two lists of '"loss": X' lines agree to 1e-6 relative, line by line. Not
# bit for bit: a rank alone on its host runs its GEMMs on 2 threads instead of 1, which changes
# the order of float sums.
same_losses() {
  [[ -n $1 ]] && paste <(echo "$1") <(echo "$2") | awk '
    { a = $2; b = $4; d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
      if (NF != 4 || d > 1e-6 * m) bad = 1 }
    END { exit bad }'
}

show_log() {
  echo "---- $job_log"
  cat "$job_log"
  echo "----"
}

# 1. The one-node script trains, logs and writes its metrics into the job's run folder.
submit_and_wait titan-train scripts/slurm/train.sbatch "${short_run[@]}" --training.steps 4
if [[ $job_rc -ne 0 ]]; then
  fail "train.sbatch exited $job_rc, expected 0"; show_log
elif ! grep -q "2 ranks on 1 node(s)" "$job_log" || ! grep -q "dp_shard 2" "$job_log" ||
  ! grep -Eq "step +4/4 \(100%\)  loss" "$job_log"; then
  fail "train.sbatch's log lacks the job line, the 2-rank mesh or step 4"; show_log
elif [[ $(grep -c '"step"' "$run_dir/metrics.jsonl" 2>/dev/null) != 4 ]]; then
  fail "expected 4 lines in $run_dir/metrics.jsonl"; cat "$run_dir/metrics.jsonl"
elif [[ ! -d $run_dir/checkpoint/step-4 || $(readlink "$run_dir/slurm.log") != "$job_log" ]]; then
  fail "the run folder lacks the checkpoint of step 4 or the link to the log"; ls -lR "$run_dir"
else
  pass "train.sbatch trained 4 steps on 2 ranks under srun --mpi=pmix (job $job_id): log, metrics.jsonl and checkpoint in $run_dir"
fi

losses_one_node=$(grep -o '"loss": [-0-9.e+]*' "$run_dir/metrics.jsonl")

# 2. A bad config ends the job with titan_train's exit code 2 and its one-line message.
submit_and_wait titan-bad-config scripts/slurm/train.sbatch "${short_run[@]}" --parallelism.tp 3
if [[ $job_rc -ne 2 ]] || ! grep -q "titan_train: error: .*tp 3" "$job_log"; then
  fail "a bad --parallelism.tp gave exit $job_rc (expected 2) or no one-line error"; show_log
else
  pass "a bad config ends the job with 2: $(grep -m1 'titan_train: error' "$job_log")"
fi

# ... and so does a config file that is not there, before anything starts.
submit_and_wait titan-no-config scripts/slurm/train.sbatch --config configs/no_such.yaml
if [[ $job_rc -ne 2 ]] || ! grep -q "titan_train job: error: the config 'configs/no_such.yaml'" "$job_log"; then
  fail "a missing config gave exit $job_rc (expected 2) or no one-line error"; show_log
else
  pass "a missing config ends the job with 2 before launching"
fi

# 3. One rank that fails ends the whole job promptly, with its message.
started=$SECONDS
TITAN_FAULT_INJECT=1:2 submit_and_wait titan-fault scripts/slurm/train.sbatch "${short_run[@]}" --training.steps 200
elapsed=$((SECONDS - started))
if [[ $job_rc -eq 0 ]] || ! grep -q "rank 1: error: injected fault" "$job_log" || ((elapsed > 90)); then
  fail "a failing rank 1 gave exit $job_rc after ${elapsed}s (expected non-zero, well before the 200 steps)"; show_log
else
  pass "a failure on rank 1 ended the job with $job_rc in ${elapsed}s (200 steps would take minutes)"
fi

# 4. The mpirun script: mpirun inside the allocation starts the ranks.
submit_and_wait titan-mpirun scripts/slurm/train_mpirun.sbatch "${short_run[@]}" --training.steps 2
if [[ $job_rc -ne 0 ]] || ! grep -q "launcher mpirun" "$job_log" || ! grep -q "dp_shard 2" "$job_log"; then
  fail "train_mpirun.sbatch exited $job_rc or did not train on 2 ranks"; show_log
else
  pass "train_mpirun.sbatch trained on 2 ranks under mpirun in the allocation (job $job_id)"
fi

# 5. USR1 (what --signal=B:USR1@300 sends before the time limit) makes the ranks save the step
#    they are in and exit 75, and requeues the job; it starts again with the same id and
#    resumes from that checkpoint in its run folder. Under srun (scancel signals the job's
#    steps) and under mpirun (the script signals the ranks it launched). A decoy process named
#    titan_train, not of the job, must not get the signal: `pkill -x titan_train` once stopped
#    every titan_train of the user on the node, another job's and another test's.
decoy_dir=$work/decoy
mkdir -p "$decoy_dir"
cp "$(command -v sleep)" "$decoy_dir/titan_train"
requeue_case() {
  local name=$1 script=$2
  job_log=$work/$name.out
  "$decoy_dir/titan_train" 600 &
  local decoy=$!
  job_id=$(sbatch --parsable --job-name="$name" --output="$job_log" "${node_fit[@]}" \
    "$script" "${short_run[@]}" --training.steps 30 --checkpoint.interval 4)
  run_dir=$TITAN_OUTPUTS/$name-$job_id
  job_state() { scontrol show job "$job_id" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
  job_done() { [[ $(job_state) =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ ]]; }
  if ! slurm_wait_for 120 "the checkpoint of step 4" test -d "$run_dir/checkpoint/step-4"; then
    fail "$script: the requeue job wrote no checkpoint of step 4"; show_log
  else
    scancel --batch --signal=USR1 "$job_id"
    slurm_wait_for 240 "the requeued job's end" job_done
    if [[ $(job_state) != COMPLETED ]] ||
      ! scontrol show job "$job_id" | grep -q "Restarts=1" ||
      ! grep -q "USR1 (time limit or preemption near): saving a checkpoint" "$job_log" ||
      ! saved_step=$(grep -o "preempted: .* saving step [0-9]*" "$job_log" | grep -o "[0-9]*$" | head -n 1) ||
      [[ -z $saved_step ]] ||
      ! grep -q "titan_train exited 75; requeueing" "$job_log" ||
      ! grep -q "start 2" "$job_log" ||
      ! grep -Eq "checkpoint: resumed from .*/step-$saved_step " "$job_log" ||
      ! grep -Eq '"step": 30,' "$run_dir/metrics.jsonl"; then
      fail "$script: the requeued job did not resume and finish (state $(job_state))"
      scontrol show job "$job_id" | grep -E "JobState|Restarts|ExitCode"
      show_log
    elif ! kill -0 "$decoy" 2>/dev/null; then
      fail "$script: USR1 reached a titan_train process outside the job (the decoy died)"
    else
      pass "$script: USR1 made job $job_id save step $saved_step and requeue; it started again, $(grep -o 'resumed from .*' "$job_log" | head -n 1), and finished step 30; a titan_train outside the job lived on"
    fi
  fi
  kill "$decoy" 2>/dev/null
  wait "$decoy" 2>/dev/null
  return 0
}
requeue_case titan-requeue scripts/slurm/train.sbatch
requeue_case titan-requeue-mpirun scripts/slurm/train_mpirun.sbatch

# 6. Several nodes: the multi-node script on two hosts, one rank each, trains exactly like the
#    one-node job of case 1 (same mesh, same data); and mpirun inside a two-host allocation.
if ((slurm_hosts < 2)); then
  echo "SKIPPED case: several nodes (no network namespaces here: private_slurm.sh said why)"
else
  node_fit=(--partition=hosts --nodes=2 --ntasks-per-node=1 --gpus-per-node=2 --cpus-per-task=1 --time=10)
  submit_and_wait titan-multinode scripts/slurm/train_multinode.sbatch "${short_run[@]}" --training.steps 4
  losses=$(grep -o '"loss": [-0-9.e+]*' "$run_dir/metrics.jsonl" 2>/dev/null)
  if [[ $job_rc -ne 0 ]] || ! grep -q "2 ranks on 2 node(s) tnode\[1-2\]" "$job_log"; then
    fail "train_multinode.sbatch on 2 hosts exited $job_rc or did not run on both"; show_log
  elif ! same_losses "$losses" "$losses_one_node"; then
    fail "the 2-host losses differ from the one-node job's by more than 1e-6:"$'\n'"$losses"$'\n'"vs"$'\n'"$losses_one_node"
  else
    pass "train_multinode.sbatch trained on 2 hosts (srun over TCP between them, job $job_id), with the one-node job's losses"
  fi

  submit_and_wait titan-mpirun-hosts scripts/slurm/train_mpirun.sbatch "${short_run[@]}" --training.steps 2
  if [[ $job_rc -ne 0 ]] || ! grep -q "2 ranks on 2 node(s)" "$job_log" || ! grep -Eq "step +2/2 \(100%\)  loss" "$job_log"; then
    fail "train_mpirun.sbatch on 2 hosts exited $job_rc or did not train"; show_log
  else
    pass "train_mpirun.sbatch trained on 2 hosts, mpirun starting its daemons through Slurm (job $job_id)"
  fi
fi

if ((failures > 0)); then
  echo "slurm test: $failures case(s) failed; the daemons' logs:"
  tail -n 30 "$work"/cluster/log/*.log
  exit 1
fi
echo "slurm test: every case passed in ${SECONDS}s"
