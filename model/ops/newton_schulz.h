// The orthogonalisation at the heart of Muon: the quintic Newton–Schulz iteration of Jordan et
// al. (2024), which maps a matrix G = U·S·Vᵀ to about U·Vᵀ — every singular value pushed into
// [0.7, 1.2] — with nothing but matrix products:
//
//   X ← G / (‖G‖_F + 1e-7)
//   repeat `steps` times:  A ← X·Xᵀ;  B ← b·A + c·A·A;  X ← a·X + B·X
//   (a, b, c) = (3.4445, −4.7750, 2.0315)
//
// For a tall G (rows > cols) the same map is taken on the smaller Gram matrix, A ← Xᵀ·X and
// X ← a·X + X·B, which is the iteration on Gᵀ transposed back: no transpose is ever copied.
// On the CPU X is kept in G's dtype (f32, or f64 in the tests); on CUDA in bf16, as the
// published recipe does, each product accumulated in fp32 (core/gemm.h).
#pragma once

#include "core/tensor.h"

namespace titan::model {

inline constexpr double kNewtonSchulzA = 3.4445;
inline constexpr double kNewtonSchulzB = -4.7750;
inline constexpr double kNewtonSchulzC = 2.0315;

// out = NS^steps(g): g and out [rows, cols], contiguous, the same dtype and device (out may
// be g itself). f32 or f64 on the CPU; f32 on CUDA, where the iteration runs in bf16.
void newton_schulz5(const Tensor& g, const Tensor& out, int steps);

}  // namespace titan::model
