#!/usr/bin/env bash
# Rewrites test/golden/debug_model_loss.txt: the loss of the first 20 steps of the debug model on
# the King James Bible at seed 0 (configs/debug_model.yaml). Run it only when a change is meant
# to change the numbers (a new init, a fixed op), and say why in the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
jsonl=$(mktemp)
build/titan_train --config configs/debug_model.yaml --training.steps 20 --metrics.log_freq 1 \
  --metrics.jsonl "$jsonl" >/dev/null
{
  echo "# step loss -- debug model, configs/debug_model.yaml, 20 steps, seed 0, corpus/kjv.txt"
  echo "# written by scripts/update_golden.sh; checked by test_app (golden loss) to 1e-4 relative"
  sed -E 's/.*"step": ([0-9]+), "loss": ([-0-9.e+]+).*/\1 \2/' "$jsonl"
} > test/golden/debug_model_loss.txt
rm -f "$jsonl"
cat test/golden/debug_model_loss.txt
