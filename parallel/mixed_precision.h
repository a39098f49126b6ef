// The dtype parameters compute in (training.mixed_precision_param in titan_train), over fp32
// master weights, AdamW moments and gradient reductions, which stay fp32 in every case:
//
//   bfloat16  on CUDA: bf16 parameters for compute and the FSDP all-gather (torchtitan's FSDP2
//             default); on the CPU: the linears' GEMM operands rounded to bf16, accumulated in
//             fp32 (an emulation of the same rounding)
//   float32   no rounding; the CPU only (CUDA's attention kernels compute in bf16)
//   auto      bfloat16 on CUDA, float32 on the CPU (resolve_param_precision)
#pragma once

#include "core/device.h"
#include "core/enum_names.h"

namespace titan::parallel {

enum class ParamPrecision { Auto, Float32, BFloat16 };
inline constexpr EnumName<ParamPrecision> kParamPrecisionList[] = {
    {ParamPrecision::Auto, "auto"},
    {ParamPrecision::Float32, "float32"},
    {ParamPrecision::BFloat16, "bfloat16"},
};
inline constexpr EnumNames<ParamPrecision> kParamPrecisions{"precision", kParamPrecisionList};

// The one reading of Auto: BFloat16 on a CUDA device, Float32 on the CPU. Others are kept.
inline ParamPrecision resolve_param_precision(ParamPrecision precision, Device device) {
  if (precision != ParamPrecision::Auto) return precision;
  return device.is_cuda() ? ParamPrecision::BFloat16 : ParamPrecision::Float32;
}

}  // namespace titan::parallel
