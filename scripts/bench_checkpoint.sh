#!/usr/bin/env bash
# What a checkpoint save costs training, in each checkpoint.async_mode: the same run (a 27M-
# parameter model, so that a save writes 0.3 GB of weights and AdamW moments) trained without
# checkpoints, and with a save every INTERVAL steps in each mode, alternating round by round.
# A save's cost is (run time − run time without saves) / saves; the run time is titan_train's
# own "trained N steps in T s" (set-up and the final commit excluded). Also prints the time a
# save held the training thread ("saved … in", "staged … in") as the log reports it.
# The figures of docs/checkpoint.md.
#
#   scripts/bench_checkpoint.sh [ROUNDS] [STEPS] [INTERVAL] [RANKS]
#
# Defaults: 3 rounds of 30 steps, a save every 10 steps, 1 rank. RANKS > 1 runs under mpirun
# with FSDP over every rank (each writes its shard).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-3}
steps=${2:-30}
interval=${3:-10}
ranks=${4:-1}
cmake --build build --target titan_train >/dev/null
work=build/bench_checkpoint
rm -rf "$work"
mkdir -p "$work"

launcher=()
if ((ranks > 1)); then
  launcher=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks")
fi
model=(--model.dim 512 --model.n_layers 8 --model.n_heads 8 --model.n_kv_heads 8
       --model.ffn_dim 1536 --training.seq_len 128 --training.local_batch_size 2)

# run MODE ROUND: prints the training seconds and the mean blocking seconds of the saves.
run() {
  local mode=$1 round=$2 log="$work/$1.$2.log"
  local save=()
  if [[ $mode != none ]]; then
    save=(--checkpoint.enable true --checkpoint.interval "$interval" --checkpoint.keep_latest_k 2
          --checkpoint.async_mode "$mode" --checkpoint.folder "ckpt_${mode}_${round}")
  fi
  "${launcher[@]}" build/titan_train --config configs/debug_model.yaml "${model[@]}" \
    --training.steps "$steps" --metrics.log_freq 1000 --job.dump_folder "$work" "${save[@]}" \
    >"$log" 2>&1
  local trained blocking
  trained=$(sed -n 's/.*trained [0-9]* steps in \([0-9.]*\) s.*/\1/p' "$log")
  blocking=$(sed -n 's/.*checkpoint: \(saved\|step [0-9]* staged\).* in \([0-9.]*\) s.*/\2/p' "$log" |
             awk '{ s += $1; n += 1 } END { if (n) printf "%.3f", s / n; else print "-" }')
  echo "$trained $blocking"
}

modes=(none disabled async async_with_pinned_mem)
declare -A total
for ((r = 1; r <= rounds; ++r)); do
  for mode in "${modes[@]}"; do
    read -r seconds blocking < <(run "$mode" "$r")
    echo "round $r  $mode: trained in $seconds s, a save blocked training $blocking s"
    total[$mode]=$(awk -v a="${total[$mode]:-0}" -v b="$seconds" 'BEGIN { print a + b }')
  done
done
saves=$(( (steps + interval - 1) / interval ))
echo
echo "mean of $rounds rounds, $steps steps, $saves saves, $ranks rank(s), on $(nproc) cores:"
for mode in "${modes[@]}"; do
  awk -v t="${total[$mode]}" -v n="$rounds" -v base="${total[none]}" -v saves="$saves" -v m="$mode" \
    'BEGIN { mean = t / n; cost = (t - base) / n / saves;
             if (m == "none") printf "  %-22s %7.2f s\n", m, mean;
             else printf "  %-22s %7.2f s   %+.3f s per save\n", m, mean, cost }'
done
