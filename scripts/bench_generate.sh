#!/usr/bin/env bash
# Decode speed on the CPU: titan_generate against an eager PyTorch decode loop with a KV cache
# (scripts/bench_generate_torch.py, which uses none of this project's code), on the same weights,
# the same prompt and the same number of greedy tokens, one process at a time, with 1 and then 2
# threads (OPENBLAS_NUM_THREADS for titan_generate, torch.set_num_threads for PyTorch). Or, with
# --cuda-graph, decode speed on the GPU: titan_generate --device cuda at batch 1 with the decode
# step launched kernel by kernel (--cuda-graph off) and replayed as one CUDA graph (on).
#
#   scripts/bench_generate.sh [STEP_FOLDER] [NEW_TOKENS] [REPEATS]
#   scripts/bench_generate.sh --cuda-graph [MODEL] [NEW_TOKENS] [REPEATS]
#
# STEP_FOLDER: a titan_train step folder of the model to time (default: the Quickstart's
# outputs/quickstart_checkpoint, or, when there is none, the debug model trained for 2 steps
# here). The step is exported with titan_convert for PyTorch. Each side runs REPEATS times
# (default 3) and its fastest run counts. Prints a table of seconds per decoded token and checks
# that both sides generated the same tokens. Needs Debian's python3-torch.
#
# --cuda-graph: MODEL is a step folder or a Hugging Face folder (default as above; give the
# 8B-shaped model's folder for the figure docs/generation.md#cuda-graph compares with), run in
# bf16 on the first GPU; prints one line of ms per decoded token without and with the graph, the
# speed-up, and whether both generated the same tokens (they must: the graph replays the same
# kernels). Needs no PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
python=${PYTHON:-/usr/bin/python3}  # Debian's, which python3-torch installs into
graph=false
if [[ ${1:-} == --cuda-graph ]]; then
  graph=true
  shift
fi
step=${1:-}
new_tokens=${2:-200}
repeats=${3:-3}
prompt="In the beginning God created"
work=$(mktemp -d /tmp/bench_generate.XXXXXX)
trap 'rm -rf "$work"' EXIT

for binary in titan_train titan_convert titan_generate; do
  [[ -x $build/$binary ]] || { echo "bench_generate.sh: no $build/$binary; run scripts/build.sh" >&2; exit 2; }
done
$graph || "$python" -c 'import torch' 2>/dev/null ||
  { echo "bench_generate.sh: PyTorch is missing; scripts/setup.sh --tests installs python3-torch" >&2; exit 2; }

if [[ -z $step ]]; then
  step=outputs/quickstart_checkpoint
  if [[ ! -d $step ]]; then
    OPENBLAS_NUM_THREADS=2 "$build/titan_train" --config configs/debug_model.yaml --training.steps 2 \
      --checkpoint.enable true --job.dump_folder "$work/job" >/dev/null
    step=$work/job/checkpoint
  fi
fi

# The fastest of `repeats` runs of titan_generate ARGS... at batch 1:
# "seconds-per-token prompt-ids completion-ids".
fastest_decode() {
  local best="" best_ids="" run seconds prompt_ids ids
  for ((r = 0; r < repeats; ++r)); do
    "$build/titan_generate" --model "$step" --prompt "$prompt" --max-new-tokens "$new_tokens" \
      --batch-size 1 --jsonl "$work/out.jsonl" "$@" >/dev/null 2>"$work/err.txt" ||
      { cat "$work/err.txt" >&2; exit 1; }
    run=$("$python" -c 'import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["finish_reason"] == "length", r["finish_reason"]
print(r["decode_seconds"] / (r["completion_tokens"] - 1), ",".join(map(str, r["prompt_ids"])),
      ",".join(map(str, r["completion_ids"])))' "$work/out.jsonl")
    read -r seconds prompt_ids ids <<<"$run"
    if [[ -z $best ]] || "$python" -c "import sys; sys.exit(0 if $seconds < $best else 1)"; then
      best=$seconds
      best_ids="$prompt_ids $ids"
    fi
  done
  echo "$best $best_ids"
}

if $graph; then
  read -r eager _ eager_ids <<<"$(fastest_decode --device cuda --dtype bf16 --cuda-graph off)"
  [[ -n $eager ]] || exit 1  # titan_generate's error is above
  read -r replayed _ graph_ids <<<"$(fastest_decode --device cuda --dtype bf16 --cuda-graph on)"
  [[ -n $replayed ]] || exit 1
  "$python" -c 'import sys
eager, graph, same = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == sys.argv[4]
print(f"decode at batch 1 on cuda, bf16, {sys.argv[5]} greedy tokens, fastest of {sys.argv[6]}: "
      f"{eager * 1e3:.3f} ms/token eager, {graph * 1e3:.3f} ms/token with the CUDA graph, "
      f"{eager / graph:.2f}x; " + ("the same tokens" if same else "THE TOKENS DIFFER"))
sys.exit(0 if same else 1)' "$eager" "$replayed" "$eager_ids" "$graph_ids" "$new_tokens" "$repeats"
  exit
fi

"$build/titan_convert" --checkpoint "$step" --to-hf "$work/hf" >/dev/null

echo "decode of $new_tokens greedy tokens after '$prompt', batch 1, f32; fastest of $repeats runs"
printf '%-8s %-26s %-26s %s\n' threads "titan_generate ms/token" "PyTorch ms/token" "speed-up"
for threads in 1 2; do
  read -r best prompt_ids ids <<<"$(OPENBLAS_NUM_THREADS=$threads fastest_decode)"
  torch_run=$("$python" scripts/bench_generate_torch.py "$work/hf" --prompt-ids "$prompt_ids" \
    --new-tokens "$new_tokens" --threads "$threads" --repeats "$repeats")
  "$python" -c 'import json, sys
ours, threads, ids = float(sys.argv[1]), sys.argv[2], sys.argv[3]
torch_run = json.loads(sys.argv[4])
theirs = torch_run["seconds_per_token"]
same = ",".join(map(str, torch_run["ids"])) == ids
note = "" if same else "   (the generated tokens differ)"
print(f"{threads:<8} {ours * 1e3:<26.3f} {theirs * 1e3:<26.3f} {theirs / ours:.2f}x{note}")' "$best" "$threads" "$ids" "$torch_run"
done
