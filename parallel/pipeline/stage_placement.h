// Which pipeline rank holds which stage. A looped placement (GPipe, 1F1B, Interleaved1F1B,
// InterleavedZeroBubble) deals the pp·v stages round-robin, stage r + s·pp on rank r, so each
// activation hops to the next rank and wraps from the last rank to rank 0 between loops. The V
// placement (ZBVZeroBubble) gives rank r stages r and 2pp−1−r: the model goes down the ranks and
// comes back up, so rank 0 holds both the first and the last stage and the turn at the bottom
// (stages pp−1 and pp, both on rank pp−1) needs no communication.
#pragma once

#include <cstdint>
#include <vector>

namespace titan::parallel::pipeline {

enum class PlacementStyle { LOOP, V };

class StagePlacement {
 public:
  // v stages per rank on pp ranks; V needs v == 2.
  StagePlacement(PlacementStyle style, int64_t pp, int64_t stages_per_rank);

  PlacementStyle style() const { return style_; }
  int64_t pp() const { return pp_; }
  int64_t stages_per_rank() const { return stages_per_rank_; }
  int64_t num_stages() const { return pp_ * stages_per_rank_; }

  int64_t rank_of(int64_t stage) const;
  // The stages of `rank`, in the order of its local index (loop: r, r+pp, …; V: r, 2pp−1−r).
  std::vector<int64_t> stages_of(int64_t rank) const;

 private:
  PlacementStyle style_;
  int64_t pp_;
  int64_t stages_per_rank_;
};

}  // namespace titan::parallel::pipeline
