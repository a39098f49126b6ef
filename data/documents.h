// Where the documents of a window begin: the boundaries block-causal attention needs
// (model/ops/attention/attention.h, model.attention_mask: block_causal), derived from the tokens
// alone.
//
// A document ends at the EOS its tokenizer appends (Tokenizer::encode_document; titan_tokenize's
// shards, JSON lines and text files all end each document so), and the next document begins at
// the token after it. The loader cuts windows anywhere in the stream, so a window's first
// document may have begun before the window: it starts, for attention, at the window's first
// token. Nothing else is needed: no index of offsets beside the tokens, no change to the token
// files, and a stream with no EOS at all is one long document (causal attention, exactly).
//
// The positions are those of the window's S inputs (its first S tokens; the last token is
// only a target): doc_start[b, i] = 1 + the position of the last EOS before input i, or 0.
// An EOS belongs to the document it ends; the token it predicts (the next document's BOS) is
// that document's last target.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "data/token_source.h"

namespace titan::data {

// inputs [B, S] i32 on the CPU (the first S tokens of each window) -> doc_start [B, S] i32,
// each token's document start as above.
Tensor document_starts(const Tensor& inputs, int32_t eos_id);

// One sequence's document starts -> Σ over its documents of n², n each document's tokens in
// the sequence: a window's unmasked attention pairs under block_causal (S² when causal).
double document_square_sum(std::span<const int32_t> doc_start);

// What block_causal attention costs on a stream, sampled: the keys per token its FLOPs count,
// Σ n² / S over a window's documents (torchtitan's count takes S, every key of the window),
// averaged over up to `max_windows` windows spread evenly over the stream as the loader cuts it
// (window i: S + 1 tokens from token i·S).
struct DocumentContext {
  double keys_per_token = 0;  // the mean of Σ n² / S
  double mean_documents = 0;  // documents (or parts of one) per window
  int64_t windows = 0;        // windows sampled
};
DocumentContext sample_document_context(const TokenSource& source, int64_t seq_len, int32_t eos_id,
                                        int64_t max_windows = 256);

}  // namespace titan::data
