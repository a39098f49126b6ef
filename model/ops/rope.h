// Rotary position embedding (RoPE), applied in place to the q and k heads of wqkv's output.
//
// Pairs are adjacent elements (x[2i], x[2i+1]) of a head, rotated by angle s·freq_i at position
// s: torchtitan's convention (a view as complex numbers). HF checkpoints use the half-split
// convention instead, so importing or exporting them permutes wq's and wk's rows; that lives
// at the HF boundary, checkpoint/hf_llama.cpp (docs/architecture.md#decision-13), and the model
// keeps one convention. Backward is the inverse rotation, also in place: RoPE saves nothing.
#pragma once

#include "core/tensor.h"
#include "model/config.h"

namespace titan::model {

// cos, sin [S, Dh/2] for positions [0, S), Llama 3.1 frequency scaling when enabled. CPU only:
// for CUDA the caller builds the tables once in f32 and moves them with .to(device).
void rope_tables(const Tensor& cos, const Tensor& sin, int64_t head_dim, double theta,
                 const RopeScaling& scaling);

// x [B·S, W]: rotates heads [0, n_heads) of every row (W ≥ n_heads·Dh; later columns, the v
// heads, are left alone). Row t is position t % S. On the CPU the tables have x's dtype (f32 or
// f64); on CUDA x is f32 or bf16 and the tables are f32.
void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t seq_len,
                  int64_t n_heads, int64_t head_dim);

// dx [B·S, W], in place: the gradient through the rotation (rotation by the negative angle).
void rope_backward(const Tensor& dx, const Tensor& cos, const Tensor& sin, int64_t seq_len,
                   int64_t n_heads, int64_t head_dim);

// The CUDA twins (rope.cu); rope_forward and rope_backward call them for CUDA tensors.
void rope_forward_cuda(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t seq_len,
                       int64_t n_heads, int64_t head_dim);
void rope_backward_cuda(const Tensor& dx, const Tensor& cos, const Tensor& sin, int64_t seq_len,
                        int64_t n_heads, int64_t head_dim);

}  // namespace titan::model
