// Completing a batch of prompts: one prefill of every prompt (their rows in one forward), then
// one decode step after another, each feeding the last token of every sequence still going,
// until each ends:
//   eos       the tokenizer's EOS was generated (it is in completion_ids, not in the text);
//   stop      a --stop text appeared (the text ends before it; the ids keep every token);
//   length    --max-new-tokens were generated;
//   context   the prompt and completion filled the sequence limit.
// Tokens are chosen on tp rank 0 and shared (GenerationHooks::share_tokens), so every rank feeds
// the same ones; text is handed out as it is settled (GenerationHooks::on_text): a piece that
// could still turn out to begin a stop text is held back until it cannot.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "model/inference/decoder.h"
#include "model/inference/sampler.h"

namespace titan::generate {

struct Prompt {
  int64_t index = 0;  // in the input: the sampler's sequence number
  std::string text;
  std::vector<int32_t> ids;  // BOS (unless --no-bos) and the encoded text
};

struct GenerationSettings {
  int64_t max_new_tokens = 128;
  model::SamplingParams sampling;
  std::vector<std::string> stops;
  int64_t position_limit = 0;  // prompt + completion tokens
  int64_t sample_vocab = 0;    // ids the tokenizer decodes: nothing at or above is sampled
  std::optional<int32_t> eos;
};

struct Completion {
  std::vector<int32_t> ids;
  std::string text;
  std::string finish_reason;   // eos, stop, length, context
  double prefill_seconds = 0;  // the batch's prefill
  double decode_seconds = 0;   // from the end of the prefill to this completion's last token
};

struct GenerationHooks {
  // Makes `tokens` every rank's (rank 0's choice); nothing to do on one rank.
  std::function<void(std::vector<int32_t>& tokens)> share_tokens;
  // Settled text of the batch's sequence `position`, in order; may be empty (not called then).
  std::function<void(size_t position, std::string_view text)> on_text;
};

// Figures summed over batches.
struct GenerationStats {
  int64_t prompts = 0, batches = 0;
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0;
  int64_t decode_tokens = 0, decode_steps = 0;  // rows fed after the prefill, and the calls
  double decode_seconds = 0;
  int64_t largest_cache_bytes = 0;
  std::string largest_cache;  // its shape and size (model::KvCacheShape::describe)
};

// Completes `batch` (prompts that fit the limit: checked by the caller). `rank0` chooses the
// tokens; the other ranks take them from share_tokens.
std::vector<Completion> complete_batch(model::Decoder& decoder, const data::Tokenizer& tokenizer,
                                       const std::vector<Prompt>& batch,
                                       const GenerationSettings& settings, bool rank0,
                                       const GenerationHooks& hooks, GenerationStats& stats);

// Positions the batch's cache needs: the longest prompt, and the completion tokens that are fed
// back (all but the last), within the sequence limit.
int64_t cache_positions(const std::vector<Prompt>& batch, const GenerationSettings& settings);

}  // namespace titan::generate
