#!/usr/bin/env bash
# How long the compute stream stands waiting on context- and tensor-parallel transfers on a GPU:
# cp 2 with the ring against the all-gather, and tp 2 synchronous against async, each over NCCL,
# two ranks of titan_train sharing the machine's one GPU (a host id each, loopback sockets),
# rounds taken in turn. Prints, per run, the mean over steps 3–8 of cp_wait_ms or tp_wait_ms
# (the busiest rank's, read off CUDA events around each wait: core/wait_clock.h) and step_ms.
#
#   bash scripts/bench_comm_waits.sh BUNDLE_DIR OUT_DIR [ROUNDS]     # on the GPU machine
#
# BUNDLE_DIR is what scripts/bundle_gpu_binaries.sh made; OUT_DIR gets each run's log and
# metrics.jsonl. NCCL_NCHANNELS_PER_NET_PEER, when set, reaches every rank (NCCL's point-to-point
# transfers over sockets use fewer channels than its collectives unless told otherwise).
# SEQ_LENS (default "8192 32768") are the cp runs' sequence lengths; tp runs use the first.
set -uo pipefail
bundle=$(cd "${1:?usage: bench_comm_waits.sh BUNDLE_DIR OUT_DIR [ROUNDS]}" && pwd)
out=${2:?usage: bench_comm_waits.sh BUNDLE_DIR OUT_DIR [ROUNDS]}
rounds=${3:-2}
read -r -a seq_lens <<<"${SEQ_LENS:-8192 32768}"
[[ -f configs/debug_model.yaml && -f corpus/kjv.txt ]] || {
  echo "bench_comm_waits.sh: run it from the repository root, with corpus/kjv.txt (scripts/setup.sh, or carry corpus/)" >&2
  exit 2
}
mkdir -p "$out"
# shellcheck source=/dev/null
source "$bundle/env.sh"
nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], 'lib'))" 2>/dev/null || true)
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH${nccl_lib:+:$nccl_lib}:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/# /'

run() {  # TAG ARGS...: one titan_train run of 8 steps, then its line
  local tag=$1 rc
  shift
  timeout 120 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_SOCKET_IFNAME=lo \
    -x NCCL_IB_DISABLE=1 ${NCCL_NCHANNELS_PER_NET_PEER:+-x NCCL_NCHANNELS_PER_NET_PEER} \
    sh -c 'NCCL_HOSTID=titan-rank-$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$bundle/tree/titan_train" \
    --config configs/debug_model.yaml --training.device cuda --metrics.log_freq 1 \
    --training.steps 8 --training.local_batch_size 1 --training.global_batch_size 1 \
    --parallelism.comm_backend nccl "$@" --metrics.jsonl "$out/$tag.jsonl" >"$out/$tag.log" 2>&1
  rc=$?
  python3 - "$out/$tag.jsonl" "$tag" "$rc" <<'PY'
import json, math, sys
path, tag, rc = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if '"loss"' in l] if rc == "0" else []
rows = [r for r in rows if r["step"] >= 3]
if not rows:
    print(f"{tag}: exit {rc}, no steps logged"); sys.exit()
mean = lambda k: sum(r.get(k, math.nan) for r in rows) / len(rows)
wait = "cp_wait_ms" if "cp_wait_ms" in rows[0] else "tp_wait_ms"
print(f"{tag:28s} {wait} {mean(wait):8.2f}  step_ms {mean('step_ms'):8.2f}  loss {rows[-1]['loss']:.6f}")
PY
}

for ((round = 1; round <= rounds; ++round)); do
  for seq in "${seq_lens[@]}"; do
    for mode in ring allgather; do
      run "cp2_${mode}_s${seq}_r$round" --training.seq_len "$seq" \
        --parallelism.context_parallel_degree 2 --parallelism.context_parallel_comm "$mode"
    done
  done
  for async in false true; do
    run "tp2_async_${async}_s${seq_lens[0]}_r$round" --training.seq_len "${seq_lens[0]}" \
      --parallelism.tp 2 --parallelism.enable_async_tensor_parallel "$async"
  done
done
