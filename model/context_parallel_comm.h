// How a transformer block's attention meets context parallelism (docs/context_parallel.md,
// docs/architecture.md#decision-2 and #decision-18): the model calls this interface where it
// would call attention_forward / attention_backward, and parallel/context_parallel.h implements
// it over the cp group. On one rank (this class itself) it is the local causal attention.
//
// Under cp ranks a sequence of S tokens is cut into 2·cp chunks and this rank holds chunks
// `rank` and 2·cp − 1 − `rank` (head-tail, for causal balance), in that order. Everything the
// block holds is this rank's: qkv [B·S/cp, (H + 2·Hkv)·Dh] after RoPE at the tokens' global
// positions, out [B·S/cp, H·Dh], lse [B, H, S/cp], and shape.seq_len is S/cp. The outputs are
// those rows of full causal attention over the whole sequence; the keys and values of the
// other ranks' tokens come and go inside the call. Under block_causal the mask holds this
// rank's rows of the whole sequence's document starts (global positions, cut head-tail as the
// tokens are), and the outputs are those rows of block-causal attention.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "model/ops/attention/attention.h"

namespace titan::model {

class ContextParallelComm {
 public:
  virtual ~ContextParallelComm() = default;
  virtual int64_t size() const { return 1; }
  virtual int64_t rank() const { return 0; }
  // This rank's rows of a table indexed by the whole sequence's positions, in the order it
  // holds its tokens: table [S, ·] -> [S/cp, ·] (RoPE's cos and sin, so that each token turns
  // by its global position).
  virtual Tensor local_rows(const Tensor& table) const { return table; }
  // -> out [B·S/cp, H·Dh], lse [B, H, S/cp]
  virtual void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                 const AttentionShape& shape, const DocumentMask& mask) {
    model::attention_forward(out, lse, qkv, shape, mask.doc_start);
  }
  // -> dqkv [B·S/cp, (H + 2·Hkv)·Dh] (assigned), given the forward's out and lse.
  virtual void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& lse, const AttentionShape& shape,
                                  const DocumentMask& mask) {
    model::attention_backward(dqkv, dout, qkv, out, lse, shape, mask.doc_start);
  }
};

}  // namespace titan::model
