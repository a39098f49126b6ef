#!/usr/bin/env bash
# The speed half of a GPU session, beside scripts/gpu_check.sh (the correctness half): on one GPU,
# in one lease, titan_train against the PyTorch peer on the same Llama 3 8B-shaped model, and the
# kernel benches whose figures the docs quote. Run from the repository root with the folder
# scripts/bundle_gpu_binaries.sh made (torch_peer.py copied into it, or TITAN_TORCH_PEER naming
# it):
#
#   bash scripts/gpu_speed.sh BUNDLE_DIR [RESULT_DIR]      # RESULT_DIR default docs/measurements
#
# In this order, each only while time is left (TITAN_GPU_SPEED_SECONDS, default 540: a command
# on a lent GPU is cut at 600):
#   1. titan_bench --only attention, then --only producer (every attention backend, the fused
#      FP8 producers)
#   2. docs/performance.md's 8B-shaped run (8 layers, S 8192, full AC, 12 steps): titan_train
#      bf16 on each attention backend the machine runs (native, auto), FP8 tensorwise on auto
#   3. torch_peer.py --compile, then --compile --fp8 (PyTorch 2.x, torch.compile per block)
#   4. titan_generate's decode with and without its CUDA graph (scripts/bench_generate.sh)
# and ends with one table: tokens/s of each run (titan_train: the median of steps 10–12) and its
# ratio to the compiled peer of the same precision. Every run's output goes to
# RESULT_DIR/gpu_speed_<device>_<date>.txt, the device, driver and commit at its head.
set -uo pipefail
bundle=$(cd "${1:?usage: gpu_speed.sh BUNDLE_DIR [RESULT_DIR]}" && pwd)
results=${2:-docs/measurements}
device=cuda
deadline=$((SECONDS + ${TITAN_GPU_SPEED_SECONDS:-540}))
peer=${TITAN_TORCH_PEER:-$bundle/torch_peer.py}
[[ -f configs/llama3_8b.yaml ]] || { echo "gpu_speed.sh: run it from the repository root (no configs/llama3_8b.yaml in $(pwd))" >&2; exit 2; }
[[ -f corpus/kjv.txt ]] || { echo "gpu_speed.sh: corpus/kjv.txt is missing; run scripts/setup.sh here, or carry corpus/ to this machine" >&2; exit 2; }
[[ -f $peer ]] || { echo "gpu_speed.sh: no PyTorch peer at $peer; copy ../shared/bench/torch_peer.py into the bundle or set TITAN_TORCH_PEER" >&2; exit 2; }
# shellcheck source=scripts/gpu_bundle_env.sh
source scripts/gpu_bundle_env.sh
tree=$bundle/tree

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
[[ -n $gpu ]] || { echo "gpu_speed.sh: nvidia-smi names no GPU; this script times a GPU" >&2; exit 2; }
tag=$(echo "$gpu" | grep -oiE 'h100|h200|a100|l40s|b200|gb200' | head -1 | tr 'A-Z' 'a-z')
mkdir -p "$results"
log=$(cd "$results" && pwd)/gpu_speed_${tag:-cuda}_$(date -u +%Y-%m-%d).txt
work=$(mktemp -d /tmp/gpu_speed.XXXXXX)
rows=()  # "name|tokens/s|precision" for the closing table

say() { echo "$*" | tee -a "$log"; }
time_left() { ((SECONDS + $1 < deadline)); }
# step NAME SECONDS COMMAND...: COMMAND under `timeout SECONDS` into the log, when that fits.
step() {
  local name=$1 limit=$2
  shift 2
  if ! time_left "$limit"; then say "## $name: skipped, $((deadline - SECONDS)) s left"; return 1; fi
  say "## $name"
  timeout "$limit" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  cat "$work/$name.out" "$work/$name.err" >>"$log"
  say "## $name: exit $rc"
  return $rc
}

say "# gpu_speed.sh at $(date -u '+%Y-%m-%d %H:%M UTC'), $gpu, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
say "# cuDNN: $(python3 -c "import importlib.metadata as m; print(m.version('nvidia-cudnn-cu13'))" 2>/dev/null || echo 'no nvidia-cudnn-cu13'); PyTorch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"

# 1. The kernel benches.
step bench_attention 120 "$tree/titan_bench" --only attention && tail -n 20 "$work/bench_attention.out"
step bench_producer 90 "$tree/titan_bench" --only producer && tail -n 12 "$work/bench_producer.out"

# 2. titan_train on the 8B-shaped run of docs/performance.md.
eight_b=(--config configs/llama3_8b.yaml --model.n_layers 8 --training.seq_len 8192
         --training.local_batch_size 1 --activation_checkpoint.mode full --training.device cuda
         --training.steps 12 --metrics.log_freq 1)
median_tps() {  # JSONL: the median tokens_per_s of steps 10-12
  python3 - "$1" <<'EOF'
import json, statistics, sys
values = [r["tokens_per_s"] for r in map(json.loads, open(sys.argv[1]))
          if "tokens_per_s" in r and r.get("step", 0) >= 10]
print(round(statistics.median(values)) if values else "none")
EOF
}
titan() {  # NAME PRECISION ARGS...
  local name=$1 precision=$2
  shift 2
  if step "$name" 150 "$tree/titan_train" "${eight_b[@]}" --metrics.jsonl "$work/$name.jsonl" "$@"; then
    rows+=("$name|$(median_tps "$work/$name.jsonl")|$precision")
  else
    rows+=("$name|failed: $(tail -n 1 "$work/$name.err")|$precision")
  fi
}
titan titan_bf16_native bf16 --model.attention_backend native
titan titan_bf16_auto bf16 --model.attention_backend auto
titan titan_fp8_tensorwise_auto fp8 --model.attention_backend auto --float8.enabled true \
  --float8.recipe tensorwise

# 3. The PyTorch peer, compiled, on the same model and step.
peer_row() {  # NAME PRECISION ARGS...
  local name=$1 precision=$2
  shift 2
  if step "$name" 240 python3 "$peer" "$@"; then
    rows+=("$name|$(python3 -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])["tokens_per_s"])' <"$work/$name.out")|$precision")
  else
    rows+=("$name|failed: $(tail -n 1 "$work/$name.err")|$precision")
  fi
}
peer_row peer_compile_bf16 bf16 --compile
peer_row peer_compile_fp8 fp8 --compile --fp8

# 4. Decode with and without the CUDA graph (the debug model unless TITAN_GENERATE_MODEL names
# the 8B-shaped folder).
step generate_graph 90 env BUILD_DIR="$tree" bash scripts/bench_generate.sh --cuda-graph \
  "${TITAN_GENERATE_MODEL:-}" 64 3 && tail -n 2 "$work/generate_graph.out"

# The table: each run against the compiled peer of its precision.
say ""
say "$(printf '%-28s %12s %10s' run tokens/s 'vs peer')"
for row in "${rows[@]}"; do
  IFS='|' read -r name tps precision <<<"$row"
  reference=
  for other in "${rows[@]}"; do
    IFS='|' read -r other_name other_tps other_precision <<<"$other"
    [[ $other_name == peer_compile_* && $other_precision == "$precision" ]] && reference=$other_tps
  done
  ratio=-
  if [[ $tps =~ ^[0-9]+$ && $reference =~ ^[0-9]+$ ]]; then
    ratio=$(python3 -c "print(f'{$tps / $reference:.3f}x')")
  fi
  say "$(printf '%-28s %12s %10s' "$name" "$tps" "$ratio")"
done
say "# the whole log: $log"
