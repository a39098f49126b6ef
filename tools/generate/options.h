// titan_generate's command line: what to load, what to generate or evaluate, and how.
// parse_options() reads it with CLI11; check_options() refuses every value that is wrong on
// its own (a negative temperature, top-p outside (0, 1], …) with one line naming the flag, the
// value and the fix, before anything is read or allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "model/ops/attention/attention.h"

namespace titan::generate {

struct Options {
  std::string model;      // a step folder, a checkpoint folder, or a Hugging Face folder
  std::string tokenizer;  // empty: the model's default (model_source.h)

  std::vector<std::string> prompts;  // --prompt, in order
  std::string prompts_file;          // --prompts
  std::string field = "text";        // of each JSON line of --prompts
  bool bos = true;                   // prepend the tokenizer's BOS to each prompt

  int64_t max_new_tokens = 128;
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;
  int64_t seed = 0;
  std::vector<std::string> stops;
  // Absent when not given: 1 when stdout is a terminal (tokens stream), else 8.
  std::optional<int64_t> batch_size;
  // Absent when not given: the model's limit (model_source.h).
  std::optional<int64_t> max_seq_len;

  std::string device_text = "cpu";
  Device device = Device::cpu();
  std::string dtype_text;  // empty: f32 on the CPU, bf16 on CUDA
  DType dtype = DType::F32;

  // --cuda-graph on: decode steps replay one captured CUDA graph (model/inference/decoder.h).
  std::string cuda_graph_text = "off";
  bool cuda_graph = false;

  std::string jsonl;  // one record per prompt

  std::string eval;  // --eval FILE: mean token loss and perplexity instead of generating
  int64_t eval_steps = -1;
  int64_t eval_batch_size = 4;
  int64_t eval_seq_len = 256;
  // --eval-attention-mask: block_causal evaluates as a block_causal run validates.
  std::string eval_attention_mask_text = "causal";
  model::AttentionMaskKind eval_attention_mask = model::AttentionMaskKind::Causal;

  // --tasks FILE...: multiple-choice tasks (data/eval_tasks.h), each FILE or FORMAT:FILE;
  // scored in batches of eval_batch_size rows (data/task_scoring.h).
  std::vector<std::string> tasks;
  int64_t limit = -1;       // items per task; -1: every one
  std::string task_scores;  // --task-scores FILE: one JSON line per item, its choices' sums
  int64_t num_fewshot = 0;     // solved examples before each item (data::fewshot_context)
  int64_t fewshot_seed = 1234;
};

// Parses argv. Returns nullopt for --help, which it prints when `print_help` (one rank of a job
// prints for all); throws InputError for what CLI11 refuses (an unknown flag, a value of the
// wrong type), naming the flag.
std::optional<Options> parse_options(int argc, char** argv, bool print_help);

// Every check one flag or a pair of flags allows, and the parsed device and dtype.
void check_options(Options& options);

// Lowers --max-new-tokens to what a sequence limit of `position_limit` positions leaves after
// a one-token prompt, when it asks for more; returns the line that says so ("" when it did
// not), naming `limit_source` (what set the limit: "--max-seq-len", "the model's
// max_position_embeddings").
std::string cap_max_new_tokens(Options& options, int64_t position_limit,
                               const std::string& limit_source);

}  // namespace titan::generate
