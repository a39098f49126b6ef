// The few whole-tensor arithmetic ops training needs besides the layers: residual adds,
// gradient scaling, and the sum of squares behind the global gradient norm.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace titan::model {

// acc += x (same shape). The residual connections' forward, and gradient merges in backward.
void accumulate(const Tensor& acc, const Tensor& x);

// t *= factor. Gradient clipping.
void scale_inplace(const Tensor& t, double factor);

// Σ t², accumulated in double. One term of the global gradient norm.
double sum_of_squares(const Tensor& t);
// Each tensor's Σ t², in order: the same values as sum_of_squares one by one, with one wait for
// them all on CUDA instead of one a tensor. Every tensor on one device.
std::vector<double> sums_of_squares(const std::vector<Tensor>& tensors);

// The CUDA twins (tensor_math.cu); the functions above call them for CUDA tensors. On CUDA the
// tensors may be f32 or bf16 (arithmetic in fp32, rounded once on store); sums_of_squares waits
// for its results (one stream synchronisation).
void accumulate_cuda(const Tensor& acc, const Tensor& x);
void scale_inplace_cuda(const Tensor& t, double factor);
std::vector<double> sums_of_squares_cuda(const std::vector<Tensor>& tensors);

}  // namespace titan::model
