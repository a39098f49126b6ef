#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "core/check.h"

namespace titan::parallel::pipeline {
namespace {

Action compute(ActionKind kind, int64_t stage, int64_t microbatch) {
  return Action{kind, stage, microbatch, -1};
}

// GPipe: every forward, then every backward, both in microbatch order (torch's ScheduleGPipe).
std::vector<Action> gpipe_rank(int64_t rank, int64_t m) {
  std::vector<Action> ops;
  for (int64_t i = 0; i < m; ++i) ops.push_back(compute(ActionKind::FORWARD, rank, i));
  for (int64_t i = 0; i < m; ++i) ops.push_back(compute(ActionKind::BACKWARD_FULL, rank, i));
  return ops;
}

// 1F1B: rank r runs min(m, pp − r) forwards, then alternates backward and forward until the
// forwards run out, then the remaining backwards (torch's Schedule1F1B; Megatron's order is the
// same sequence with one forward fewer counted as warm-up). The last rank thus backs up each
// microbatch right after its forward, and rank r holds at most pp − r microbatches.
std::vector<Action> one_f_one_b_rank(int64_t rank, int64_t pp, int64_t m) {
  std::vector<Action> ops;
  const int64_t warmup = std::min(m, pp - rank);
  int64_t forward = 0;
  int64_t backward = 0;
  for (; forward < warmup; ++forward) ops.push_back(compute(ActionKind::FORWARD, rank, forward));
  while (backward < m) {
    ops.push_back(compute(ActionKind::BACKWARD_FULL, rank, backward++));
    if (forward < m) ops.push_back(compute(ActionKind::FORWARD, rank, forward++));
  }
  return ops;
}

// Interleaved 1F1B and interleaved zero bubble (torch's _get_1f1b_rank_ops). Microbatches go
// through a rank's v looped stages in rounds of `per_round`: forwards of local stage 0 for one
// round, then local stage 1, …; backwards in the mirror order. Warm-up is (v−1)·per_round plus
// `hop` forwards per rank of distance from the last rank (2 for 1F1B: a forward and a backward
// must travel; 1 for zero bubble, whose W fills the gap), capped at every forward.
// The zero-bubble variant splits each backward into I and W, and from the (rank+1)-th steady
// step on runs one deferred W after each I, oldest first; the rest of the Ws end the list.
std::vector<Action> interleaved_rank(int64_t rank, int64_t pp, int64_t v, int64_t m,
                                     bool zero_bubble) {
  const int64_t rounds = std::max<int64_t>(1, m / pp);
  const int64_t per_round = m / rounds;
  const int64_t total = v * m;  // forwards, and backwards, of this rank
  const int64_t hop = zero_bubble ? 1 : 2;
  const int64_t warmup = std::min((v - 1) * per_round + hop * (pp - 1 - rank), total);

  auto forward_stage = [&](int64_t step) { return ((step / per_round) % v) * pp + rank; };
  auto backward_stage = [&](int64_t step) {
    return (v - 1 - ((step - warmup) / per_round) % v) * pp + rank;
  };
  const ActionKind backward_kind =
      zero_bubble ? ActionKind::BACKWARD_INPUT : ActionKind::BACKWARD_FULL;
  std::map<int64_t, int64_t> next_forward;  // stage -> next microbatch
  std::map<int64_t, int64_t> next_backward;
  std::map<int64_t, int64_t> next_weight;
  std::vector<int64_t> backward_steps;  // the step of each backward, in order
  size_t weights = 0;
  std::vector<Action> ops;

  auto add_weight = [&] {
    const int64_t stage = backward_stage(backward_steps[weights++]);
    ops.push_back(compute(ActionKind::BACKWARD_WEIGHT, stage, next_weight[stage]++));
  };
  auto add_backward = [&](int64_t step) {
    const int64_t stage = backward_stage(step);
    ops.push_back(compute(backward_kind, stage, next_backward[stage]++));
    backward_steps.push_back(step);
    if (zero_bubble && step - warmup >= rank) add_weight();
  };

  for (int64_t step = 0; step < total; ++step) {
    const int64_t stage = forward_stage(step);
    ops.push_back(compute(ActionKind::FORWARD, stage, next_forward[stage]++));
    if (step >= warmup) add_backward(step);
  }
  for (int64_t step = total; step < total + warmup; ++step) add_backward(step);
  while (zero_bubble && weights < backward_steps.size()) add_weight();
  return ops;
}

// ZB-V (torch's ScheduleZBVZeroBubble): rank r holds stage r (chunk 0, going down) and
// 2pp−1−r (chunk 1, coming back up). Warm-up runs 2(pp−r)−1 chunk-0 forwards, then r pairs of
// chunk-1 and chunk-0 forwards, then pp−r chunk-1 (F, I, W) triples; the steady phase alternates
// chunk 0 (F, I, W) and chunk 1 (F, I, W); cool-down runs the remaining Is and then the Ws.
// Torch plans at least 2pp−1 microbatches and drops the actions of those beyond m.
std::vector<Action> zbv_rank(int64_t rank, int64_t pp, int64_t m) {
  const int64_t planned = std::max(2 * pp - 1, m);
  const int64_t chunk0 = rank;
  const int64_t chunk1 = 2 * pp - 1 - rank;
  int64_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  std::vector<Action> ops;
  auto add = [&](ActionKind kind, int64_t stage, int64_t microbatch) {
    ops.push_back(compute(kind, stage, microbatch));
  };

  for (int64_t i = 0; i < 2 * (pp - rank) - 1; ++i) add(ActionKind::FORWARD, chunk0, f0++);
  for (int64_t i = 0; i < rank; ++i) {
    add(ActionKind::FORWARD, chunk1, f1++);
    add(ActionKind::FORWARD, chunk0, f0++);
  }
  for (int64_t i = 0; i < pp - rank; ++i) {
    add(ActionKind::FORWARD, chunk1, f1++);
    add(ActionKind::BACKWARD_INPUT, chunk1, b1);
    add(ActionKind::BACKWARD_WEIGHT, chunk1, b1++);
  }
  while (f1 < f0 || f0 < planned) {
    if (f0 < planned) add(ActionKind::FORWARD, chunk0, f0++);
    add(ActionKind::BACKWARD_INPUT, chunk0, b0);
    add(ActionKind::BACKWARD_WEIGHT, chunk0, b0++);
    add(ActionKind::FORWARD, chunk1, f1++);
    add(ActionKind::BACKWARD_INPUT, chunk1, b1);
    add(ActionKind::BACKWARD_WEIGHT, chunk1, b1++);
  }
  int64_t w0 = b0, w1 = b1;
  for (int64_t i = 0; i < rank; ++i) {
    add(ActionKind::BACKWARD_INPUT, chunk0, b0++);
    add(ActionKind::BACKWARD_INPUT, chunk1, b1++);
  }
  for (int64_t i = 0; i < pp - rank; ++i) {
    add(ActionKind::BACKWARD_INPUT, chunk0, b0++);
    add(ActionKind::BACKWARD_WEIGHT, chunk0, w0++);
  }
  while (w1 < b1) add(ActionKind::BACKWARD_WEIGHT, chunk1, w1++);
  while (w0 < b0) add(ActionKind::BACKWARD_WEIGHT, chunk0, w0++);
  TT_CHECK(w0 == f0 && b0 == f0 && w1 == f1 && b1 == f1, "ZB-V plan of rank ", rank,
           " is unbalanced");

  std::erase_if(ops, [m](const Action& action) { return action.microbatch >= m; });
  return ops;
}

}  // namespace

ValueOrRefusal<ScheduleKind> parse_schedule_kind(std::string_view text, std::string_view key) {
  if (const std::optional<ScheduleKind> kind = kScheduleKindNames.find(text)) return *kind;
  const std::vector<std::string_view> names = kScheduleKindNames.names();
  return ValueOrRefusal<ScheduleKind>::refused(
      detail::concat(key, key.empty() ? "" : ": ", "unknown ", kScheduleKindNames.noun(), " '",
                     text, "'; use ", list_alternatives(names)));
}

bool is_single_stage(ScheduleKind kind) {
  return kind == ScheduleKind::GPIPE || kind == ScheduleKind::ONE_F_ONE_B;
}

bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::INTERLEAVED_ZERO_BUBBLE || kind == ScheduleKind::ZBV_ZERO_BUBBLE;
}

PlacementStyle placement_style(ScheduleKind kind) {
  return kind == ScheduleKind::ZBV_ZERO_BUBBLE ? PlacementStyle::V : PlacementStyle::LOOP;
}

bool Action::is_compute() const {
  return kind == ActionKind::FORWARD || kind == ActionKind::BACKWARD_FULL ||
         kind == ActionKind::BACKWARD_INPUT || kind == ActionKind::BACKWARD_WEIGHT;
}

bool Action::is_send() const {
  return kind == ActionKind::SEND_ACT || kind == ActionKind::SEND_GRAD;
}

bool Action::is_receive() const {
  return kind == ActionKind::RECV_ACT || kind == ActionKind::RECV_GRAD;
}

std::string to_string(const Action& action) {
  const char* name = "?";
  const char* direction = "";
  switch (action.kind) {
    case ActionKind::FORWARD: name = "F"; break;
    case ActionKind::BACKWARD_FULL: name = "B"; break;
    case ActionKind::BACKWARD_INPUT: name = "I"; break;
    case ActionKind::BACKWARD_WEIGHT: name = "W"; break;
    case ActionKind::SEND_ACT:
      name = "SEND_ACT";
      direction = " to r";
      break;
    case ActionKind::RECV_ACT:
      name = "RECV_ACT";
      direction = " from r";
      break;
    case ActionKind::SEND_GRAD:
      name = "SEND_GRAD";
      direction = " to r";
      break;
    case ActionKind::RECV_GRAD:
      name = "RECV_GRAD";
      direction = " from r";
      break;
  }
  std::string text = detail::concat(name, " s", action.stage, " m", action.microbatch);
  if (!action.is_compute()) text += detail::concat(direction, action.peer);
  return text;
}

std::vector<std::vector<Action>> add_send_recv(const std::vector<std::vector<Action>>& computes,
                                               const StagePlacement& placement) {
  const int64_t last = placement.num_stages() - 1;
  std::vector<std::vector<Action>> ranks(computes.size());
  for (size_t r = 0; r < computes.size(); ++r) {
    const int64_t rank = static_cast<int64_t>(r);
    // The rank of stage `s`, or -1 when it is this rank or no stage: no message then.
    auto remote = [&](int64_t s) {
      if (s < 0 || s > last) return int64_t{-1};
      const int64_t other = placement.rank_of(s);
      return other == rank ? int64_t{-1} : other;
    };
    for (const Action& action : computes[r]) {
      const int64_t s = action.stage;
      const int64_t i = action.microbatch;
      const bool produces_input_grad =
          action.kind == ActionKind::BACKWARD_FULL || action.kind == ActionKind::BACKWARD_INPUT;
      if (action.kind == ActionKind::FORWARD && remote(s - 1) >= 0) {
        ranks[r].push_back({ActionKind::RECV_ACT, s, i, remote(s - 1)});
      }
      if (produces_input_grad && remote(s + 1) >= 0) {
        ranks[r].push_back({ActionKind::RECV_GRAD, s, i, remote(s + 1)});
      }
      ranks[r].push_back(action);
      if (action.kind == ActionKind::FORWARD && remote(s + 1) >= 0) {
        ranks[r].push_back({ActionKind::SEND_ACT, s, i, remote(s + 1)});
      }
      if (produces_input_grad && remote(s - 1) >= 0) {
        ranks[r].push_back({ActionKind::SEND_GRAD, s, i, remote(s - 1)});
      }
    }
  }
  return ranks;
}

std::vector<std::vector<Action>> forward_only_actions(const StagePlacement& placement,
                                                      int64_t microbatches) {
  std::vector<std::vector<Action>> computes(static_cast<size_t>(placement.pp()));
  for (int64_t rank = 0; rank < placement.pp(); ++rank) {
    std::vector<int64_t> stages = placement.stages_of(rank);
    std::sort(stages.begin(), stages.end());
    for (int64_t i = 0; i < microbatches; ++i) {
      for (int64_t stage : stages) {
        computes[static_cast<size_t>(rank)].push_back(compute(ActionKind::FORWARD, stage, i));
      }
    }
  }
  return add_send_recv(computes, placement);
}

ValueOrRefusal<PipelineSchedule> generate_schedule(ScheduleKind kind, int64_t pp,
                                                   int64_t stages_per_rank, int64_t microbatches) {
  using Result = ValueOrRefusal<PipelineSchedule>;
  const std::string_view name = kScheduleKindNames.name(kind);
  const int64_t v = stages_per_rank;
  const int64_t m = microbatches;
  if (pp < 1 || v < 1 || m < 1) {
    return Result::refused(detail::concat(name, ": pp ", pp, ", ", v, " stages per rank and ", m,
                                          " microbatches; each must be at least 1"));
  }
  if (is_single_stage(kind) && v != 1) {
    return Result::refused(
        detail::concat(name, " runs 1 stage per rank, got ", v,
                       "; use 1, or Interleaved1F1B or InterleavedZeroBubble for more"));
  }
  if (kind == ScheduleKind::ZBV_ZERO_BUBBLE && v != 2) {
    return Result::refused(detail::concat(name, " runs exactly 2 stages per rank (a V), got ", v,
                                          "; use 2, or InterleavedZeroBubble for other counts"));
  }
  const bool interleaved =
      kind == ScheduleKind::INTERLEAVED_1F1B || kind == ScheduleKind::INTERLEAVED_ZERO_BUBBLE;
  // Fewer microbatches than pp leave ranks idle but are valid, as torch has them: only the
  // interleaved rounds must divide, or a stage would be handed a microbatch that does not exist.
  if (interleaved) {
    const int64_t rounds = std::max<int64_t>(1, m / pp);
    if (m % rounds != 0) {
      return Result::refused(detail::concat(
          name, " runs the microbatches in ", rounds, " rounds (microbatches / pp), and ", m,
          " microbatches do not divide into them; use a multiple of ", rounds, " such as ",
          m - m % rounds, " or ", m - m % rounds + rounds));
    }
  }

  StagePlacement placement(placement_style(kind), pp, v);
  std::vector<std::vector<Action>> compute_ops;
  for (int64_t rank = 0; rank < pp; ++rank) {
    switch (kind) {
      case ScheduleKind::GPIPE: compute_ops.push_back(gpipe_rank(rank, m)); break;
      case ScheduleKind::ONE_F_ONE_B: compute_ops.push_back(one_f_one_b_rank(rank, pp, m)); break;
      case ScheduleKind::INTERLEAVED_1F1B:
        compute_ops.push_back(interleaved_rank(rank, pp, v, m, false));
        break;
      case ScheduleKind::INTERLEAVED_ZERO_BUBBLE:
        compute_ops.push_back(interleaved_rank(rank, pp, v, m, true));
        break;
      case ScheduleKind::ZBV_ZERO_BUBBLE: compute_ops.push_back(zbv_rank(rank, pp, m)); break;
    }
  }
  return PipelineSchedule{kind, m, placement, add_send_recv(compute_ops, placement)};
}

}  // namespace titan::parallel::pipeline
