#include "parallel/pipeline/stage_placement.h"

#include "core/check.h"

namespace titan::parallel::pipeline {

StagePlacement::StagePlacement(PlacementStyle style, int64_t pp, int64_t stages_per_rank)
    : style_(style), pp_(pp), stages_per_rank_(stages_per_rank) {
  TT_CHECK(pp >= 1 && stages_per_rank >= 1, "stage placement of ", stages_per_rank,
           " stages per rank on ", pp, " ranks");
  TT_CHECK(style != PlacementStyle::V || stages_per_rank == 2,
           "the V placement holds 2 stages per rank, asked for ", stages_per_rank);
}

int64_t StagePlacement::rank_of(int64_t stage) const {
  TT_CHECK(stage >= 0 && stage < num_stages(), "stage ", stage, " of ", num_stages());
  if (style_ == PlacementStyle::LOOP) return stage % pp_;
  return stage < pp_ ? stage : 2 * pp_ - 1 - stage;
}

std::vector<int64_t> StagePlacement::stages_of(int64_t rank) const {
  TT_CHECK(rank >= 0 && rank < pp_, "rank ", rank, " of ", pp_);
  if (style_ == PlacementStyle::V) return {rank, 2 * pp_ - 1 - rank};
  std::vector<int64_t> stages;
  for (int64_t s = 0; s < stages_per_rank_; ++s) stages.push_back(rank + s * pp_);
  return stages;
}

}  // namespace titan::parallel::pipeline
