#!/usr/bin/env bash
# The CPU path's speed in one run, on the debug model (configs/debug_model.yaml: B 4, S 256):
#
#   1. titan_train's GEMM rate (its closing line) beside titan_bench_cpu's standalone rate on
#      the same GEMM shapes through the same OpenBLAS core, and their ratio;
#   2. titan_train's step time beside Debian's PyTorch training the same model on the same
#      bytes (scripts/bench_cpu_torch.py, python3-torch), and their ratio in tokens/s;
#   3. with BASELINE=path/to/another/titan_train, that binary's step time beside this one's
#      (e.g. one built from an older commit: `git worktree add /tmp/old COMMIT`, build it there).
#
#   scripts/bench_cpu.sh [STEPS]        STEPS of titan_train and of PyTorch (default 20)
#
# Each figure is the median over the steps after the first. Timings on a shared machine move
# with its load: the script prints the load average beside them, and the ratios within one run
# are what to read. Nothing is set for OpenBLAS here: each program runs as a user would run it.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
build=${BUILD_DIR:-build}
[[ -x $build/titan_train && -x $build/titan_bench_cpu ]] || scripts/build.sh >/dev/null
[[ -f corpus/kjv.txt ]] || scripts/setup.sh >/dev/null
work=$(mktemp -d /tmp/bench_cpu.XXXXXX)
trap 'rm -rf "$work"' EXIT

# train BINARY NAME: STEPS steps of the debug model; the metrics JSON lines in $work/NAME.jsonl.
train() {
  "$1" --config configs/debug_model.yaml --training.steps "$steps" --metrics.log_freq 1 \
    --metrics.jsonl "$work/$2.jsonl" --job.dump_folder "$work/$2" >"$work/$2.log" 2>&1
}
# median_step_ms NAME: the median step time after the first.
median_step_ms() {
  python3 - "$work/$1.jsonl" <<'PY'
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r and r["step"] > 1]
print(f"{statistics.median(ms):.1f}")
PY
}

echo "# bench_cpu.sh on $(hostname), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, commit $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

train "$build/titan_train" titan
titan_ms=$(median_step_ms titan)
gemm_line=$(grep -o 'GEMMs took .*' "$work/titan.log")
train_rate=$(grep -oE '[0-9.]+ GFLOP/s' <<<"$gemm_line" | grep -oE '^[0-9.]+')
threads=$(grep -oE '[0-9]+ GEMM threads? each' "$work/titan.log" | grep -oE '^[0-9]+')
"$build/titan_bench_cpu" --threads "$threads" >"$work/bench.txt"
bench_rate=$(awk '$1 == "all" {print $(NF-1)}' "$work/bench.txt")
head -1 "$work/bench.txt" | sed 's/^/# /'
printf 'titan_train: %s ms a step (median of steps 2..%s), %s\n' "$titan_ms" "$steps" "$gemm_line"
printf 'titan_bench_cpu, the same GEMMs alone on %s thread(s): %s GFLOP/s\n' "$threads" "$bench_rate"
python3 -c "print(f'GEMM rate in titan_train / standalone: {$train_rate / $bench_rate:.2f}')"

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 scripts/bench_cpu_torch.py corpus/kjv.txt --steps "$steps" --threads "$(nproc)" \
    >"$work/torch.txt"
  torch_ms=$(awk '$1 == "step_ms" {print $2}' "$work/torch.txt")
  printf 'PyTorch %s (eager, f32): %s ms a step\n' \
    "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')" "$torch_ms"
  python3 -c "print(f'titan_train / PyTorch, tokens per second: {$torch_ms / $titan_ms:.2f}')"
else
  echo "PyTorch: not installed (scripts/setup.sh --tests installs python3-torch); skipped"
fi

if [[ -n ${BASELINE:-} ]]; then
  train "$BASELINE" baseline
  base_ms=$(median_step_ms baseline)
  printf 'baseline %s: %s ms a step\n' "$BASELINE" "$base_ms"
  python3 -c "print(f'this titan_train / the baseline, speed: {$base_ms / $titan_ms:.2f}')"
fi
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
