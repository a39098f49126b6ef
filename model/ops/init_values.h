// A block of a weight's initial values, drawn where the block lives.
//
// Every value is a pure function of (seed, part name, element index)
// (docs/architecture.md#decision-6), so a rank draws only the rows and columns it holds. On the CPU
// the elements split over the host's threads; on a CUDA device a kernel draws them in place, with
// the CPU's bits: both sides run core/philox.h, whose normal transform is built from correctly
// rounded operations only. Drawing on the host and copying took about 25 s for an 8B-shaped
// model's 2.8 B parameters on an H200.
#pragma once

#include <cstdint>

#include "core/rng.h"
#include "core/tensor.h"
#include "model/ops/init_spec.h"

namespace titan::model {

// Where a block sits in the weight it is drawn from: rows [row_begin, +rows) and columns
// [col_begin, +width) of a weight whose rows have `cols` columns. Element (r, c) of the weight
// is index r·cols + c of its stream.
struct InitBlock {
  int64_t cols = 1;
  int64_t width = 1;
  int64_t row_begin = 0;
  int64_t col_begin = 0;
};

// dst [rows, width] (contiguous, rows = numel / width) = that block of the weight drawn as
// `init` says from `rng`. CPU: f32, f64, or bf16 (each value rounded to f32, then to bf16);
// CUDA: f32 or bf16, the same bits as the CPU.
void init_values(const Tensor& dst, const InitSpec& init, const CounterRng& rng,
                 const InitBlock& block);

// The CUDA twin (init_values.cu); init_values calls it for CUDA tensors, once the shapes and
// the truncation interval are checked.
void init_values_cuda(const Tensor& dst, const InitSpec& init, const CounterRng& rng,
                      const InitBlock& block);

}  // namespace titan::model
