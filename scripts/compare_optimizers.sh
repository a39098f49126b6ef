#!/usr/bin/env bash
# AdamW against Muon on the Quickstart's job (the debug model on the King James Bible), each at
# three learning rates: STEPS steps per run, one rank, seed 0, every step's loss kept. Prints a
# table of each run's loss at a few steps and the mean over its last 20 (the batches are new at
# every step, so the training loss is a held-out estimate), and leaves the curves in
# build-cpu/compare_optimizers/<optimizer>_<lr>.jsonl for plotting. The figures of
# docs/optimizers.md.
#
#   scripts/compare_optimizers.sh [STEPS] [BUILD_DIR]
#
# Defaults: 300 steps, build/. Learning rates: ADAMW_LRS and MUON_LRS (space-separated).
set -euo pipefail
cd "$(dirname "$0")/.."

steps=${1:-300}
build=${2:-build}
adamw_lrs=${ADAMW_LRS:-4e-4 8e-4 1.6e-3}
muon_lrs=${MUON_LRS:-1.6e-3 3.2e-3 6.4e-3}
cmake --build "$build" --target titan_train >/dev/null
work=$build/compare_optimizers
mkdir -p "$work"

run() {
  local optimizer=$1 lr=$2
  local jsonl=$work/${optimizer}_${lr}.jsonl
  "$build/titan_train" --config configs/debug_model.yaml --training.steps "$steps" \
    --optimizer.name "$optimizer" --optimizer.lr "$lr" --metrics.log_freq 1 \
    --metrics.jsonl "$jsonl" --job.dump_folder "$work/dump" > "$work/${optimizer}_${lr}.log" 2>&1
  python3 - "$optimizer" "$lr" "$jsonl" "$work/${optimizer}_${lr}.log" <<'PY'
import json, re, sys
optimizer, lr, path, log = sys.argv[1:]
losses = [json.loads(line)["loss"] for line in open(path)]
at = lambda step: f"{losses[step - 1]:.4f}" if step <= len(losses) else "-"
tail = sum(losses[-20:]) / len(losses[-20:])
step_ms = re.findall(r"step +([0-9.]+) ms", open(log).read())
ms = step_ms[-1] if step_ms else "-"
print(f"| {optimizer} | {lr} | {at(50)} | {at(100)} | {at(200)} | {at(len(losses))} | {tail:.4f} | {ms} |")
PY
}

echo "| optimizer | lr | loss at 50 | 100 | 200 | last | mean of the last 20 | last step ms |"
echo "|---|---|---|---|---|---|---|---|"
for lr in $adamw_lrs; do run AdamW "$lr"; done
for lr in $muon_lrs; do run Muon "$lr"; done
