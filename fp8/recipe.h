// The FP8 training recipes (docs/architecture.md#decision-8): for each of a linear's three GEMMs,
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

#include <cstdint>
#include <iterator>
#include <string_view>

#include "core/enum_names.h"
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

// The recipe a config names: parsed once (kRecipeNames), compared as this value everywhere
// after (never as text).
enum class RecipeKind : uint8_t { Tensorwise, Rowwise, RowwiseWithGwHp, Blockwise };
inline constexpr RecipeKind kRecipeKinds[] = {RecipeKind::Tensorwise, RecipeKind::Rowwise,
                                              RecipeKind::RowwiseWithGwHp, RecipeKind::Blockwise};

inline constexpr EnumName<RecipeKind> kRecipeNameList[] = {
    {RecipeKind::Tensorwise, "tensorwise"},
    {RecipeKind::Rowwise, "rowwise"},
    {RecipeKind::RowwiseWithGwHp, "rowwise_with_gw_hp"},
    {RecipeKind::Blockwise, "blockwise"},
};
static_assert(std::size(kRecipeNameList) == std::size(kRecipeKinds), "a recipe without a name");
// Parsing takes the key from the caller: kRecipeNames.parse(text, "float8.recipe").
inline constexpr EnumNames<RecipeKind> kRecipeNames{"recipe", kRecipeNameList};

// The config name: "tensorwise", "rowwise", "rowwise_with_gw_hp", "blockwise".
inline std::string_view recipe_name(RecipeKind kind) { return kRecipeNames.name(kind); }

struct Recipe {
  RecipeKind kind = RecipeKind::Tensorwise;
  GemmScaling output, grad_input, grad_weight;

  std::string_view name() const { return recipe_name(kind); }
};

// The scaling of every GEMM operand under `kind`.
Recipe make_recipe(RecipeKind kind);

}  // namespace titan::fp8
