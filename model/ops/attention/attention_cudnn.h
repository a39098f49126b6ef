// cuDNN's fused flash attention: the second CUDA backend of attention.h and attention_block.h,
// beside the native kernels; attention_backend.h says which one runs. Compiled only where CMake
// found cuDNN's headers (TITAN_CUDNN); libcudnn itself is loaded at the first use
// (core/cuda/cudnn_library.h).
//
// Each function has its op's signature and contract, and is called by the op's dispatch for
// CUDA tensors that passed the op's checks. Each returns whether cuDNN ran it: false when the
// backend is auto and cuDNN builds no plan for the shape (refused by every engine, or failed to
// build), which is said once in the log (core/notice.h) and leaves the outputs untouched for the
// native kernel the caller runs instead. Forced to cudnn, that failure throws with the graph and
// each engine's refusal. A backward may fall back where its forward ran on cuDNN: both keep the
// same out and lse (the natural-log softmax statistic), so the native backward takes them. The full attention reads q, k and v straight out of
// the fused qkv [B·S, (H + 2·Hkv)·Dh] through strides and writes dqkv the same way, with no copy;
// the block ops, whose partials and gradient sums are f32, have cuDNN write bf16 and convert
// (out) or add (dq, dk, dv) into them. lse is cuDNN's softmax statistic, max + log Σ exp(s −
// max) of the scaled scores, in the natural log as the native kernels' and the merge's.
#pragma once

#include <string>

#include "core/tensor.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_block.h"

namespace titan::model {

bool attention_forward_cudnn(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             const AttentionShape& shape);
bool attention_backward_cudnn(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const AttentionShape& shape);

bool attention_block_forward_cudnn(const Tensor& out, const Tensor& lse, const Tensor& q,
                                   const Tensor& k, const Tensor& v,
                                   const AttentionBlockShape& shape);
bool attention_block_backward_cudnn(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const AttentionBlockShape& shape);

// The graph of a block's SDPA as cuDNN holds it, tensor by tensor and operation by operation
// (q, dq contiguous [B, S_q, H·Dh]; k, v, dk, dv in one [B, S_kv, 2·Hkv·Dh] buffer): built with
// every descriptor finalized but no plan, which needs no device. For tests on any machine.
std::string cudnn_attention_graph_text(const AttentionBlockShape& shape, bool backward);

// Every graph built so far, one line each with the engine its plan runs: for tests and the
// bench to print beside their figures.
std::string cudnn_attention_plans();

// dst (=|+=) src over [B, R, N] views with a contiguous last dim: src bf16 or f32, dst f32
// (attention_cudnn.cu). How the block ops' bf16 results reach their f32 partials and sums.
void attention_cudnn_to_f32(const Tensor& dst, const Tensor& src, bool accumulate);

}  // namespace titan::model
