#!/usr/bin/env bash
# Chaos test: trains with a checkpoint every step on RANKS ranks and, ROUNDS times at
# a random moment, kills a random rank with SIGKILL or stops it with SIGSTOP, then starts the job
# again. It checks that
#   - every faulted job ends within parallelism.comm_timeout_s + 10 s (a stopped rank is found
#     by the MPI watchdog; a killed one by mpirun),
#   - every restart resumes from the newest complete checkpoint (the newest step-N folder holding
#     metadata.json, found here without titan_train's reader),
#   - the losses of every step ever logged, over all restarts and the final run to the end,
#     equal an uninterrupted run's on the same mesh bit for bit.
#
#   scripts/chaos.sh [--ranks 4] [--rounds 20] [--timeout 5] [--steps 200] [--seed 18]
#                    [--out build/chaos] [--binary build/titan_train]
#
# The random moment of a round is uniform within the first 8 steps the job trains after it
# reports where it resumed from, counted in the steps it logs (and the fraction of a step in the
# uninterrupted run's step time), so that every round trains as many steps on a slow machine as
# on a fast one and 20 rounds never reach the end of the run. Exits 0 when every check holds.
# The system tier runs it through test/system/test_chaos.sh: 6 rounds in CI, 20 in the matrix tier.
set -euo pipefail
cd "$(dirname "$0")/.."

ranks=4 rounds=20 timeout=5 steps=200 seed=18 out=build/chaos binary=build/titan_train
while (($#)); do
  case $1 in
    --ranks) ranks=$2 ;;
    --rounds) rounds=$2 ;;
    --timeout) timeout=$2 ;;
    --steps) steps=$2 ;;
    --seed) seed=$2 ;;
    --out) out=$2 ;;
    --binary) binary=$2 ;;
    *) echo "chaos: unknown argument '$1'; see the top of $0" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -x $binary ]] || { echo "chaos: no binary at $binary; build first (scripts/build.sh)" >&2; exit 2; }
RANDOM=$seed

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
launcher=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks")
# A small model (1M parameters) so that a checkpoint every step costs little; tp 2 puts every
# rank in a tensor-parallel pair and an FSDP group, so any stopped rank holds others up.
train_args=(--config configs/debug_model.yaml --model.dim 128 --model.n_layers 2
            --model.n_heads 8 --model.n_kv_heads 8 --model.ffn_dim 384
            --training.seq_len 64 --training.local_batch_size 2 --training.steps "$steps"
            --metrics.log_freq 1 --parallelism.tp 2 --parallelism.comm_timeout_s "$timeout")
checkpoint_args=(--checkpoint.enable true --checkpoint.interval 1 --checkpoint.keep_latest_k 3
                 --job.dump_folder "$out/run")

now() { date +%s.%N; }
seconds_since() { echo "$(now) - $1" | bc; }

# The newest complete checkpoint: the highest step-N holding metadata.json, or none.
newest_complete() {
  local newest="" dir n
  for dir in "$out"/run/checkpoint/step-*; do
    [[ -f $dir/metadata.json ]] || continue
    n=${dir##*/step-}
    [[ $n =~ ^[0-9]+$ ]] || continue
    if [[ -z $newest ]] || ((n > newest)); then newest=$n; fi
  done
  echo "$newest"
}

# The line a run prints where its set-up ends, given the newest complete checkpoint ($1, or
# empty for none).
resume_line() {
  if [[ -n $1 ]]; then echo "checkpoint: resumed from $out/run/checkpoint/step-$1 "; else echo "checkpoint: none saved"; fi
}

# The last step a run logged in $1 (empty before its first step ends).
last_logged_step() {
  { grep -o "step *[0-9]*/" "$1" 2>/dev/null || true; } | tail -1 | tr -dc 0-9
}

# The pid of world rank $2 among the titan_train processes of session $1.
rank_pid() {
  local pid
  for pid in $(ps -e -o pid=,sid=,comm= | awk -v s="$1" '$2 == s && $3 == "titan_train" {print $1}'); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$pid"
      return
    fi
  done
}

kill_session() {
  local pid
  for pid in $(ps -e -o pid=,sid= | awk -v s="$1" '$2 == s {print $1}'); do kill -KILL "$pid" 2>/dev/null || true; done
}

echo "chaos: $ranks ranks (mesh 1 × $((ranks / 2)) × 2), $rounds faults, comm_timeout_s $timeout, $steps steps, seed $seed"

# 1. The uninterrupted run: the losses every restart must reproduce, and the step time.
start=$(now)
"${launcher[@]}" "$binary" "${train_args[@]}" --metrics.jsonl "$out/reference.jsonl" \
  > "$out/reference.out" 2> "$out/reference.err" || {
  echo "chaos: FAILED: the uninterrupted run failed (see $out/reference.err)"; exit 1; }
step_s=$(python3 -c "
import json, sys
lines = [json.loads(l) for l in open('$out/reference.jsonl')]
print(sum(l['step_ms'] for l in lines[1:]) / (len(lines) - 1) / 1000)")
echo "chaos: uninterrupted run: $steps steps in $(printf %.1f "$(seconds_since "$start")") s, $(printf %.0f "$(echo "$step_s * 1000" | bc)") ms a step"

# 2. The faults.
failures=0
fail() { echo "chaos: FAILED: $*"; failures=$((failures + 1)); }
for round in $(seq 1 "$rounds"); do
  newest=$(newest_complete)
  mode=$([[ $((round % 2)) == 0 ]] && echo async || echo disabled)
  setsid "${launcher[@]}" "$binary" "${train_args[@]}" "${checkpoint_args[@]}" \
    --checkpoint.async_mode "$mode" --metrics.jsonl "$out/chaos.jsonl" \
    > "$out/round$round.out" 2> "$out/round$round.err" &
  job=$!
  # Set-up ends with the line saying where the run resumed from.
  expected=$(resume_line "$newest")
  for _ in $(seq 600); do
    grep -q "checkpoint: \(resumed from\|none saved\)" "$out/round$round.out" 2>/dev/null && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -qF "$expected" "$out/round$round.out"; then
    fail "round $round: expected '$expected' (see $out/round$round.out)"
    kill_session "$job"; wait "$job" 2>/dev/null || true
    continue
  fi
  # A random moment within the next 8 steps, a random rank, a random signal. RANDOM is read
  # here, in this shell: a command substitution is a subshell, and bash reseeds RANDOM in
  # every subshell, so a draw inside $(...) would not follow --seed.
  permille=$((RANDOM % 1000))
  victim=$((RANDOM % ranks))
  if ((RANDOM % 2 == 0)); then signal=KILL; else signal=STOP; fi
  # The moment, in steps after the resumed one: whole steps counted in the log (the first step
  # includes start-up work and a slow machine runs behind the reference run, so a wall-clock
  # delay alone would fault most rounds in their first step), then a fraction of a step.
  whole=$((permille * 8 / 1000))
  target=$((${newest:-0} + whole))
  for _ in $(seq 1200); do
    logged=$(last_logged_step "$out/round$round.out")
    ((whole == 0 || ${logged:-0} >= target)) && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.05
  done
  delay=$(echo "scale=3; ($permille * 8 % 1000) * $step_s / 1000" | bc)
  sleep "$delay"
  pid=$(rank_pid "$job" "$victim")
  if [[ -z $pid ]]; then
    fail "round $round: rank $victim was not running $delay s after step $target (see $out/round$round.err)"
    kill_session "$job"; wait "$job" 2>/dev/null || true
    continue
  fi
  # The last step logged (none yet when the fault comes before the first step ends).
  at_step=$(last_logged_step "$out/round$round.out")
  kill -"$signal" "$pid" 2>/dev/null || true  # a rank that just ended: the job ends anyway
  fault=$(now)
  # The job must end by itself within timeout + 10 s; a little longer, and it is a failure.
  limit=$(echo "$timeout + 10" | bc)
  ended=""
  while [[ $(echo "$(seconds_since "$fault") < $limit + 20" | bc) == 1 ]]; do
    if ! kill -0 "$job" 2>/dev/null; then ended=$(seconds_since "$fault"); break; fi
    sleep 0.05
  done
  code=0
  if [[ -z $ended ]]; then
    kill_session "$job"
    wait "$job" 2>/dev/null || true
    fail "round $round: SIG$signal to rank $victim at step ${at_step:-0}: the job did not end within $limit s"
    continue
  fi
  wait "$job" || code=$?
  kill_session "$job"  # nothing should be left; a stopped rank would be
  verdict=ok
  if [[ $(echo "$ended > $limit" | bc) == 1 ]]; then
    verdict="TOO SLOW"
    fail "round $round: the job ended $ended s after the fault, more than $limit s"
  fi
  printf 'chaos: round %2d: SIG%-4s to rank %d at step %3s (resumed from %s, %s save): ended in %5.1f s, exit %d: %s\n' \
    "$round" "$signal" "$victim" "${at_step:-0}" "${newest:-nothing}" "$mode" "$ended" "$code" "$verdict"
done

# 3. The last restart trains to the end.
newest=$(newest_complete)
if ! "${launcher[@]}" "$binary" "${train_args[@]}" "${checkpoint_args[@]}" \
    --metrics.jsonl "$out/chaos.jsonl" > "$out/final.out" 2> "$out/final.err"; then
  fail "the final run failed (see $out/final.err)"
elif ! grep -qF "$(resume_line "$newest")" "$out/final.out"; then
  fail "the final run did not print '$(resume_line "$newest")' (see $out/final.out)"
fi

# 4. Every loss ever logged equals the uninterrupted run's, bit for bit, and every step was trained.
python3 - "$out/reference.jsonl" "$out/chaos.jsonl" "$steps" <<'EOF' || failures=$((failures + 1))
import json, sys
reference = {}
for line in open(sys.argv[1]):
    record = json.loads(line)
    reference[record["step"]] = record["loss"]
seen, checked, torn, differ = set(), 0, 0, []
for line in open(sys.argv[2]):
    try:
        record = json.loads(line)
    except ValueError:
        torn += 1  # a line a killed rank 0 was writing
        continue
    step, loss = record["step"], record["loss"]
    seen.add(step)
    checked += 1
    if loss != reference.get(step):
        differ.append((step, loss, reference.get(step)))
missing = sorted(set(range(1, int(sys.argv[3]) + 1)) - seen)
print(f"chaos: {checked} logged losses over {len(seen)} steps ({checked - len(seen)} steps trained "
      f"again after a fault, {torn} torn lines), compared with the uninterrupted run: "
      f"{len(differ)} differ, {len(missing)} steps missing")
for step, loss, expected in differ[:10]:
    print(f"chaos: FAILED: step {step}: loss {loss!r}, uninterrupted {expected!r}")
if missing:
    print(f"chaos: FAILED: steps never logged: {missing[:20]}")
sys.exit(1 if differ or missing else 0)
EOF

if ((failures > 0)); then
  echo "chaos: FAILED: $failures check(s) failed; logs in $out"
  exit 1
fi
echo "chaos: passed: $rounds of $rounds faults ended their job in time and resumed from the newest complete checkpoint, and the losses equal the uninterrupted run's bit for bit"
