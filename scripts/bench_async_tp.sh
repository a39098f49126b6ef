#!/usr/bin/env bash
# What async TP buys on this machine: the same tp 2 run on 2 ranks with synchronous and with
# async tensor parallelism, alternating round by round, at a sequence long enough for the GEMMs
# to dominate a step. Prints, per round and on average over the steps after the first, the
# metrics' tp_wait_ms (time a step sat waiting on tp communication that compute did not hide)
# and step_ms, and the async/sync ratios. The figures of docs/async_tp.md.
#
#   scripts/bench_async_tp.sh [ROUNDS] [STEPS] [SEQ_LEN]
#
# Defaults: 3 rounds of 8 steps at seq_len 1024. BUILD_DIR picks the tree (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-3}
steps=${2:-8}
seq_len=${3:-1024}
build=${BUILD_DIR:-build}
cmake --build "$build" --target titan_train >/dev/null
work=$build/bench_async_tp
rm -rf "$work"
mkdir -p "$work"

launcher=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
model=(--model.dim 512 --model.n_layers 4 --model.n_heads 8 --model.n_kv_heads 8
       --model.ffn_dim 1536 --training.seq_len "$seq_len" --training.local_batch_size 2
       --parallelism.dp_shard 1 --parallelism.tp 2)

# mean KEY FILE: the mean of KEY over the jsonl lines after the first step.
mean() {
  sed -n "s/.*\"step\": \([0-9]*\).*\"$1\": \([0-9.e+-]*\).*/\1 \2/p" "$2" |
    awk '$1 > 1 { s += $2; n += 1 } END { if (n) printf "%.2f", s / n; else print "nan" }'
}

run() {
  local mode=$1 round=$2 jsonl="$work/$1.$2.jsonl"
  "${launcher[@]}" "$build/titan_train" --config configs/debug_model.yaml "${model[@]}" \
    --training.steps "$steps" --metrics.log_freq 1 --metrics.jsonl "$jsonl" \
    --job.dump_folder "$work" --parallelism.enable_async_tensor_parallel "$mode" \
    >"$work/$mode.$round.log" 2>&1
  echo "$(mean tp_wait_ms "$jsonl") $(mean step_ms "$jsonl")"
}

declare -A wait_sum step_sum
for ((r = 1; r <= rounds; ++r)); do
  for mode in false true; do
    read -r wait step < <(run "$mode" "$r")
    label=$([[ $mode == true ]] && echo async || echo sync)
    echo "round $r  $label: tp_wait_ms $wait  step_ms $step"
    wait_sum[$mode]=$(awk -v a="${wait_sum[$mode]:-0}" -v b="$wait" 'BEGIN { print a + b }')
    step_sum[$mode]=$(awk -v a="${step_sum[$mode]:-0}" -v b="$step" 'BEGIN { print a + b }')
  done
done
awk -v r="$rounds" -v ws="${wait_sum[false]}" -v wa="${wait_sum[true]}" \
    -v ss="${step_sum[false]}" -v sa="${step_sum[true]}" 'BEGIN {
  printf "mean over %d rounds: sync tp_wait_ms %.1f step_ms %.1f | async tp_wait_ms %.1f step_ms %.1f\n",
         r, ws / r, ss / r, wa / r, sa / r
  printf "async/sync: tp_wait %.2f, step time %.3f\n", wa / ws, sa / ss
}'
