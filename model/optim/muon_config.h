// Muon's settings (optimizer.muon_*): model/optim/muon_optimizer.h is the optimizer.
//
// scale (optimizer.muon_scale):
//   match_adamw  0.2·sqrt(max(rows, cols)) (Liu et al., 2025, "Muon is Scalable for LLM
//                Training"): the update's RMS is about AdamW's, 0.2, so AdamW's learning rate
//                and weight decay serve both, and one schedule drives them
//   shape        sqrt(max(1, rows/cols)) (Jordan's reference): the update's spectral norm is
//                about 1, which wants its own, larger learning rate (0.02 there); give the
//                hidden matrices an lr_scale in optimizer.groups
#pragma once

#include <cstdint>

#include "core/enum_names.h"

namespace titan::model {

enum class MuonScale { MatchAdamW, Shape };
inline constexpr EnumName<MuonScale> kMuonScaleList[] = {
    {MuonScale::MatchAdamW, "match_adamw"},
    {MuonScale::Shape, "shape"},
};
inline constexpr EnumNames<MuonScale> kMuonScales{"Muon update scale", kMuonScaleList};

struct MuonConfig {
  double momentum = 0.95;
  bool nesterov = true;
  int ns_steps = 5;
  MuonScale scale = MuonScale::MatchAdamW;
};

// The factor that multiplies the orthogonalised update of a [rows, cols] matrix.
double muon_update_scale(MuonScale scale, int64_t rows, int64_t cols);

}  // namespace titan::model
