// The Hopper attention forward (attention_hopper.cu): a third CUDA path of attention.h's full
// causal attention beside the native kernels and cuDNN, written for sm_90a's warpgroup MMA and
// tensor copies in FlashAttention-3's design. Forward only: it writes out and lse in exactly the
// native forward's layouts, so the native backward (and context parallelism's merge) reads them
// unchanged. attention_backend.h says when it runs (model.attention_backend hopper, opt-in);
// hopper_attention_refusal() there says which shapes it takes. Declared only in CUDA builds.
#pragma once

#include <string>

#include "core/tensor.h"
#include "model/ops/attention/attention.h"

namespace titan::model {

// -> out [B·S, H·Dh] bf16, lse [B, H, S] f32 from qkv [B·S, (H + 2·Hkv)·Dh] bf16, as
// attention_forward_cuda. causal: query i sees keys 0 … i; else every key of its sequence (no
// caller yet: the mask of context parallelism's past blocks, tested against the CPU block op).
void attention_forward_hopper(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                              const AttentionShape& shape, bool causal = true);

// Whether this build compiled the kernel for sm_90a (TITAN_CUDA_ARCHITECTURES holds 90a).
bool hopper_attention_compiled();

// Empty when the current device runs the kernel; else what it needs, one phrase ("a Hopper GPU
// (compute capability 9.x), and cuda:0 is 8.0"), for an error naming the key.
std::string hopper_attention_device_refusal();

}  // namespace titan::model
