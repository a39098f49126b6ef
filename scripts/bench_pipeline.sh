#!/usr/bin/env bash
# What each pipeline schedule costs on this machine: the debug model on pp 2 (one rank per
# core of a 2-core machine), every schedule on the same batch, alternating round by round.
# Prints, per schedule and averaged over the rounds and the steps after the first, the measured
# bubble in the simulator's terms (the metrics' pp_bubble: the ranks' idle share of the slowest
# rank's pipeline time), each pp rank's own share (pp_bubble_r<R>: the part of its pipeline time
# it waited on a message), pp_wait_ms and step_ms, beside the simulator's bubble of the same
# list at the papers' costs (--print-pipeline-schedule: F 1, B 2, I 1, W 1), at the costs the
# run measured (titan_train's last "pipeline:" line: the mean F, B, I and W of one stage on one
# microbatch) and with each action's own measured time (the same line: the run replayed). Then,
# for each two schedules next to each other in the simulator's order at the measured costs, in
# how many rounds the measured bubble put them in the same order. The figures of
# docs/pipeline.md.
#
#   scripts/bench_pipeline.sh [ROUNDS] [STEPS] [MICROBATCHES]
#
# Defaults: 3 rounds of 6 steps, 8 microbatches of 1 sequence of 128 tokens. BUILD_DIR picks
# the tree (default build). The stages are balanced so that the bubble measured is the
# schedule's, not the split's: the vocabulary is the byte tokenizer's 258 (the output layer then
# costs a twelfth of a block, not half of one), the model has 8 layers, and the embedding and
# the output count as no layers, so every stage holds the same number of blocks: 4 with one
# stage per rank, 2 with two.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-3}
steps=${2:-6}
microbatches=${3:-8}
build=${BUILD_DIR:-build}
cmake --build "$build" --target titan_train >/dev/null
work=$build/bench_pipeline
rm -rf "$work"
mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1

launcher=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
common=(--config configs/debug_model.yaml --model.vocab_size 258 --model.n_layers 8
        --training.seq_len "${SEQ_LEN:-128}"
        --parallelism.pipeline_parallel_first_stage_less_layers 0
        --parallelism.pipeline_parallel_last_stage_less_layers 0 --training.steps "$steps"
        --training.local_batch_size "$microbatches" --parallelism.pipeline_parallel_degree 2
        --parallelism.pipeline_parallel_microbatch_size 1 --metrics.log_freq 1)
schedules=(GPipe 1F1B Interleaved1F1B InterleavedZeroBubble ZBVZeroBubble)

# mean KEY FILE: the mean of KEY over the jsonl lines after the first step.
mean() {
  sed -n "s/.*\"step\": \([0-9]*\).*\"$1\": \([0-9.e+-]*\).*/\1 \2/p" "$2" |
    awk '$1 > 1 { s += $2; n += 1 } END { if (n) printf "%.4f", s / n; else print "nan" }'
}

declare -A sums rounds_measured
for ((r = 1; r <= rounds; ++r)); do
  for s in "${schedules[@]}"; do
    jsonl="$work/$s.$r.jsonl"
    "${launcher[@]}" "$build/titan_train" "${common[@]}" --parallelism.pipeline_parallel_schedule "$s" \
      --metrics.jsonl "$jsonl" --job.dump_folder "$work" >"$work/$s.$r.log" 2>&1
    for key in pp_bubble pp_bubble_r0 pp_bubble_r1 pp_wait_ms step_ms; do
      sums[$s.$key]=$(awk -v a="${sums[$s.$key]:-0}" -v b="$(mean "$key" "$jsonl")" 'BEGIN { print a + b }')
    done
    rounds_measured[$s.$r]=$(mean pp_bubble "$jsonl")
    costed=$(sed -n 's/.*the schedule idles \([0-9.]*\) of the time.*/\1/p' "$work/$s.$r.log" | tail -1)
    sums[$s.costed]=$(awk -v a="${sums[$s.costed]:-0}" -v b="${costed:-nan}" 'BEGIN { print a + b }')
    own=$(sed -n "s/.*with each action's own time \([0-9.]*\);.*/\1/p" "$work/$s.$r.log" | tail -1)
    sums[$s.own]=$(awk -v a="${sums[$s.own]:-0}" -v b="${own:-nan}" 'BEGIN { print a + b }')
    sed -n 's/.*pipeline: one stage on one microbatch took \(.*\) (mean.*/\1/p' "$work/$s.$r.log" |
      tail -1 | sed "s/^/  $s round $r: /"
  done
done

printf '%-22s %10s %10s %10s %10s %10s %10s %12s %10s\n' schedule simulated at_costs at_own \
  measured r0_own r1_own pp_wait_ms step_ms
for s in "${schedules[@]}"; do
  simulated=$("$build/titan_train" "${common[@]}" --parallelism.pipeline_parallel_schedule "$s" \
                --print-pipeline-schedule | sed -n 's/^makespan [0-9]*, bubble \([0-9.]*\).*/\1/p')
  printf '%-22s %10s' "$s" "$simulated"
  for key in costed own pp_bubble pp_bubble_r0 pp_bubble_r1 pp_wait_ms step_ms; do
    printf ' %10.3f' "$(awk -v a="${sums[$s.$key]}" -v r="$rounds" 'BEGIN { print a / r }')"
  done
  echo
done

# The simulator's order at the measured costs, and round by round whether the measured bubbles
# keep it. Schedules the simulator ties (within 0.005) are reported as a tie.
echo
mapfile -t order < <(for s in "${schedules[@]}"; do
  awk -v s="$s" -v a="${sums[$s.costed]}" -v r="$rounds" 'BEGIN { printf "%.6f %s\n", a / r, s }'
done | sort -n | cut -d' ' -f2)
for ((k = 0; k + 1 < ${#order[@]}; ++k)); do
  low=${order[k]} high=${order[k + 1]}
  gap=$(awk -v a="${sums[$low.costed]}" -v b="${sums[$high.costed]}" -v r="$rounds" \
          'BEGIN { printf "%.3f", (b - a) / r }')
  kept=0
  for ((r = 1; r <= rounds; ++r)); do
    if awk -v a="${rounds_measured[$low.$r]}" -v b="${rounds_measured[$high.$r]}" \
         'BEGIN { exit !(a < b) }'; then kept=$((kept + 1)); fi
  done
  if awk -v g="$gap" 'BEGIN { exit !(g < 0.005) }'; then
    echo "$low and $high: the simulator ties them ($gap); measured lower in $kept of $rounds rounds"
  else
    echo "$low below $high by $gap simulated: measured below in $kept of $rounds rounds"
  fi
done

