#include "tools/generate/options.h"

#include <CLI/CLI.hpp>
#include <climits>
#include <cmath>
#include <cstdio>

#include "core/check.h"

namespace titan::generate {

std::optional<Options> parse_options(int argc, char** argv, bool print_help) {
  Options o;
  CLI::App app{
      "titan_generate: text from a titan_train checkpoint or a Hugging Face Llama 3 folder, with "
      "a KV cache, on the CPU or CUDA, alone or tensor-parallel under mpirun; or, with --eval, "
      "the mean token loss of a file. Counts and sizes are 1 or more unless a flag's help gives "
      "0 or -1 a meaning (--top-k, --eval-steps); a flag left out takes the default in brackets. "
      "docs/generation.md has the details."};
  app.add_option("--model", o.model,
                 "a titan_train step folder (…/checkpoint/step-N), the checkpoint folder holding "
                 "them (its newest step), or a Hugging Face Llama folder")
      ->required();
  app.add_option("--tokenizer", o.tokenizer,
                 "byte, a tokenizer.json, or a folder holding one [default: the Hugging Face "
                 "folder's tokenizer.json, else byte]");
  app.add_option("--prompt", o.prompts, "a prompt (repeatable)");
  app.add_option("--prompts", o.prompts_file,
                 "a file of prompts: one per line, or one JSON object per line (.jsonl, .json, "
                 ".ndjson, or --field given) whose --field holds it. Without --prompt and "
                 "--prompts, prompts are read from standard input, one per line");
  CLI::Option* field = app.add_option("--field", o.field, "the JSON field of a prompt [text]");
  app.add_flag("!--no-bos", o.bos, "do not begin each prompt with the tokenizer's BOS token");
  app.add_option("--max-new-tokens", o.max_new_tokens,
                 "tokens to generate per prompt, 1 or more; more than the sequence limit leaves "
                 "is capped, with a line saying so [128]");
  app.add_option("--temperature", o.temperature, "0 (greedy) or the softmax temperature [0]");
  app.add_option("--top-k", o.top_k, "sample among the k most likely tokens; 0: all of them [0]");
  app.add_option("--top-p", o.top_p,
                 "sample among the fewest most likely tokens whose probability reaches p, in "
                 "(0, 1] [1]");
  app.add_option("--seed", o.seed, "seed of the sampling draws [0]");
  app.add_option("--stop", o.stops, "stop a completion where this text appears (repeatable)");
  app.add_option("--batch-size", o.batch_size,
                 "prompts generated together, 1 or more [8; 1 when stdout is a terminal, so "
                 "tokens stream]");
  app.add_option("--max-seq-len", o.max_seq_len,
                 "positions a prompt and its completion may fill, 2 or more [the model's "
                 "max_position_embeddings]");
  app.add_option("--device", o.device_text, "cpu, cuda or cuda:N [cpu]");
  app.add_option("--dtype", o.dtype_text,
                 "f32 or bf16: weights, activations and KV cache [f32 on the CPU, bf16 on CUDA]");
  app.add_option("--cuda-graph", o.cuda_graph_text,
                 "on: capture a CUDA decode step as one CUDA graph and replay it for every later "
                 "token (one rank only; off until measured on a GPU, docs/generation.md) [off]");
  app.add_option("--jsonl", o.jsonl,
                 "write one JSON record per prompt: prompt, completion, their ids, timings");
  app.add_option("--eval", o.eval,
                 "print the mean token loss and perplexity over this file (text, JSON lines, a "
                 ".bin token file, or a folder or glob of shards) instead of generating");
  app.add_option("--eval-steps", o.eval_steps,
                 "batches to evaluate, 1 or more; -1: every whole batch the file holds [-1] "
                 "(titan_train: validation.steps)");
  app.add_option("--eval-batch-size", o.eval_batch_size,
                 "sequences per batch, 1 or more [4] (titan_train: validation.local_batch_size × "
                 "dp)");
  app.add_option("--eval-seq-len", o.eval_seq_len,
                 "tokens per sequence, 1 or more [256] (titan_train: validation.seq_len)");
  app.add_option("--eval-attention-mask", o.eval_attention_mask_text,
                 "causal, or block_causal: each token attends within its document, which ends "
                 "at the tokenizer's EOS [causal] (titan_train: model.attention_mask)");
  app.add_option("--tasks", o.tasks,
                 "score multiple-choice tasks instead of generating: JSON lines files of "
                 "HellaSwag, ARC, PIQA, MMLU or {context, choices, label} items, each FILE (its "
                 "format read from its fields) or FORMAT:FILE (hellaswag, arc, piqa, mmlu, "
                 "plain); prints acc and acc_norm per task, batches of --eval-batch-size rows")
      ->expected(1, -1);
  app.add_option("--limit", o.limit, "items per --tasks file, 1 or more; -1: every one [-1]");
  app.add_option("--task-scores", o.task_scores,
                 "with --tasks: write one JSON line per item: its task, line, label, and each "
                 "choice's summed log-likelihood and continuation tokens");
  app.add_option("--num-fewshot", o.num_fewshot,
                 "with --tasks: solved examples before each item, other items of its task "
                 "drawn without repeats; 0: zero-shot [0]");
  app.add_option("--fewshot-seed", o.fewshot_seed,
                 "seed of the few-shot examples' draw, 0 or more [1234]");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (print_help) std::fputs(app.help().c_str(), stdout);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    input_error(e.what(), " (see --help)");
  }
  if (field->count() == 0) o.field.clear();  // JSON lines only by the file's name
  return o;
}

void check_options(Options& o) {
  if (o.model.empty()) {
    input_error(
        "--model: is empty; name a step folder (…/checkpoint/step-N) or a Hugging Face "
        "Llama folder");
  }
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    input_error("--temperature ", o.temperature,
                ": give 0 for greedy decoding or a positive temperature, e.g. 0.8");
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    input_error("--top-p ", o.top_p,
                " is outside (0, 1]; give the probability mass to sample from, e.g. 0.9, or 1 "
                "for all of it");
  }
  if (o.top_k < 0) input_error("--top-k ", o.top_k, ": give 0 (every token) or a positive k");
  if (o.seed < 0) input_error("--seed ", o.seed, ": give 0 or a positive seed");
  if (o.max_new_tokens < 1) {
    input_error("--max-new-tokens ", o.max_new_tokens, ": give 1 or more tokens to generate");
  }
  // Sizes are positive, 0 included among the refused: a default is had by leaving a flag out.
  if (o.batch_size && *o.batch_size < 1) {
    input_error("--batch-size ", *o.batch_size,
                ": give a positive number of prompts per batch, or leave the flag out for the "
                "default (8; 1 when stdout is a terminal)");
  }
  if (o.max_seq_len && (*o.max_seq_len < 2 || *o.max_seq_len > INT32_MAX)) {
    input_error("--max-seq-len ", *o.max_seq_len,
                ": give at least 2 positions (a prompt token and a new one), at most ", INT32_MAX,
                ", or leave the flag out for the model's max_position_embeddings");
  }
  for (const std::string& stop : o.stops) {
    if (stop.empty()) input_error("--stop: is empty; give the text that ends a completion");
  }
  if (!o.prompts_file.empty() && !o.prompts.empty()) {
    input_error("--prompts '", o.prompts_file,
                "' and --prompt both given; give the prompts one way (add the --prompt texts to "
                "the file)");
  }
  if (!o.eval.empty() && (!o.prompts.empty() || !o.prompts_file.empty())) {
    input_error("--eval '", o.eval,
                "' with prompts: --eval computes a loss and generates nothing; leave out "
                "--prompt and --prompts");
  }
  if (!o.tasks.empty() && (!o.prompts.empty() || !o.prompts_file.empty() || !o.eval.empty())) {
    input_error("--tasks with ", o.eval.empty() ? "prompts" : "--eval",
                ": --tasks scores multiple-choice items and does nothing else; run it alone "
                "(leave out --prompt, --prompts and --eval)");
  }
  if (o.limit == 0 || o.limit < -1) {
    input_error("--limit ", o.limit,
                ": give a positive number of items per task, or -1 for every item");
  }
  if (o.num_fewshot < 0) {
    input_error("--num-fewshot ", o.num_fewshot,
                ": give 0 (zero-shot) or a positive number of examples");
  }
  if (o.fewshot_seed < 0) input_error("--fewshot-seed ", o.fewshot_seed, ": give 0 or more");
  if (!o.task_scores.empty() && o.tasks.empty()) {
    input_error("--task-scores '", o.task_scores,
                "' without --tasks: it writes the scores of task items; give --tasks FILE");
  }
  if (o.eval_steps == 0 || o.eval_steps < -1) {
    input_error("--eval-steps ", o.eval_steps,
                ": give a positive number of batches, or -1 for "
                "every whole batch of the file");
  }
  if (o.eval_batch_size < 1) {
    input_error("--eval-batch-size ", o.eval_batch_size, ": give a positive number of sequences");
  }
  o.eval_attention_mask =
      model::kAttentionMasks.parse(o.eval_attention_mask_text, "--eval-attention-mask");
  if (o.eval_seq_len < 1) {
    input_error("--eval-seq-len ", o.eval_seq_len, ": give a positive number of tokens");
  }
  // "cuda" leaves the index to main: the node-local rank's GPU.
  o.device = parse_device_setting(o.device_text, "--device");
  if (o.dtype_text.empty()) {
    o.dtype = o.device.is_cuda() ? DType::BF16 : DType::F32;
  } else if (o.dtype_text == "f32" || o.dtype_text == "float32") {
    o.dtype = DType::F32;
  } else if (o.dtype_text == "bf16" || o.dtype_text == "bfloat16") {
    o.dtype = DType::BF16;
  } else {
    input_error("--dtype: unknown dtype '", o.dtype_text, "'; use f32 or bf16");
  }
  if (o.cuda_graph_text == "on" || o.cuda_graph_text == "off") {
    o.cuda_graph = o.cuda_graph_text == "on";
  } else {
    input_error("--cuda-graph: unknown value '", o.cuda_graph_text, "'; use on or off");
  }
  if (o.cuda_graph && !o.device.is_cuda()) {
    input_error("--cuda-graph on with --device ", o.device,
                ": a CUDA graph replays GPU kernels; use --device cuda, or leave --cuda-graph off");
  }
  if (o.cuda_graph && !o.eval.empty()) {
    input_error(
        "--cuda-graph on with --eval: evaluation runs training's forward, not decode "
        "steps; leave --cuda-graph off");
  }
  if (o.cuda_graph && !o.tasks.empty()) {
    input_error(
        "--cuda-graph on with --tasks: scoring runs training's forward, not decode steps; "
        "leave --cuda-graph off");
  }
  if ((!o.eval.empty() || !o.tasks.empty()) && o.device.is_cuda() && o.dtype == DType::F32) {
    input_error("--dtype f32 with ", o.eval.empty() ? "--tasks" : "--eval", " on ", o.device,
                ": evaluation runs training's forward, whose CUDA attention computes in bf16; "
                "use --dtype bf16, or --device cpu for f32");
  }
}

std::string cap_max_new_tokens(Options& o, int64_t position_limit,
                               const std::string& limit_source) {
  // A prompt holds at least one token (BOS, or a token of its text).
  const int64_t most = position_limit - 1;
  if (o.max_new_tokens <= most) return "";
  const int64_t asked = o.max_new_tokens;
  o.max_new_tokens = most;
  return detail::concat(
      "--max-new-tokens ", asked, " is more than the ", most, " new tokens a sequence limit of ",
      position_limit, " positions (", limit_source, ") leaves after a one-token prompt; capped at ",
      most,
      " (a completion also ends where its prompt and it fill the limit: finish_reason "
      "\"context\")");
}

}  // namespace titan::generate
