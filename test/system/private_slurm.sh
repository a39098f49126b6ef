# shellcheck shell=bash
# A private Slurm cluster for tests: Debian 12's munged, slurmctld and slurmd, configured in a
# folder of the caller's (slurm.conf with MpiDefault=pmix, state, spool and logs there), started and
# stopped by their process ids. Nothing outside the folder is touched: the system's /etc/slurm
# and /etc/munge stay as they are.
#
#   source test/system/private_slurm.sh
#   slurm_start DIR [HOSTS]  # exports SLURM_CONF; returns once every node is idle
#   ...sbatch, srun, scontrol...
#   slurm_stop               # kills what it started, removes the namespaces (EXIT trap)
#
# Partition "debug" (the default) is this machine, on loopback. With HOSTS = N > 0 the cluster
# also gets partition "hosts": N more nodes, tnode1..tnodeN, each a slurmd in its own network
# and hostname namespace, with its own address on a private bridge, so that a job across them
# crosses a network as on a real cluster (the ranks' MPI and PMIx traffic goes over TCP between
# the namespaces). Making namespaces needs CAP_NET_ADMIN; where that is refused, slurm_start
# says why and sets slurm_hosts=0 (the caller skips what needed them).
#
# Each node declares two "GPUs" whose device files are copies of /dev/null, so that the shipped
# batch scripts' --gpus-per-node is honoured by nodes that have no GPU; the tests train on the
# CPU.

slurm_pids=()
slurm_dir=""
slurm_hosts=0
slurm_netns=()
slurm_bridge=""

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

# Makes the bridge and one namespace per host; prints nothing and returns 1 if not allowed.
slurm_make_hosts() {
  local count=$1 tag=$2 subnet=$3 i ns
  slurm_bridge=ttbr$tag
  ip link add "$slurm_bridge" type bridge 2>/dev/null || return 1
  ip addr add "$subnet.1/24" dev "$slurm_bridge" && ip link set "$slurm_bridge" up || return 1
  for ((i = 1; i <= count; i++)); do
    ns=tt$tag-node$i
    ip netns add "$ns" || return 1
    slurm_netns+=("$ns")
    ip link add "tt${tag}v$i" type veth peer name eth0 netns "$ns" &&
      ip link set "tt${tag}v$i" master "$slurm_bridge" up &&
      ip -n "$ns" addr add "$subnet.$((10 + i))/24" dev eth0 &&
      ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
  done
}

slurm_start() {
  local dir=$1 hosts=${2:-0} node tag subnet controller_addr=127.0.0.1 i
  slurm_dir=$dir
  node=$(hostname -s)
  mkdir -p "$dir"/{munge,state,spool,log,dev}
  chmod 700 "$dir/munge"

  if ((hosts > 0)); then
    tag=$((RANDOM % 10000))
    subnet=10.213.$((RANDOM % 250))
    if slurm_make_hosts "$hosts" "$tag" "$subnet"; then
      slurm_hosts=$hosts
      controller_addr=$subnet.1  # reachable from the namespaces and from this machine
    else
      echo "private_slurm: cannot make network namespaces here (needs CAP_NET_ADMIN); no partition 'hosts'"
      slurm_remove_hosts
    fi
  fi

  # munge: a fresh key and a socket of our own (Slurm is pointed at it by AuthInfo). A Unix
  # socket is a file, so the nodes in other network namespaces reach it too.
  head -c 128 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  slurm_wait_for 10 "munged's pid file" test -s "$dir/munge/munged.pid" || return 1
  slurm_pids+=("$(cat "$dir/munge/munged.pid")")

  mknod "$dir/dev/gpu0" c 1 3
  mknod "$dir/dev/gpu1" c 1 3
  echo "Name=gpu File=$dir/dev/gpu[0-1]" >"$dir/gres.conf"

  local cpus
  cpus=$(nproc)
  {
    cat <<EOF
ClusterName=titantest
SlurmctldHost=$node($controller_addr)
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
# Each node's scratch (PMIx keeps per-step folders there, named alike on every node), where a
# real node has its own /tmp.
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
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
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    if ((slurm_hosts > 0)); then
      echo "NodeName=tnode[1-$slurm_hosts] NodeAddr=$subnet.1[1-$slurm_hosts] CPUs=$cpus RealMemory=1000 Gres=gpu:2 State=UNKNOWN"
      echo "PartitionName=hosts Nodes=tnode[1-$slurm_hosts] MaxTime=INFINITE State=UP"
    fi
  } >"$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf

  slurmctld -i -f "$SLURM_CONF"
  slurm_wait_for 20 "slurmctld's pid file" test -s "$dir/slurmctld.pid" || return 1
  slurm_pids+=("$(cat "$dir/slurmctld.pid")")
  slurm_start_slurmd "$node" || return 1
  for ((i = 1; i <= slurm_hosts; i++)); do
    # As on another host: its own network and its own hostname (slurmd finds its node by it).
    # nsenter rather than `ip netns exec`, which remounts /sys and hides slurmd's cgroups.
    slurm_start_slurmd "tnode$i" nsenter --net="/run/netns/${slurm_netns[i - 1]}" \
      unshare --uts sh -c "hostname tnode$i && exec \"\$0\" \"\$@\"" || return 1
  done

  if ! slurm_wait_for 60 "every node becoming idle" slurm_nodes_idle; then
    sinfo -N -l >&2 || true
    tail -n 20 "$dir"/log/*.log >&2
    return 1
  fi
}

# slurm_start_slurmd NODE [PREFIX...]: starts slurmd for NODE, under PREFIX (a namespace).
slurm_start_slurmd() {
  local node=$1
  shift
  mkdir -p "$slurm_dir/spool/$node" "$slurm_dir/tmp/$node"
  "$@" slurmd -f "$SLURM_CONF" || return 1
  slurm_wait_for 20 "slurmd's pid file for $node" test -s "$slurm_dir/slurmd-$node.pid" || return 1
  slurm_pids+=("$(cat "$slurm_dir/slurmd-$node.pid")")
}

slurm_nodes_idle() {
  ! sinfo -h -N -o %t | grep -vqx idle
}

slurm_remove_hosts() {
  local ns
  for ns in "${slurm_netns[@]}"; do ip netns delete "$ns" 2>/dev/null; done
  [[ -n $slurm_bridge ]] && ip link delete "$slurm_bridge" 2>/dev/null
  slurm_netns=()
  slurm_bridge=""
  return 0
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
  slurm_remove_hosts
}
