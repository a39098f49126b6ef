#!/usr/bin/env bash
# Runs, on a machine with an NVIDIA GPU, every `gpu` test and then titan_train's CUDA paths end
# to end, each against its CPU twin or its single-GPU run, and prints one line per check:
#
#   PASS  cp 2 ring over nccl against one cuda       worst 6.3e-05 over 20 steps  (bound 1e-2)
#
# From the repository root on that machine, with the folder scripts/bundle_gpu_binaries.sh
# made here (the machine needs the CUDA driver and toolkit, and NCCL from the nvidia-nccl-cu13
# pip package or on LD_LIBRARY_PATH; nothing else of Debian's):
#
#   bash scripts/gpu_check.sh .devcarry [RESULT_DIR]
#
# The lines and every run's output go to RESULT_DIR/gpu_check_<device>_<date>.txt (default
# docs/measurements; a second run of the day writes ..._2.txt, and so on). Several ranks share the one GPU: over the MPI backend, and over NCCL with
# a host id per rank (NCCL_HOSTID) so that NCCL accepts them and talks over loopback sockets.
#
# Bounds. One GPU against the CPU: bf16 compute over fp32 masters against fp32, 1e-2 relative per
# step (9.4e-4 measured on an H100, docs/cuda.md). Several ranks against one GPU: the same bf16
# arithmetic in other reduction orders, 1e-2. Async TP against synchronous TP on the same
# backend: the same GEMM chunks in the same order (docs/async_tp.md), so 1e-6.
#
# TITAN_GPU_CHECK_DEVICE=cpu runs the end-to-end half on the CPU, with MPI where NCCL would be:
# it checks this script on a machine without a GPU (the gpu tests then skip and count as FAIL).
# TITAN_GPU_CHECK_ONLY=REGEX runs only the checks whose names match it (ctest -R for the tests),
# to run again what failed; TITAN_GPU_CHECK_ONLY=cudnn runs the cuDNN attention backend's: the
# attention gpu tests (each runs native and cudnn), one GPU and cp 2 on cuDNN, the bench line.
# libcudnn comes from pip's nvidia-cudnn-cu13 (put on LD_LIBRARY_PATH here) unless
# TITAN_CUDNN_LIBRARY names one; cuDNN's own log (CUDNN_LOGLEVEL_DBG, default 2: warnings and
# errors; 3 for every call) ends the result file. TITAN_GPU_CHECK_SECONDS (default 480) is the time after which the
# checks left are not started and count as FAIL.
set -uo pipefail
bundle=$(cd "${1:?usage: gpu_check.sh BUNDLE_DIR [RESULT_DIR]}" && pwd)
results=${2:-docs/measurements}
device=${TITAN_GPU_CHECK_DEVICE:-cuda}
only=${TITAN_GPU_CHECK_ONLY:-}
deadline=$((SECONDS + ${TITAN_GPU_CHECK_SECONDS:-480}))
repo=$(pwd)
[[ -f configs/debug_model.yaml ]] || { echo "gpu_check.sh: run it from the repository root (no configs/debug_model.yaml in $repo)" >&2; exit 2; }
[[ -f corpus/kjv.txt ]] || { echo "gpu_check.sh: corpus/kjv.txt is missing; run scripts/setup.sh here, or carry corpus/ to this machine" >&2; exit 2; }
# shellcheck source=scripts/gpu_bundle_env.sh
source "$repo/scripts/gpu_bundle_env.sh"
titan_train=$bundle/tree/titan_train

gpu_name=cpu
if [[ $device == cuda ]]; then
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
fi
tag=$(echo "$gpu_name" | grep -oiE 'h100|h200|a100|l40s|b200|gb200' | head -1 | tr 'A-Z' 'a-z')
mkdir -p "$results"
log=$(cd "$results" && pwd)/gpu_check_${tag:-$device}_$(date -u +%Y-%m-%d)
n=1
while [[ -e $log$([[ $n -gt 1 ]] && echo "_$n").txt ]]; do n=$((n + 1)); done
log=$log$([[ $n -gt 1 ]] && echo "_$n").txt
work=$(mktemp -d /tmp/gpu_check.XXXXXX)
: >"$log"
# cuDNN's own log (warnings and errors; CUDNN_LOGLEVEL_DBG=3 for every call), one file a
# process, appended to the result file at the end: what cuDNN said when a graph was refused.
export CUDNN_LOGLEVEL_DBG=${CUDNN_LOGLEVEL_DBG:-2}
export CUDNN_LOGDEST_DBG=${CUDNN_LOGDEST_DBG:-$work/cudnn_log_%i.txt}
passed=0
failed=0

say() { echo "$*" | tee -a "$log"; }
report() {  # STATUS NAME FIGURE BOUND
  [[ $1 == PASS ]] && passed=$((passed + 1)) || failed=$((failed + 1))
  printf '%-4s  %-62s  %s  (bound %s)\n' "$1" "$2" "$3" "$4" | tee -a "$log"
}
out_of_time() { ((SECONDS >= deadline)); }
wanted() { [[ -z $only || $1 =~ $only ]]; }
# starts NAME: true when NAME is wanted and there is time; a wanted NAME without time is a FAIL.
starts() {
  wanted "$1" || return 1
  if out_of_time; then report FAIL "$1" "not run: out of time" "-"; return 1; fi
}

say "# gpu_check.sh on $(hostname) at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' with changes not committed')"
if [[ $device == cuda ]]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/# /' | tee -a "$log"
  say "# cuDNN: $(python3 -c "import importlib.metadata as m; print('nvidia-cudnn-cu13', m.version('nvidia-cudnn-cu13'))" 2>/dev/null || echo 'no nvidia-cudnn-cu13 pip package'), lib folder ${cudnn_lib:-none}; TITAN_CUDNN_LIBRARY=${TITAN_CUDNN_LIBRARY:-unset}"
fi

# --- 1. every gpu test, as ctest runs it here -------------------------------------------------
if out_of_time; then
  report FAIL "ctest -L gpu" "not run: out of time" "-"
else
  (cd "$TITAN_BUNDLE_BUILD_DIR" && timeout 240 ctest -L gpu ${only:+-R "$only"} -j 8 --timeout 200 --output-on-failure) \
    >"$work/ctest.log" 2>&1
  cat "$work/ctest.log" >>"$log"
  while IFS= read -r line; do
    name=$(sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: //; s/ *\.{2,}.*$//' <<<"$line")
    seconds=$(grep -oE '[0-9.]+ sec' <<<"$line")
    if grep -q ' Passed ' <<<"$line"; then report PASS "$name" "$seconds" "its own"
    else report FAIL "$name" "$(grep -oE '\*\*\*[A-Za-z]+|Not Run' <<<"$line" | head -1) $seconds" "its own"
    fi
  done < <(grep -E '^ *[0-9]+/[0-9]+ Test +#' "$work/ctest.log")
  grep -qE 'tests passed|No tests were found' "$work/ctest.log" ||
    report FAIL "ctest -L gpu" "no summary (timed out?)" "-"
fi

# --- 2. titan_train end to end ----------------------------------------------------------------
# shellcheck disable=SC2034  # read by the eval in train()
# Every run takes the CUDA paths no GPU has run yet (core/unverified_gpu_paths.h): checking them
# is what this script is for. The first check also runs the defaults a user's first run takes.
base=(--config configs/debug_model.yaml --metrics.log_freq 1 --training.device "$device"
      --experimental.unverified_gpu_paths all)
steps20=(--training.steps 20 --training.seq_len 128 --training.global_batch_size 8
         --training.local_batch_size 8)
nccl=nccl
[[ $device == cpu ]] && nccl=mpi
# --oversubscribe: more ranks than cores where the check runs on a small CPU machine.
mpi_launch() { echo "mpirun --bind-to none --oversubscribe -np $1"; }
nccl_launch() {
  echo "mpirun --bind-to none --oversubscribe -np $1 -x NCCL_SOCKET_IFNAME=lo -x NCCL_IB_DISABLE=1 sh -c 'NCCL_HOSTID=titan-rank-\$OMPI_COMM_WORLD_RANK exec \"\$0\" \"\$@\"'"
}

# logged NAME HEADER COMMAND...: COMMAND's output into $work/NAME.log and the result file,
# between "## NAME" lines; returns its status.
logged() {
  local name=$1 header=$2 rc
  shift 2
  {
    echo "## $name: $header"
    "$@" 2>&1
    rc=$?
    echo "## $name: exit $rc"
  } >"$work/$name.log" 2>&1
  # The output goes into the result file whatever the status (a `return` inside the group above
  # would leave the function before this line).
  cat "$work/$name.log" >>"$log"
  return $rc
}

train() {  # NAME LAUNCHER ARGS...: titan_train into $work/NAME.{jsonl,log}; returns its status
  local name=$1 launcher=$2
  shift 2
  # The launcher is a command line of its own (NCCL's wraps each rank in sh -c): eval'd.
  logged "$name" "$launcher titan_train $*" eval "timeout 120 $launcher \"$titan_train\" \
    $(printf '%q ' "${base[@]}" "$@") --metrics.jsonl \"$work/$name.jsonl\""
}

# compare RUN REF KEY BOUND [FIRST_RUN_STEP FIRST_REF_STEP]: the worst relative difference of
# KEY ("loss", "val_loss") over the steps both logged, every value finite.
compare() {
  python3 - "$work/$1.jsonl" "$work/$2.jsonl" "$3" "$4" <<'EOF'
import json, math, sys
run, ref, key, bound = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def values(path):
    out = {}
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if key in record:
                out[record["step"]] = record[key]
    return out
a, b = values(run), values(ref)
steps = sorted(set(a) & set(b))
if not steps:
    print(f"no common steps with {key}"); sys.exit(1)
worst = 0.0
for s in steps:
    if not (math.isfinite(a[s]) and math.isfinite(b[s])):
        print(f"step {s}: {key} {a[s]} vs {b[s]}"); sys.exit(1)
    worst = max(worst, abs(a[s] - b[s]) / abs(b[s]))
print(f"worst {worst:.1e} over {len(steps)} steps")
sys.exit(0 if worst <= bound else 1)
EOF
}

# check NAME RUN REF KEY BOUND: one line for a comparison whose runs both exist.
check() {
  local name=$1 run=$2 ref=$3 key=$4 bound=$5 figure
  if [[ ! -s $work/$run.jsonl || ! -s $work/$ref.jsonl ]]; then
    # Not `failed`: report() counts into the global of that name.
    local missing=$run
    [[ -s $work/$run.jsonl ]] && missing=$ref
    report FAIL "$name" "$missing failed: $(grep -v -e '^## ' -e '^$' "$work/$missing.log" 2>/dev/null | tail -n 1)" "$bound"
    return
  fi
  if figure=$(compare "$run" "$ref" "$key" "$bound"); then report PASS "$name" "$figure" "$bound"
  else report FAIL "$name" "$figure" "$bound"
  fi
}

# run_check NAME RUN REF KEY BOUND LAUNCHER ARGS...: train RUN, then check it against REF.
run_check() {
  local name=$1 run=$2 ref=$3 key=$4 bound=$5 launcher=$6
  shift 6
  wanted "$name" || return 0
  if out_of_time; then report FAIL "$name" "not run: out of time" "$bound"; return; fi
  # The one-device reference, when a selection (TITAN_GPU_CHECK_ONLY) left out its own check.
  if [[ $ref == one && ! -s $work/one.jsonl ]]; then train one "" "${steps20[@]}"; fi
  train "$run" "$launcher" "$@"
  check "$name" "$run" "$ref" "$key" "$bound"
}

if starts "the debug model on $device against the CPU, 20 steps"; then
  train one "" "${steps20[@]}"
  train cpu "" "${steps20[@]}" --training.device cpu
  check "the debug model on $device against the CPU, 20 steps" one cpu loss 1e-2
  train one_run_paths "" "${steps20[@]}" --experimental.unverified_gpu_paths '[]'
  check "the debug model on $device on paths a GPU has run, against the CPU" one_run_paths cpu \
    loss 1e-2
fi

# Context parallelism: the ring and the all-gather, over MPI and NCCL.
run_check "cp 2 ring over MPI against one $device" cp2_ring_mpi one loss 1e-2 "$(mpi_launch 2)" \
  "${steps20[@]}" --parallelism.comm_backend mpi --parallelism.context_parallel_degree 2
run_check "cp 2 ring over $nccl against one $device" cp2_ring_nccl one loss 1e-2 "$(nccl_launch 2)" \
  "${steps20[@]}" --parallelism.comm_backend $nccl --parallelism.context_parallel_degree 2
run_check "cp 2 allgather over $nccl against one $device" cp2_allgather_nccl one loss 1e-2 \
  "$(nccl_launch 2)" "${steps20[@]}" --parallelism.comm_backend $nccl \
  --parallelism.context_parallel_degree 2 --parallelism.context_parallel_comm allgather

# cuDNN's fused attention (model.attention_backend cudnn) end to end, on a model with Dh 64 and
# GQA (4 heads, 2 kv heads): one GPU against the CPU and against the native kernels, and context
# parallelism's ring and all-gather (cuDNN's causal, unmasked and causal-to-the-last-key blocks)
# against one GPU on cuDNN. Then each run's log must say cuDNN ran, and titan_bench times both.
dh64=(--model.n_heads 4 --model.n_kv_heads 2)
if [[ $device == cuda ]]; then
  if starts "cudnn: one $device against the CPU, 20 steps"; then
    train cudnn_cpu "" "${steps20[@]}" "${dh64[@]}" --training.device cpu
    train cudnn_native "" "${steps20[@]}" "${dh64[@]}" --model.attention_backend native
    train cudnn_one "" "${steps20[@]}" "${dh64[@]}" --model.attention_backend cudnn
    check "cudnn: one $device against the CPU, 20 steps" cudnn_one cudnn_cpu loss 1e-2
    check "cudnn: one $device against native on one $device, 20 steps" cudnn_one cudnn_native \
      loss 1e-2
  fi
  run_check "cudnn: cp 2 ring over $nccl against one $device on cudnn" cudnn_cp2_ring cudnn_one \
    loss 1e-2 "$(nccl_launch 2)" "${steps20[@]}" "${dh64[@]}" --model.attention_backend cudnn \
    --parallelism.comm_backend $nccl --parallelism.context_parallel_degree 2
  run_check "cudnn: cp 2 allgather over $nccl against one $device on cudnn" cudnn_cp2_allgather \
    cudnn_one loss 1e-2 "$(nccl_launch 2)" "${steps20[@]}" "${dh64[@]}" \
    --model.attention_backend cudnn --parallelism.comm_backend $nccl \
    --parallelism.context_parallel_degree 2 --parallelism.context_parallel_comm allgather
  if wanted "cudnn: the runs said they ran cuDNN"; then
    said=0
    runs=0
    for run in cudnn_one cudnn_cp2_ring cudnn_cp2_allgather; do
      [[ -f $work/$run.log ]] || continue
      runs=$((runs + 1))
      if grep -q 'attention: cuDNN' "$work/$run.log"; then said=$((said + 1)); fi
    done
    line=$(grep -h -m1 -o 'attention: .*' "$work/cudnn_one.log" 2>/dev/null)
    if [[ $runs -gt 0 && $said -eq $runs ]]; then
      report PASS "cudnn: the runs said they ran cuDNN" "$said of $runs; $line" "every run"
    else
      report FAIL "cudnn: the runs said they ran cuDNN" "$said of $runs; ${line:-no attention line}" "every run"
    fi
  fi
  # Every backend at the 8B shape (B 1, S 8192, H 32, Hkv 8, Dh 128, causal). The goal for cuDNN
  # is 550 TFLOP/s forward and 450 backward: figures to read, not a bound.
  if starts "cudnn: titan_bench --only attention measures native and cudnn"; then
    logged bench_attention "titan_bench --only attention" timeout 180 "$bundle/tree/titan_bench" \
      --only attention --json "$work/bench_attention.jsonl"
    figure=$(python3 - "$work/bench_attention.jsonl" <<'EOF' 2>&1
import json, sys
got = {}
for line in open(sys.argv[1]):
    r = json.loads(line) if line.strip() else {}
    if r.get("bench") == "attention":
        got.setdefault(r["recipe"].split()[-1], {})[r["name"]] = r.get("tflops", 0)
print("; ".join(f"{b} forward {v.get('forward', 0):.0f}, backward {v.get('backward', 0):.0f} TFLOP/s"
                for b, v in sorted(got.items())))
sys.exit(0 if {"native", "cudnn"} <= set(got) else 1)
EOF
    ) && report PASS "cudnn: titan_bench --only attention measures native and cudnn" "$figure" "both measured" \
      || report FAIL "cudnn: titan_bench --only attention measures native and cudnn" "$figure" "both measured"
  fi
fi

# Pipeline parallelism: activations and gradients between stages on the device, over the peer
# channels (parallel/comm/peer_channels.h: a communicator and a stream per kind and direction),
# every schedule with each gradient reduction of FSDP (pp 2 × dp_shard 2, 4 ranks, 4 microbatches
# of one sequence a rank; the interleaved ones hold two stages a rank) against one GPU. A run
# must also end cleanly: the same losses from a job that crashed on its way out are a FAIL.
pp_schedules=(GPipe 1F1B Interleaved1F1B InterleavedZeroBubble ZBVZeroBubble)
pp_reductions=(microbatch step)
pp_name() { echo "pp 2 × dp_shard 2 $1 ($2 gradients) over $nccl against one $device"; }
pp_wanted=0
for schedule in "${pp_schedules[@]}"; do
  for reduction in "${pp_reductions[@]}"; do wanted "$(pp_name "$schedule" "$reduction")" && pp_wanted=1; done
done
# The reference, when a selection (TITAN_GPU_CHECK_ONLY) left out the check that trains it.
if ((pp_wanted)) && [[ ! -s $work/one.jsonl ]] && ! out_of_time; then train one "" "${steps20[@]}"; fi
for schedule in "${pp_schedules[@]}"; do
  for reduction in "${pp_reductions[@]}"; do
    name=$(pp_name "$schedule" "$reduction")
    starts "$name" || continue
    run="pp2_dp2_${schedule}_$reduction"
    if train "$run" "$(nccl_launch 4)" "${steps20[@]}" --training.local_batch_size 4 \
      --parallelism.comm_backend $nccl --parallelism.dp_shard 2 \
      --parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule "$schedule" \
      --parallelism.pipeline_parallel_gradient_reduction "$reduction"; then
      check "$name" "$run" one loss 1e-2
    else
      report FAIL "$name" "$(grep -oE 'exit [0-9]+$' "$work/$run.log" | tail -n 1): $(grep -v -e '^## ' -e '^$' "$work/$run.log" | tail -n 1)" 1e-2
    fi
  done
done

# The pipeline's closing line on the device: its times are the stream's (core/device_moment.h).
# Each compute kind 1F1B runs took some time, and the measured bubble is a share of the run.
if wanted "pp 2 1F1B over $nccl: the closing line's device times"; then
  figure=$(python3 - "$work/pp2_dp2_1F1B_microbatch.log" <<'EOF' 2>&1
import re, sys
line = next((l for l in open(sys.argv[1]) if "pipeline: one stage" in l), "")
m = re.search(r"took F ([0-9.]+) ms, B ([0-9.]+) ms.*measured ([0-9.]+)", line)
if not m:
    print("no pipeline line"); sys.exit(1)
f, b, bubble = map(float, m.groups())
print(f"F {f:.3f} ms, B {b:.3f} ms, measured bubble {bubble:.3f}")
sys.exit(0 if f > 0 and b > 0 and 0 <= bubble < 1 else 1)
EOF
  ) && report PASS "pp 2 1F1B over $nccl: the closing line's device times" "$figure" "> 0; [0, 1)" \
    || report FAIL "pp 2 1F1B over $nccl: the closing line's device times" "$figure" "> 0; [0, 1)"
fi

# Async TP against synchronous TP on tp 2, on both backends, bf16 and rowwise FP8.
for backend in mpi $nccl; do
  launch=$([[ $backend == mpi ]] && mpi_launch 2 || nccl_launch 2)
  for recipe in bf16 rowwise; do
    fp8=()
    [[ $recipe != bf16 ]] && fp8=(--float8.enabled true --float8.recipe "$recipe")
    wanted "async TP tp 2 $recipe over $backend" || continue
    if out_of_time; then report FAIL "async TP tp 2 $recipe over $backend" "not run: out of time" 1e-6; continue; fi
    train "tp2_sync_${recipe}_$backend" "$launch" "${steps20[@]}" "${fp8[@]}" \
      --parallelism.comm_backend "$backend" --parallelism.tp 2
    run_check "async TP tp 2 $recipe over $backend against sync TP" \
      "tp2_async_${recipe}_$backend" "tp2_sync_${recipe}_$backend" loss 1e-6 "$launch" \
      "${steps20[@]}" "${fp8[@]}" --parallelism.comm_backend "$backend" --parallelism.tp 2 \
      --parallelism.enable_async_tensor_parallel true
  done
done

# Every FP8 recipe on one GPU against the CPU's emulation of the same recipe.
for recipe in tensorwise rowwise rowwise_with_gw_hp blockwise; do
  wanted "FP8 $recipe on $device" || continue
  if out_of_time; then report FAIL "FP8 $recipe on $device against the CPU" "not run: out of time" 1e-2; continue; fi
  train "fp8_${recipe}_cpu" "" "${steps20[@]}" --float8.enabled true --float8.recipe "$recipe" \
    --training.device cpu
  run_check "FP8 $recipe on $device against the CPU, 20 steps" "fp8_$recipe" "fp8_${recipe}_cpu" \
    loss 1e-2 "" "${steps20[@]}" --float8.enabled true --float8.recipe "$recipe"
done

# The FP8 producers (fp8/producer_quantize.h) at the 8B shape, each fused against the op and the
# quantize kernels apart: figures to read (the fused line's speed-up), every line measured.
if [[ $device == cuda ]] && starts "fp8: titan_bench --only producer times every fused producer"; then
  logged bench_producer "titan_bench --only producer" timeout 180 "$bundle/tree/titan_bench" \
    --only producer --json "$work/bench_producer.jsonl"
  figure=$(python3 - "$work/bench_producer.jsonl" <<'EOF' 2>&1
import json, sys
fused = [json.loads(l) for l in open(sys.argv[1]) if '"producer"' in l and "fused" in l]
print("; ".join(f"{r['name']} {r['recipe']} {r['ms']:.3f} ms {r.get('speedup_vs_bf16', 0):.2f}x"
                for r in fused))
sys.exit(0 if len(fused) == 15 and all(r["ms"] > 0 for r in fused) else 1)
EOF
  ) && report PASS "fp8: titan_bench --only producer times every fused producer" "$figure" "15 measured" \
    || report FAIL "fp8: titan_bench --only producer times every fused producer" "$figure" "15 measured"
fi

# Tensorwise FP8 under cp: each activation's amax reduced over cp (NCCL) before its scale.
run_check "cp 2 ring with tensorwise FP8 over $nccl against one $device" cp2_fp8_tensorwise \
  fp8_tensorwise loss 1e-2 "$(nccl_launch 2)" "${steps20[@]}" --parallelism.comm_backend $nccl \
  --parallelism.context_parallel_degree 2 --float8.enabled true --float8.recipe tensorwise

# Rowwise FP8 and full AC under cp: the recomputed ring on the device, against one GPU with the
# same recipe (AC changes no arithmetic).
run_check "cp 2 ring with rowwise FP8 and full AC over $nccl against one $device" \
  cp2_fp8_rowwise_full_ac fp8_rowwise loss 1e-2 "$(nccl_launch 2)" "${steps20[@]}" \
  --parallelism.comm_backend $nccl --parallelism.context_parallel_degree 2 \
  --float8.enabled true --float8.recipe rowwise --activation_checkpoint.mode full

# cp composed with the other dims on the device: with the pipeline (4 ranks), and with FSDP and
# TP (8 ranks), all sharing the one GPU over NCCL.
run_check "pp 2 × cp 2 (1F1B) over $nccl against one $device" pp2_cp2 one loss 1e-2 \
  "$(nccl_launch 4)" "${steps20[@]}" --parallelism.comm_backend $nccl \
  --parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule 1F1B \
  --parallelism.context_parallel_degree 2
run_check "dp_shard 2 × cp 2 × tp 2 over $nccl against one $device" dp2_cp2_tp2 one loss 1e-2 \
  "$(nccl_launch 8)" "${steps20[@]}" --training.local_batch_size 4 \
  --parallelism.comm_backend $nccl --parallelism.dp_shard 2 \
  --parallelism.context_parallel_degree 2 --parallelism.tp 2

# FSDP's float8 all-gather over NCCL (dp_shard 2) against one GPU with the same recipe.
run_check "FSDP float8 all-gather, dp_shard 2 over $nccl, against one $device" fsdp_fp8_gather \
  fp8_tensorwise loss 1e-2 "$(nccl_launch 2)" "${steps20[@]}" --training.local_batch_size 4 \
  --parallelism.comm_backend $nccl --parallelism.dp_shard 2 --float8.enabled true \
  --float8.recipe tensorwise --float8.enable_fsdp_float8_all_gather true \
  --float8.precompute_float8_dynamic_scale_for_fsdp true

# Validation: val_loss on the device against the CPU's.
if starts "validation on $device: val_loss against the CPU"; then
  validation=(--training.steps 10 --training.seq_len 128 --validation.enable true
              --validation.freq 5 --validation.steps 2 --validation.dataset_path corpus/kjv.txt)
  train val_cpu "" "${validation[@]}" --training.device cpu
  run_check "validation on $device: val_loss against the CPU" val_one val_cpu val_loss 1e-2 "" \
    "${validation[@]}"
fi

# The profiler's trace has device tracks; the memory snapshot's categories sum to its peak.
if starts "profiler trace and memory snapshot on $device"; then
  train profile "" --training.steps 2 --training.seq_len 128 --profiling.enable_profiling true \
    --profiling.profile_freq 2 --profiling.profiler_warmup 0 \
    --profiling.enable_memory_snapshot true --job.dump_folder "$work/profile"
  trace=$(find "$work/profile" -name 'rank0_trace.json' | head -1)
  figure=$(python3 - "$trace" "$device" <<'EOF' 2>&1
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
tracks = {e["tid"] for e in events if e.get("ph") == "M" and str(e.get("args", {}).get("name", "")).startswith("cuda stream")}
spans = sum(1 for e in events if e.get("ph") == "X" and e["tid"] in tracks)
print(f"{spans} spans on {len(tracks)} device tracks, {sum(1 for e in events if e.get('ph') == 'X')} in all")
sys.exit(0 if spans > 0 or sys.argv[2] == "cpu" else 1)
EOF
  ) && report PASS "profiler trace on $device has device tracks" "$figure" "> 0 spans" \
    || report FAIL "profiler trace on $device has device tracks" "$figure" "> 0 spans"
  snapshot=$(find "$work/profile" -name 'rank0_memory_snapshot.json' | head -1)
  figure=$(python3 - "$snapshot" <<'EOF' 2>&1
import json, sys
s = json.load(open(sys.argv[1]))
parts = sum(s["by_category"].values())
print(f"{s['device']}: categories {parts} B, peak {s['total_bytes']} B, cache {s['allocator_cache_bytes']} B")
sys.exit(0 if parts == s["total_bytes"] else 1)
EOF
  ) && report PASS "memory snapshot on $device: categories sum to the peak" "$figure" "equal" \
    || report FAIL "memory snapshot on $device: categories sum to the peak" "$figure" "equal"
fi

# Checkpoints: saved from the device by two ranks in every async mode, resumed resharded on one.
for mode in disabled async async_with_pinned_mem; do
  wanted "checkpoint ($mode) saved on 2 ranks" || continue
  if out_of_time; then report FAIL "checkpoint ($mode) saved on 2 ranks" "not run: out of time" 1e-2; continue; fi
  saved=(--training.steps 6 --training.seq_len 64 --training.global_batch_size 8
         --checkpoint.enable true --checkpoint.interval 3 --checkpoint.async_mode "$mode"
         --job.dump_folder "$work/ckpt_$mode")
  train "ckpt_${mode}_straight" "$(nccl_launch 2)" "${saved[@]}" --parallelism.comm_backend $nccl \
    --parallelism.dp_shard 2
  rm -rf "$work/ckpt_$mode/checkpoint/step-6"
  run_check "checkpoint ($mode) saved on 2 ranks, resumed on 1 $device" "ckpt_${mode}_resumed" \
    "ckpt_${mode}_straight" loss 1e-2 "" "${saved[@]}"
done

# Hugging Face: a folder exported on the CPU, imported straight into the device's shards.
if starts "HF import on $device (tp 2 over $nccl): first losses against the CPU"; then
  train hf_export "" --training.steps 2 --training.seq_len 64 --training.device cpu \
    --checkpoint.enable true --checkpoint.interval 2 --checkpoint.last_save_in_hf true \
    --job.dump_folder "$work/hf"
  from_hf=(--training.steps 2 --training.seq_len 64 --checkpoint.initial_load_path
           "$work/hf/checkpoint/hf-step-2" --checkpoint.initial_load_in_hf true)
  train hf_cpu "" "${from_hf[@]}" --training.device cpu --job.dump_folder "$work/hf_cpu"
  run_check "HF import on $device (tp 2 over $nccl): first losses against the CPU" hf_one hf_cpu \
    loss 1e-2 "$(nccl_launch 2)" "${from_hf[@]}" --parallelism.comm_backend $nccl \
    --parallelism.tp 2 --job.dump_folder "$work/hf_one"
fi

# LoRA on the device: adapters over a base model saved on the CPU, rank 8 on every block linear,
# on one device and on dp_shard 2 × tp 2 over NCCL, against the CPU's LoRA run.
if starts "LoRA on $device: one $device and dp_shard 2 × tp 2 over $nccl against the CPU"; then
  train lora_base "" --training.steps 2 --training.seq_len 64 --training.device cpu \
    --checkpoint.enable true --checkpoint.interval 2 --job.dump_folder "$work/lora_base"
  lora=(--training.steps 10 --training.seq_len 64 --training.global_batch_size 8
        --checkpoint.initial_load_path "$work/lora_base/checkpoint/step-2"
        --checkpoint.initial_load_model_only true --lora.rank 8
        --lora.targets '[wqkv,wo,w13,w2]' --optimizer.lr 0.01)
  train lora_cpu "" "${lora[@]}" --training.local_batch_size 8 --training.device cpu
  run_check "LoRA on one $device against the CPU" lora_one lora_cpu loss 1e-2 "" "${lora[@]}" \
    --training.local_batch_size 8
  run_check "LoRA on dp_shard 2 × tp 2 over $nccl against the CPU" lora_mesh lora_cpu loss 1e-2 \
    "$(nccl_launch 4)" "${lora[@]}" --training.local_batch_size 4 \
    --parallelism.comm_backend $nccl --parallelism.dp_shard 2 --parallelism.tp 2
fi

# titan_generate on the device, from a Hugging Face folder of 30 steps exported on the CPU (a
# model that has begun to learn, so that its greedy choices are not near-ties): greedy decoding
# in f32 (cuBLASLt's f32 is exact fp32, so the tokens are the CPU's unless two logits tie within
# the order of a sum) and the --eval loss in bf16 against the CPU's f32 (1e-2).
if starts "titan_generate on $device: f32 greedy tokens and bf16 --eval against the CPU"; then
  train gen_model "" --training.steps 30 --training.seq_len 64 --training.device cpu \
    --checkpoint.enable true --checkpoint.interval 30 --checkpoint.last_save_in_hf true \
    --job.dump_folder "$work/gen_model"
  generate() {  # NAME ARGS...: titan_generate into $work/NAME.{jsonl,log}
    local name=$1
    shift
    logged "$name" "titan_generate $*" timeout 120 "$bundle/tree/titan_generate" \
      --model "$work/gen_model/checkpoint/hf-step-30" --jsonl "$work/$name.jsonl" "$@"
  }
  prompts=(--prompt "In the beginning" --prompt "And God said" --max-new-tokens 48)
  generate gen_cpu "${prompts[@]}" --device cpu
  generate gen_dev "${prompts[@]}" --device "$device" --dtype f32
  eval_args=(--eval corpus/kjv.txt --eval-steps 2 --eval-batch-size 2 --eval-seq-len 128)
  generate eval_cpu "${eval_args[@]}" --device cpu
  generate eval_dev "${eval_args[@]}" --device "$device"
  figure=$(python3 - "$work" <<'EOF' 2>&1
import json, sys
work = sys.argv[1]
read = lambda name: [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
cpu, dev = read("gen_cpu"), read("gen_dev")
same = sum(a["completion_ids"] == b["completion_ids"] for a, b in zip(cpu, dev))
tokens = sum(len(a["completion_ids"]) for a in cpu)
loss_cpu, loss_dev = read("eval_cpu")[-1]["loss"], read("eval_dev")[-1]["loss"]
rel = abs(loss_dev - loss_cpu) / loss_cpu
print(f"{same} of {len(cpu)} completions ({tokens} tokens) the CPU's; eval loss {loss_dev:.6f} vs {loss_cpu:.6f}, {rel:.1e}")
sys.exit(0 if len(cpu) == len(dev) == 2 and same == 2 and rel <= 1e-2 else 1)
EOF
  ) && report PASS "titan_generate on $device: f32 greedy tokens and bf16 --eval against the CPU" "$figure" "equal; 1e-2" \
    || report FAIL "titan_generate on $device: f32 greedy tokens and bf16 --eval against the CPU" "$figure" "equal; 1e-2"
fi

# Hugging Face export from the device: 2 steps trained on it and saved as a Hugging Face folder,
# read back on the CPU by titan_generate --eval, against the folder the CPU's own 2 steps export
# (bf16 training against f32: 1e-2).
if starts "HF export on $device: the folder's --eval loss on the CPU against the CPU's export"; then
  exported=(--training.steps 2 --training.seq_len 64 --checkpoint.enable true
            --checkpoint.interval 2 --checkpoint.last_save_in_hf true)
  train hf_export_dev "" "${exported[@]}" --job.dump_folder "$work/hf_dev"
  [[ -d $work/hf_cpu_export/checkpoint/hf-step-2 ]] ||
    train hf_export_cpu "" "${exported[@]}" --training.device cpu --job.dump_folder "$work/hf_cpu_export"
  for side in dev cpu; do
    folder=$work/hf_$([[ $side == dev ]] && echo dev || echo cpu_export)/checkpoint/hf-step-2
    logged "export_eval_$side" "titan_generate --eval on $folder" timeout 120 \
      "$bundle/tree/titan_generate" --model "$folder" --device cpu --eval corpus/kjv.txt \
      --eval-steps 2 --eval-batch-size 2 --eval-seq-len 128 --jsonl "$work/export_eval_$side.jsonl"
  done
  figure=$(python3 - "$work" <<'EOF' 2>&1
import json, sys
loss = lambda side: json.loads(open(f"{sys.argv[1]}/export_eval_{side}.jsonl").readlines()[-1])["loss"]
dev, cpu = loss("dev"), loss("cpu")
rel = abs(dev - cpu) / cpu
print(f"eval loss {dev:.6f} vs {cpu:.6f}, {rel:.1e}")
sys.exit(0 if rel <= 1e-2 else 1)
EOF
  ) && report PASS "HF export on $device: the folder's --eval loss on the CPU against the CPU's export" "$figure" 1e-2 \
    || report FAIL "HF export on $device: the folder's --eval loss on the CPU against the CPU's export" "$figure" 1e-2
fi

if compgen -G "$work/cudnn_log_*" >/dev/null; then
  say "## cuDNN's own log (CUDNN_LOGLEVEL_DBG=$CUDNN_LOGLEVEL_DBG), first 400 lines of each process's"
  for f in "$work"/cudnn_log_*; do [[ -s $f ]] && { echo "### $f"; head -n 400 "$f"; } >>"$log"; done
fi
say "# $passed passed, $failed failed, in ${SECONDS} s; the runs' output is above each line in this file"
rm -rf "$work"
((failed == 0))
