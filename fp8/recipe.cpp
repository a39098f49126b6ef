#include "fp8/recipe.h"

#include "core/check.h"

namespace titan::fp8 {

namespace {

constexpr OperandScaling tensorwise(Format format) {
  return {Granularity::Tensorwise, format, false};
}
constexpr OperandScaling rowwise{Granularity::Rowwise, Format::E4M3, true};
constexpr OperandScaling blocks_1x128{Granularity::Block1x128, Format::E4M3, false};
constexpr OperandScaling tiles_128x128{Granularity::Block128x128, Format::E4M3, false};

}  // namespace

Recipe make_recipe(RecipeKind kind) {
  Recipe r;
  r.kind = kind;
  switch (kind) {
    case RecipeKind::Tensorwise:
      // e5m2's range for gradients, e4m3's precision for activations and weights.
      r.output = {false, tensorwise(Format::E4M3), tensorwise(Format::E4M3)};
      r.grad_input = {false, tensorwise(Format::E5M2), tensorwise(Format::E4M3)};
      r.grad_weight = {false, tensorwise(Format::E5M2), tensorwise(Format::E4M3)};
      break;
    case RecipeKind::Rowwise:
    case RecipeKind::RowwiseWithGwHp:
      r.output = {false, rowwise, rowwise};
      r.grad_input = {false, rowwise, rowwise};
      r.grad_weight = {kind == RecipeKind::RowwiseWithGwHp, rowwise, rowwise};
      break;
    case RecipeKind::Blockwise:
      // Weights in 128×128 tiles wherever they are an operand (w, wᵀ); activations and
      // gradients, transposed or not, in 1×128 blocks along the contraction axis.
      r.output = {false, blocks_1x128, tiles_128x128};
      r.grad_input = {false, blocks_1x128, tiles_128x128};
      r.grad_weight = {false, blocks_1x128, blocks_1x128};
      break;
  }
  r.output.fast_accumulation = true;  // torchao's default, kept by every recipe (recipe.h)
  return r;
}

}  // namespace titan::fp8
