// The dtype the optimizer keeps its state in (optimizer.state_dtype).
#pragma once

#include <cstdint>

#include "core/enum_names.h"

namespace titan::model {

// The dtype AdamW keeps its two moments in (optimizer.state_dtype). bfloat16 halves the
// optimizer's memory (8 bytes a parameter to 4; an 8B model's 64 GB to 32): the moments are
// stored rounded to nearest even, each update computed in f32 from their widened values (the
// option Megatron-LM's precision-aware optimizer and torchtitan offer too). The master weights
// stay fp32. float32 keeps the moments in the parameter's own dtype (f64 in
// gradient checks).
enum class OptimizerStateDtype { Float32, BFloat16 };
inline constexpr EnumName<OptimizerStateDtype> kOptimizerStateDtypeList[] = {
    {OptimizerStateDtype::Float32, "float32"},
    {OptimizerStateDtype::BFloat16, "bfloat16"},
};
inline constexpr EnumNames<OptimizerStateDtype> kOptimizerStateDtypes{"optimizer state dtype",
                                                                      kOptimizerStateDtypeList};

// Bytes a moment takes per parameter element.
inline int64_t moment_bytes(OptimizerStateDtype dtype) {
  return dtype == OptimizerStateDtype::BFloat16 ? 2 : 4;
}

}  // namespace titan::model
