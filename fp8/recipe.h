// The FP8 training recipes (ARCHITECTURE.md decision 8): for each of a linear's three GEMMs,
// how each operand is quantized — or that the GEMM stays in high precision.
//
//   GEMM          A (rows scaled)      B (rows scaled)     y = A · Bᵀ
//   output        x     [T, in]        w     [out, in]     y  [T, out]
//   grad_input    dy    [T, out]       wᵀ    [in, out]     dx [T, in]
//   grad_weight   dyᵀ   [out, T]       xᵀ    [in, T]       dw [out, in]
//
// Every operand is scaled along its GEMM's contraction axis, which is why backward quantizes
// transposed copies — from the high-precision tensors, never from the other FP8 copy.
//
//   recipe              operands                                       scales
//   tensorwise          x, w e4m3; dy e5m2                             one per tensor, dynamic
//   rowwise             all e4m3                                       per row, power of two
//   rowwise_with_gw_hp  as rowwise; grad_weight in high precision      per row, power of two
//   blockwise           all e4m3; weights 128×128, the rest 1×128      per block (DeepSeek-V3)
//
// The output GEMM uses cuBLASLt's fast accumulation in every recipe and the two gradient GEMMs
// do not: torchao's Float8LinearConfig defaults (gemm_config_output use_fast_accum=True,
// grad_input and grad_weight False), which none of its recipes override. Block scaling and the
// CPU emulation ignore the flag (fp8/scaled_gemm.h).
#pragma once

#include <string>
#include <string_view>

#include "fp8/float8_tensor.h"

namespace titan::fp8 {

struct OperandScaling {
  Granularity granularity = Granularity::Tensorwise;
  Format format = Format::E4M3;
  bool power_of_two = false;
};

struct GemmScaling {
  bool high_precision = false;  // this GEMM is not converted
  OperandScaling a, b;
  bool fast_accumulation = false;  // scaled_gemm's fast_accumulation
};

struct Recipe {
  std::string name;
  GemmScaling output, grad_input, grad_weight;
};

// The recipes by their config names; InputError naming float8.recipe for any other.
Recipe recipe_by_name(std::string_view name);

}  // namespace titan::fp8
