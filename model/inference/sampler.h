// Choosing the next token from a row of logits, in vLLM's order: greedy (the largest logit)
// when the temperature is 0; otherwise the logits are divided by the temperature, top-k keeps
// the k largest, top-p keeps the fewest of those (largest first) whose probabilities, after a
// softmax over what top-k kept, reach p, and one token is drawn from what is left, renormalised.
// Ties go to the lower id, everywhere, so top-k 1 picks exactly the greedy token.
//
// The draw is one uniform number from core's counter-based RNG (core/rng.h) at
// (seed, sequence, step): the same seed gives the same sample on any machine, in any batch and
// under any tensor-parallel degree, for the same logits. `sequence` is the prompt's index in the
// input, not its place in a batch, so batching never changes a sample.
#pragma once

#include <cstdint>
#include <span>

namespace titan::model {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // in (0, 1]; 1: no limit
  uint64_t seed = 0;
};

// The token for step `step` (0 for the first generated token) of sequence `sequence`. Ids
// past logits.size() are never picked: the caller passes the vocabulary its tokenizer decodes.
int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t sequence,
                     uint64_t step);

}  // namespace titan::model
