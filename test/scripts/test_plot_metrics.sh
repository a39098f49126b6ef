#!/usr/bin/env bash
# scripts/plot_metrics.py end to end: two synthetic runs (one with validation loss and tokens,
# one resumed with repeated steps) drawn to a real PNG of the expected size; the reader keeps a
# step's last occurrence and ignores unknown keys; and every bad input (missing, empty or
# non-JSON file, a file without step/loss, an unwritable output, labels that do not match)
# ends with one line naming it on stderr and exit 2.
#
#   bash test/scripts/test_plot_metrics.sh        # from the repository root (ctest does this)
set -euo pipefail
cd "$(dirname "$0")/../.."

script=scripts/plot_metrics.py
# The script runs under Debian's python3 (its shebang), where python3-matplotlib lives.
python=/usr/bin/python3
[[ -x $python ]] || python=$(command -v python3 || true)

fail() {
  echo "test_plot_metrics.sh: FAIL: $*" >&2
  exit 1
}

[[ -n $python ]] || fail "no python3; scripts/setup.sh installs python3-matplotlib and python3-numpy"
$python -c 'import matplotlib, numpy' 2>/dev/null ||
  fail "python3-matplotlib (or python3-numpy) is missing for $python; scripts/setup.sh installs it"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/run_a" "$tmp/run_b"

# Run A: tokens, elapsed/ETA and validation loss, once on the training line of step 50 and
# once as a line of its own after step 100's; keys the script does not know.
$python - "$tmp/run_a/metrics.jsonl" <<'EOF'
import json, math, sys
with open(sys.argv[1], "w") as f:
    for step in [1] + list(range(10, 101, 10)):
        line = {"step": step, "loss": 2 + 6 * math.exp(-step / 25), "grad_norm": 1 + 1 / step,
                "lr": 8e-4 * min(1, step / 20), "tokens_per_s": 1000 + step,
                "tokens_per_s_per_device": 1000 + step, "step_ms": 900.0, "peak_mem_gib": 0.2,
                "tflops": 0.04, "tokens": step * 1024, "elapsed_s": step * 0.9,
                "eta_s": (100 - step) * 0.9, "some_future_key": "text", "nested": {"a": 1}}
        if step == 50:
            line["val_loss"] = 3.5
        f.write(json.dumps(line) + "\n")
    f.write(json.dumps({"step": 100, "val_loss": 2.4}) + "\n")
EOF

# Run B: no tokens; it ran to step 60, then resumed from a checkpoint at step 30 and logged
# steps 40..100 again with other losses (those must win), with a blank line in between.
$python - "$tmp/run_b/metrics.jsonl" <<'EOF'
import json, sys
def line(step, loss):
    return json.dumps({"step": step, "loss": loss, "grad_norm": 0.8, "lr": 5e-4,
                       "tokens_per_s": 800, "tokens_per_s_per_device": 400, "step_ms": 1200,
                       "peak_mem_gib": 0.3, "peak_mem_pct": 1.5, "tflops": 0.03, "mfu": 0.1})
with open(sys.argv[1], "w") as f:
    for step in range(10, 61, 10):
        f.write(line(step, 9.0) + "\n")
    f.write("\n")
    for step in range(40, 101, 10):
        f.write(line(step, 3.0) + "\n")
EOF

# The reader: last occurrence wins, a validation line merges into its step, unknown keys go.
$python - "$tmp" <<'EOF' || fail "read_run does not read the runs as expected"
import sys
sys.path.insert(0, "scripts")
import plot_metrics
a = plot_metrics.read_run(sys.argv[1] + "/run_a/metrics.jsonl")
b = plot_metrics.read_run(sys.argv[1] + "/run_b/metrics.jsonl")
assert [r["step"] for r in a] == [1] + list(range(10, 101, 10)), a
assert a[-1]["val_loss"] == 2.4 and "loss" in a[-1], a[-1]
assert [r["step"] for r in a if "val_loss" in r] == [50, 100]
assert all("some_future_key" not in r and "nested" not in r for r in a)
assert [r["step"] for r in b] == list(range(10, 101, 10)), b
assert [r["loss"] for r in b] == [9.0] * 3 + [3.0] * 7, b
EOF

check_png() {  # file
  local png=$1
  [[ -s $png ]] || fail "$png was not written"
  [[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
    fail "$png does not start with the PNG signature"
  local size
  size=$(stat -c %s "$png")
  ((size > 20000)) || fail "$png is only $size bytes; a chart of six panels is more"
  $python -c '
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.image
height, width = matplotlib.image.imread(sys.argv[1]).shape[:2]
assert (width, height) == (1200, 1050), (width, height)
' "$png" || fail "$png is not a 1200×1050 image"
}

# Two runs on the same axes, labelled and titled; then default labels (the folder names).
out=$tmp/out/compare.png
mkdir -p "$tmp/out"
"$script" "$tmp/run_a/metrics.jsonl" "$tmp/run_b/metrics.jsonl" -o "$out" \
  --label "run A" --label "run B" --title "two synthetic runs" ||
  fail "plotting two runs failed"
check_png "$out"
"$script" "$tmp/run_a/metrics.jsonl" "$tmp/run_b/metrics.jsonl" -o "$tmp/out/default.png" ||
  fail "plotting with default labels failed"
check_png "$tmp/out/default.png"
# One run without tokens: the tokens panel says they are unknown.
"$script" "$tmp/run_b/metrics.jsonl" -o "$tmp/out/one.png" || fail "plotting one run failed"
check_png "$tmp/out/one.png"

# Bad input: exit 2, exactly one line on stderr, starting "plot_metrics.py: error:" and
# naming what was wrong (the given text); nothing on stdout and no traceback.
expect_refusal() {  # what-to-mention, arguments...
  local mention=$1
  shift
  local rc=0
  "$script" "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  local err
  err=$(cat "$tmp/stderr")
  ((rc == 2)) || fail "'$script $*' exited $rc, not 2 (stderr: $err)"
  [[ $(wc -l <"$tmp/stderr") -eq 1 ]] || fail "'$script $*' wrote not one line to stderr: $err"
  [[ ! -s $tmp/stdout ]] || fail "'$script $*' wrote to stdout: $(cat "$tmp/stdout")"
  [[ $err == "plot_metrics.py: error: "* ]] || fail "'$script $*' stderr is not 'plot_metrics.py: error: ...': $err"
  [[ $err == *"$mention"* ]] || fail "'$script $*' stderr does not mention '$mention': $err"
}

good=$tmp/run_a/metrics.jsonl
expect_refusal "$tmp/missing.jsonl" "$tmp/missing.jsonl" -o "$tmp/out/x.png"
: >"$tmp/empty.jsonl"
expect_refusal "$tmp/empty.jsonl" "$good" "$tmp/empty.jsonl" -o "$tmp/out/x.png"
printf '{"step": 1, "loss": 8.1}\n{"step": 10, "loss": 6.1}\n{"step": 20, "loss": \n' >"$tmp/broken.jsonl"
expect_refusal "$tmp/broken.jsonl line 3" "$tmp/broken.jsonl" -o "$tmp/out/x.png"
printf '{"step": 1, "loss": 8.1}\n[1, 2]\n' >"$tmp/array.jsonl"
expect_refusal "$tmp/array.jsonl line 2" "$tmp/array.jsonl" -o "$tmp/out/x.png"
printf '{"epoch": 1, "accuracy": 0.5}\n{"epoch": 2, "accuracy": 0.6}\n' >"$tmp/other.jsonl"
expect_refusal "$tmp/other.jsonl" "$tmp/other.jsonl" -o "$tmp/out/x.png"
expect_refusal "$tmp/run_a" "$tmp/run_a" -o "$tmp/out/x.png"
expect_refusal "$tmp/no/such/folder/x.png" "$good" -o "$tmp/no/such/folder/x.png"
expect_refusal "$tmp/out" "$good" -o "$tmp/out"
expect_refusal "/dev/full" "$good" -o /dev/full  # the write itself fails (ENOSPC), even as root
expect_refusal "--label" "$good" "$tmp/run_b/metrics.jsonl" -o "$tmp/out/x.png" --label one
expect_refusal "-o" "$good"
[[ ! -e $tmp/out/x.png ]] || fail "a refused run left $tmp/out/x.png behind"

echo "test_plot_metrics.sh: ok (3 charts, 11 refusals)"
