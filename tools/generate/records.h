// The JSON lines titan_generate --jsonl writes: one object per prompt, in input order, or one
// for an --eval. Numbers are written so that they read back as the same doubles.
#pragma once

#include <string>
#include <vector>

#include "tools/generate/evaluation.h"
#include "tools/generate/generation.h"
#include "data/task_scoring.h"

namespace titan::generate {

// {"index", "prompt", "completion", "prompt_ids", "completion_ids", "finish_reason",
//  "prompt_tokens", "completion_tokens", "prefill_seconds", "decode_seconds",
//  "decode_tokens_per_second"}: decode_seconds runs from the end of the batch's prefill to this
// completion's last token, which the decode steps after the first token took.
std::string completion_record(const Prompt& prompt, const Completion& completion);

// {"eval", "loss", "perplexity", "batches", "batch_size", "seq_len", "tokens", "seconds"}
std::string eval_record(const std::string& path, const EvalResult& result);

// {"task", "path", "format", "n", "acc", "acc_stderr", "acc_norm", "acc_norm_stderr",
//  "num_fewshot", "model", "tokenizer", "commit"}: a standard error of fewer than 2 items is null.
std::string task_record(const data::TaskResult& result, const std::string& model,
                        const std::string& tokenizer);

// The table titan_generate --tasks prints: task, n, acc, ±stderr, acc_norm, ±stderr.
std::string task_table(const std::vector<data::TaskResult>& results);

// The commit titan_generate was configured from ("unknown" outside a git checkout).
const char* build_commit();

}  // namespace titan::generate
