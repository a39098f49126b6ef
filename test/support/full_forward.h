// The oracle of text generation's decoder (model/inference/decoder.h): the logits of every
// position of whole sequences, computed by training's own forward — the embedding,
// TransformerBlock::forward over the whole window (causal attention_forward, RoPE by row), the
// final norm and the output linear — with no cache and nothing remembered between positions.
#pragma once

#include "core/tensor.h"
#include "model/transformer.h"

namespace titan::testing {

// tokens [B, S] i32 (host) -> logits [B·S, V] f32 on the host, of a one-rank model whose
// parameters are allocated (any device and dtype training runs).
Tensor full_forward_logits(model::Transformer& model, const Tensor& tokens);

}  // namespace titan::testing
