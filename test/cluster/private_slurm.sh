# A private single-node Slurm cluster for tests: Debian 12's munged, slurmctld and slurmd,
# configured in a temporary folder (slurm.conf with MpiDefault=pmix, ports on loopback, state,
# spool and logs there), started and stopped by their process ids. Nothing outside the folder
# is touched: the system's /etc/slurm and /etc/munge stay as they are.
#
#   source test/cluster/private_slurm.sh
#   slurm_start DIR        # exports SLURM_CONF; returns once the node is idle
#   ...sbatch, srun, scontrol...
#   slurm_stop             # kills the daemons it started (call it from an EXIT trap)
#
# The node declares two "GPUs" whose device files are copies of /dev/null, so that the shipped
# batch scripts' --gpus-per-node is honoured by a node that has no GPU; the tests train on the
# CPU.

slurm_pids=()
slurm_dir=""

slurm_free_port() {  # a port in 20000-59999 that nothing listens on
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    (: </dev/tcp/127.0.0.1/"$port") 2>/dev/null || break
  done
  echo "$port"
}

slurm_wait_for() {  # slurm_wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "private_slurm: $what did not happen within ${seconds}s" >&2
      return 1
    fi
    sleep 0.5
  done
}

slurm_start() {
  local dir=$1 node
  slurm_dir=$dir
  node=$(hostname -s)
  mkdir -p "$dir"/{munge,state,spool/"$node",log,dev}
  chmod 700 "$dir/munge"

  # munge: a fresh key and a socket of our own (Slurm is pointed at it by AuthInfo).
  head -c 128 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  slurm_wait_for 10 "munged's pid file" test -s "$dir/munge/munged.pid"
  slurm_pids+=("$(cat "$dir/munge/munged.pid")")

  mknod "$dir/dev/gpu0" c 1 3
  mknod "$dir/dev/gpu1" c 1 3
  cat >"$dir/gres.conf" <<EOF
NodeName=$node Name=gpu File=$dir/dev/gpu[0-1]
EOF
  cat >"$dir/slurm.conf" <<EOF
ClusterName=titantest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(slurm_free_port)
SlurmdPort=$(slurm_free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it starts again (default 120 s).
AuthInfo=socket=$dir/munge/munge.sock,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
KillWait=10
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf

  slurmctld -i -f "$SLURM_CONF"
  slurm_wait_for 20 "slurmctld's pid file" test -s "$dir/slurmctld.pid"
  slurm_pids+=("$(cat "$dir/slurmctld.pid")")
  slurmd -f "$SLURM_CONF"
  slurm_wait_for 20 "slurmd's pid file" test -s "$dir/slurmd.pid"
  slurm_pids+=("$(cat "$dir/slurmd.pid")")

  if ! slurm_wait_for 60 "node $node becoming idle" slurm_node_idle; then
    sinfo -N -l >&2 || true
    tail -n 20 "$dir"/log/*.log >&2
    return 1
  fi
}

slurm_node_idle() {
  [[ $(sinfo -h -N -o %t) == idle ]]
}

slurm_stop() {
  local pid
  # Jobs still running (a test that failed half-way) end first, so no slurmstepd outlives us.
  # Only on our own cluster: a real one's jobs are not ours to cancel.
  if [[ -n $slurm_dir && ${SLURM_CONF:-} == "$slurm_dir/slurm.conf" ]]; then
    scancel --quiet --user=root 2>/dev/null || true
    sleep 1
  fi
  for pid in "${slurm_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${slurm_pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  slurm_pids=()
}
