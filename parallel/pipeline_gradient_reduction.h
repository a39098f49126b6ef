// When a pipeline stage's gradients leave the rank under FSDP
// (parallelism.pipeline_parallel_gradient_reduction; docs/pipeline.md, "Stage gradients").
//
// A stage runs each parameter group's backward once per microbatch, so FSDP can either
// reduce-scatter the group's unsharded fp32 gradients into its shard after every microbatch
// (one group's gradients on the rank at a time, m reduce-scatters a step) or let them add up
// over the step's microbatches and reduce-scatter each group once (every group of the rank's
// stages held unsharded for the whole step: at 405B on pp 8 × tp 8, 23.6 GiB a rank). Both sum
// the same terms; they differ in memory, in the bytes sent over dp_shard and in the order of the
// additions. Without pipeline parallelism FSDP always reduces after each backward.
#pragma once

#include "core/enum_names.h"

namespace titan::parallel {

enum class PipelineGradientReduction { Microbatch, Step };
inline constexpr EnumName<PipelineGradientReduction> kPipelineGradientReductionList[] = {
    {PipelineGradientReduction::Microbatch, "microbatch"},
    {PipelineGradientReduction::Step, "step"}};
inline constexpr EnumNames<PipelineGradientReduction> kPipelineGradientReductions{
    "gradient reduction", kPipelineGradientReductionList};

}  // namespace titan::parallel
