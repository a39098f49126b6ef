// Token embedding lookup, ready for a vocab-sharded table.
//
// Under tensor parallelism each rank holds rows [vocab_start, vocab_start + V_local) of the
// table; a token outside that range contributes zeros, and the ranks' partial outputs are
// summed (reduce-scattered to sequence shards) by the caller. With vocab_start = 0 and the whole
// table this is the plain lookup.
//
// As everywhere in model/ops: parameter gradients accumulate (+=), so that micro-batches of
// gradient accumulation add up; activation gradients are assigned.
#pragma once

#include "core/tensor.h"

namespace titan::model {

// out[T, D] = weight[tokens[t] - vocab_start] (zeros for tokens outside the shard).
// weight [V_local, D], tokens [T] i32. out has weight's dtype: f32 or f64 on the CPU, f32 or
// bf16 on CUDA.
void embedding_forward(const Tensor& out, const Tensor& weight, const Tensor& tokens,
                       int64_t vocab_start = 0);

// dweight[V_local, D] += Σ_t onehot(tokens[t] - vocab_start) ⊗ dout[t]. On the CPU dout has
// dweight's dtype; on CUDA dweight is f32 (atomic fp32 adds, so the order of repeated tokens'
// adds, and the last bits, vary from run to run) and dout f32 or bf16.
void embedding_backward(const Tensor& dweight, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_start = 0);

// The CUDA twins (embedding.cu); embedding_forward and embedding_backward call them for CUDA
// tensors.
void embedding_forward_cuda(const Tensor& out, const Tensor& weight, const Tensor& tokens,
                            int64_t vocab_start);
void embedding_backward_cuda(const Tensor& dweight, const Tensor& dout, const Tensor& tokens,
                             int64_t vocab_start);

}  // namespace titan::model
