// The activation memory of a training step, estimated from the shapes before anything is
// allocated: model/'s part of a rank's memory estimate (core/memory_estimate.h), which the
// trainer adds to parallel/'s parts to check, before training, that a rank's micro-batch fits
// its device rather than finding out when step 1 runs out.
//
// A block keeps, per token of the micro-batch (B·S tokens; T = B·S / tp of them in the
// sequence-sharded residual stream; H, Hkv, F, V the local heads, ffn width and vocabulary
// under tensor parallelism), in the activation dtype:
//
//   none   x, attention_norm(x), h, ffn_norm(h)   4·D per residual token
//          qkv after RoPE, attention output       (H + 2·Hkv)·Dh + H·Dh
//          w13's output, SwiGLU's output          2·F + F
//          (+ the norms' rstd [T] and attention's log-sum-exp [B, H, S] in f32)
//   op     none without the two norm outputs and SwiGLU's (recomputed in backward)
//   full   x only
//
// and the head keeps the final norm's input and output [T, D] and the f32 logit gradient
// [B·S, V]. The peak adds, to what every block keeps, the most one block rebuilds in backward
// (all of `none` for a `full` block) and one [T, D] pair of gradients in flight. On the debug
// model (B 4, S 256, f32) this gives the kept bytes of docs/performance.md's table to 1% and
// overestimates the measured peaks by 1-13%, a test checks it (test_activation_checkpoint.cpp).
#pragma once

#include <cstdint>

#include "core/memory_estimate.h"
#include "model/activation_checkpoint.h"
#include "model/config.h"

namespace titan::model {

struct ActivationMemory {
  double kept_bytes = 0;  // held from the end of forward to the start of backward
  double peak_bytes = 0;  // the most held at once during the step

  // The peak as the Activations part of a rank's estimate.
  MemoryEstimate estimate() const {
    MemoryEstimate m;
    m[MemoryCategory::Activations] = peak_bytes;
    return m;
  }
};

// One micro-batch of `batch` sequences of `seq_len` tokens on one rank of tensor-parallel
// degree `tp`, activations of `element_bytes` each (4 for f32, 2 for bf16). In double: any
// shape a user types gives a number, never an overflow.
ActivationMemory estimate_activation_memory(const ModelArgs& args, int64_t batch, int64_t seq_len,
                                            int64_t tp, const ActivationCheckpointPolicy& policy,
                                            int64_t element_bytes);

}  // namespace titan::model
