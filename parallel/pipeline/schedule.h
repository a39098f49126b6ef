// Pipeline schedules as data (docs/architecture.md, decision 17): generate_schedule turns
// (schedule, pp, stages per rank v, microbatches m) into each rank's ordered list of actions,
// sends and receives included, which the simulator (schedule_simulator.h) proves and a future
// executor runs. The orders are those of torch.distributed.pipelining (GPipe, 1F1B,
// Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble), with torch's names, so a titan_train
// run and a torchtitan run of the same configuration do the same work in the same order.
//
// A receive is placed right before the compute that needs it and a send right after the compute
// that produces it; stages on the same rank hand over without either. The stage and microbatch
// of a send or receive are those of the stage on this rank (SEND_ACT s1 m0 is stage 1's output
// going to stage 2; the RECV_ACT s2 m0 on stage 2's rank takes it), as in torch's _Action.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.h"
#include "parallel/pipeline/stage_placement.h"
#include "parallel/pipeline/value_or_refusal.h"

namespace titan::parallel::pipeline {

enum class ScheduleKind {
  GPIPE,                    // all forwards, then all backwards: m microbatches of activations
  ONE_F_ONE_B,              // warm up, then alternate: at most pp microbatches of activations
  INTERLEAVED_1F1B,         // 1F1B over v looped stages per rank: the bubble shrinks by ~v
  INTERLEAVED_ZERO_BUBBLE,  // ZB1P: the backward split into input and weight gradients
  ZBV_ZERO_BUBBLE,          // ZB-V: two stages per rank in a V, split backward
};

inline constexpr EnumName<ScheduleKind> kScheduleKindNameList[] = {
    {ScheduleKind::GPIPE, "GPipe"},
    {ScheduleKind::ONE_F_ONE_B, "1F1B"},
    {ScheduleKind::INTERLEAVED_1F1B, "Interleaved1F1B"},
    {ScheduleKind::INTERLEAVED_ZERO_BUBBLE, "InterleavedZeroBubble"},
    {ScheduleKind::ZBV_ZERO_BUBBLE, "ZBVZeroBubble"},
};
inline constexpr EnumNames<ScheduleKind> kScheduleKindNames{"pipeline schedule",
                                                            kScheduleKindNameList};

// The schedule `text` names (torch's spelling, exactly); refused with the allowed names and
// `key` (the caller's option name) otherwise.
ValueOrRefusal<ScheduleKind> parse_schedule_kind(std::string_view text, std::string_view key);

bool is_single_stage(ScheduleKind kind);  // GPipe, 1F1B: one stage per rank
bool splits_backward(ScheduleKind kind);  // the zero-bubble schedules: I and W, not B
PlacementStyle placement_style(ScheduleKind kind);

enum class ActionKind {
  FORWARD,
  BACKWARD_FULL,    // input and weight gradients at once
  BACKWARD_INPUT,   // the input gradient only: what the previous stage waits for
  BACKWARD_WEIGHT,  // the weight gradient, deferred to fill a bubble
  SEND_ACT,
  RECV_ACT,
  SEND_GRAD,
  RECV_GRAD,
};

struct Action {
  ActionKind kind = ActionKind::FORWARD;
  int64_t stage = 0;
  int64_t microbatch = 0;
  int64_t peer = -1;  // the other rank of a send or receive; -1 for compute

  bool is_compute() const;
  bool is_send() const;     // SEND_ACT or SEND_GRAD
  bool is_receive() const;  // RECV_ACT or RECV_GRAD
  bool operator==(const Action&) const = default;
};

// "F s0 m1", "B s2 m0", "I s1 m3", "W s1 m3", "SEND_ACT s0 m1 to r1", "RECV_GRAD s0 m1 from r1".
std::string to_string(const Action& action);

struct PipelineSchedule {
  ScheduleKind kind;
  int64_t microbatches;
  StagePlacement placement;
  std::vector<std::vector<Action>> ranks;  // [pp] each rank's actions in the order it runs them

  int64_t pp() const { return placement.pp(); }
  int64_t num_stages() const { return placement.num_stages(); }
};

// Refused (one line: what, the value, what to do) when:
//   pp, v or m is below 1;
//   GPipe or 1F1B with v ≠ 1, ZBVZeroBubble with v ≠ 2;
//   Interleaved1F1B or InterleavedZeroBubble with m not a multiple of the rounds max(1, m / pp)
//     (torch's rule: m 10 on pp 4 is two rounds of 5; m 11 would give stage r an 12th
//     microbatch and is refused; any m ≤ pp is one round).
// Fewer microbatches than pp are accepted, as torch accepts them: the lists are valid (the
// simulator proves them) and the bubble shows what they cost.
ValueOrRefusal<PipelineSchedule> generate_schedule(ScheduleKind kind, int64_t pp,
                                                   int64_t stages_per_rank, int64_t microbatches);

// Forward passes only (validation): every rank runs, microbatch by microbatch, the forward of
// each stage it holds in stage order, with the sends and receives between them. Every forward
// waits only on a lower stage of the same microbatch, so the lists cannot deadlock.
std::vector<std::vector<Action>> forward_only_actions(const StagePlacement& placement,
                                                      int64_t microbatches);

// The compute actions of each rank in order, and the sends and receives they need: one
// receive before each compute whose input comes from another rank, one send after each
// compute whose output goes to another rank.
std::vector<std::vector<Action>> add_send_recv(const std::vector<std::vector<Action>>& computes,
                                               const StagePlacement& placement);

}  // namespace titan::parallel::pipeline
