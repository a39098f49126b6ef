#!/usr/bin/env bash
# titan_tokenize's throughput on the same documents as .jsonl.zst and as snappy,
# dictionary-encoded Parquet (data page v1, row groups of 1,000 rows: how datatrove and pyarrow
# write FineWeb), with 1 and 2 threads, the four runs interleaved round by round; prints each
# one's best and median time and MB/s of text. The numbers of docs/data.md#throughput.
#
#   scripts/bench_tokenize_parquet.sh [ROUNDS] [COPIES] [TOKENIZER]
#
# The documents are corpus/kjv.txt's verses (scripts/setup.sh writes it), COPIES times over
# (default 8: 34 MB of text), one {"text": verse, "id": n} a line. ROUNDS defaults to 15;
# TOKENIZER to byte (a tokenizer.json to measure with BPE). The Parquet file is written by
# Apache Arrow's Rust writer (test/data/parquet_reference, which scripts/setup.sh --tests
# installs). Time is the summary's: from the first byte read to the last shard renamed. A round
# starts only when a probe finds two cores free (two processes that each spin 50 ms of CPU end
# within 65 ms of wall time), waiting up to a minute for it, as on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-15}
copies=${2:-8}
tokenizer=${3:-byte}
[[ -f corpus/kjv.txt ]] || { echo "bench_tokenize_parquet: error: no corpus/kjv.txt; run scripts/setup.sh" >&2; exit 2; }
modules=$PWD/.cache/npm/parquet_reference/node_modules
[[ -d $modules ]] || { echo "bench_tokenize_parquet: error: $modules is missing; run scripts/setup.sh --tests" >&2; exit 2; }
binary=${TITAN_TOKENIZE:-build/titan_tokenize}
[[ -x $binary ]] || { echo "bench_tokenize_parquet: error: no $binary; build it (or set TITAN_TOKENIZE)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/kjv.jsonl" "$copies" <<'EOF'
import json, sys
verses = [line.rstrip("\n") for line in open("corpus/kjv.txt", encoding="utf-8")]
with open(sys.argv[1], "w", encoding="utf-8") as out:
    n = 0
    for _ in range(int(sys.argv[2])):
        for verse in verses:
            out.write(json.dumps({"text": verse, "id": n}) + "\n")
            n += 1
EOF
zstd -q "$work/kjv.jsonl" -o "$work/kjv.jsonl.zst"
cat > "$work/spec.json" <<EOF
{"files": [{"path": "$work/kjv.parquet", "documents": "$work/kjv.jsonl", "compression": "SNAPPY",
            "dictionary": true, "version": 1, "nullable": true, "row_group_rows": 1000}]}
EOF
TITAN_REFERENCE_MODULES=$modules node test/data/parquet_reference/writer.js "$work/spec.json"
text_bytes=$(python3 -c "print($copies * sum(len(l.rstrip(b'\n')) for l in open('corpus/kjv.txt', 'rb')))")

# Waits until two cores are free (at most 60 s); prints nothing.
wait_for_free_cores() {
  python3 - <<'PROBE'
import multiprocessing, time
def spin(_):
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
deadline = time.time() + 60
with multiprocessing.Pool(2) as pool:
    while time.time() < deadline:
        start = time.time()
        pool.map(spin, [0, 1])
        if time.time() - start < 0.065:
            break
        time.sleep(0.2)
PROBE
}

results=$work/results
for ((round = 1; round <= rounds; ++round)); do
  wait_for_free_cores
  for threads in 1 2; do
    for input in kjv.jsonl.zst kjv.parquet; do
      seconds=$("$binary" --tokenizer "$tokenizer" --threads "$threads" "$work/$input" "$work/out" |
                  sed -n 's/.* in \([0-9.]*\) s (.*/\1/p')
      echo "$input $threads $seconds" >> "$results"
    done
  done
done

echo "$(wc -c < "$work/kjv.jsonl.zst") bytes .jsonl.zst, $(wc -c < "$work/kjv.parquet") bytes .parquet, $text_bytes bytes of text; $rounds rounds"
python3 - "$results" "$text_bytes" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, threads, seconds = line.split()
    runs.setdefault((name, int(threads)), []).append(float(seconds))
text = int(sys.argv[2]) / 1e6
print("| input | --threads | best | text MB/s | median | text MB/s |")
print("|---|---|---|---|---|---|")
for (name, threads), times in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    best, median = min(times), statistics.median(times)
    print(f"| {name} | {threads} | {best:.3f} s | {text / best:.1f} | {median:.3f} s | {text / median:.1f} |")
EOF
