#include "parallel/pipeline/schedule_simulator.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "core/check.h"

namespace titan::parallel::pipeline {
namespace {

// A message: activation (true) or gradient, from, to, the stage that produced it, microbatch.
using MessageKey = std::tuple<bool, int64_t, int64_t, int64_t, int64_t>;
// A compute that happened on a rank: kind, stage, microbatch.
using ComputeKey = std::tuple<ActionKind, int64_t, int64_t>;

bool is_activation(ActionKind kind) {
  return kind == ActionKind::SEND_ACT || kind == ActionKind::RECV_ACT;
}

// The message a send or receive on `rank` moves.
MessageKey message_of(const Action& action, int64_t rank) {
  switch (action.kind) {
    case ActionKind::SEND_ACT: return {true, rank, action.peer, action.stage, action.microbatch};
    case ActionKind::RECV_ACT:
      return {true, action.peer, rank, action.stage - 1, action.microbatch};
    case ActionKind::SEND_GRAD: return {false, rank, action.peer, action.stage, action.microbatch};
    case ActionKind::RECV_GRAD:
      return {false, action.peer, rank, action.stage + 1, action.microbatch};
    default: TT_CHECK(false, "not a message: ", to_string(action));
  }
  return {};
}

std::string describe_message(const MessageKey& key) {
  const auto& [activation, from, to, stage, microbatch] = key;
  return detail::concat(activation ? "SEND_ACT s" : "SEND_GRAD s", stage, " m", microbatch, " to r",
                        to);
}

}  // namespace

std::string message_order_fault(const PipelineSchedule& schedule, MessageChannels channels) {
  // By (from, to, channel): the messages in the order the sender sends them, and in the order
  // the receiver takes them.
  std::map<std::tuple<int64_t, int64_t, int>, std::vector<MessageKey>> sent, received;
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    const int64_t rank = static_cast<int64_t>(r);
    for (const Action& a : schedule.ranks[r]) {
      if (a.is_compute()) continue;
      const MessageKey key = message_of(a, rank);
      const int channel = channels == MessageChannels::PER_KIND && !std::get<0>(key) ? 1 : 0;
      const auto stream = std::make_tuple(std::get<1>(key), std::get<2>(key), channel);
      (a.is_send() ? sent : received)[stream].push_back(key);
    }
  }
  for (const auto& [stream, out] : sent) {
    const std::vector<MessageKey>& in = received[stream];
    for (size_t k = 0; k < std::min(out.size(), in.size()); ++k) {
      if (out[k] != in[k]) {
        const auto& [from, to, channel] = stream;
        return detail::concat("rank ", from, " to rank ", to,
                              channels == MessageChannels::PER_KIND
                                  ? (channel == 0 ? " (activations)" : " (gradients)")
                                  : "",
                              ": message ", k, " sent is ", describe_message(out[k]), " but rank ",
                              to, "'s receive ", k, " takes ", describe_message(in[k]));
      }
    }
  }
  return "";
}

namespace {

class Simulator {
 public:
  Simulator(const PipelineSchedule& schedule, const SimulationCosts& costs,
            const std::vector<std::vector<int64_t>>* own_costs = nullptr)
      : schedule_(schedule),
        costs_(costs),
        own_costs_(own_costs),
        placement_(schedule.placement),
        last_stage_(schedule.num_stages() - 1) {}

  ValueOrRefusal<Simulation> run() {
    if (static_cast<int64_t>(schedule_.ranks.size()) != placement_.pp()) {
      return ValueOrRefusal<Simulation>::refused(detail::concat(
          prefix(), "has ", schedule_.ranks.size(), " rank lists for pp ", placement_.pp()));
    }
    if (std::string fault = check_costs(); !fault.empty()) return refuse(fault);
    if (std::string fault = check_actions(); !fault.empty()) return refuse(fault);
    if (std::string fault = check_matching(); !fault.empty()) return refuse(fault);
    if (std::string fault = execute(); !fault.empty()) return refuse(fault);
    // Runnable with every message buffered; and the executor's transport must match each
    // receive to its send by post order within a kind.
    if (std::string fault = message_order_fault(schedule_, MessageChannels::PER_KIND);
        !fault.empty()) {
      return refuse(fault);
    }
    if (std::string fault = check_complete(); !fault.empty()) return refuse(fault);
    return figures();
  }

 private:
  std::string prefix() const {
    return detail::concat("pipeline schedule ", kScheduleKindNames.name(schedule_.kind), " (pp ",
                          placement_.pp(), ", v ", placement_.stages_per_rank(), ", m ",
                          schedule_.microbatches, "): ");
  }
  ValueOrRefusal<Simulation> refuse(const std::string& fault) const {
    return ValueOrRefusal<Simulation>::refused(prefix() + fault);
  }
  std::string at(int64_t rank, size_t index) const {
    return detail::concat("rank ", rank, " action ", index, " (",
                          to_string(schedule_.ranks[static_cast<size_t>(rank)][index]), ")");
  }

  // Own costs, when given: one per action of every rank's list, none negative.
  std::string check_costs() const {
    if (own_costs_ == nullptr) return "";
    const std::vector<std::vector<int64_t>>& own = *own_costs_;
    if (own.size() != schedule_.ranks.size()) {
      return detail::concat("own costs for ", own.size(), " ranks, the list has ",
                            schedule_.ranks.size());
    }
    for (size_t r = 0; r < own.size(); ++r) {
      if (own[r].size() != schedule_.ranks[r].size()) {
        return detail::concat("rank ", r, ": ", own[r].size(), " own costs for ",
                              schedule_.ranks[r].size(), " actions");
      }
      for (size_t k = 0; k < own[r].size(); ++k) {
        if (own[r][k] < 0)
          return detail::concat(at(static_cast<int64_t>(r), k), ": cost ", own[r][k]);
      }
    }
    return "";
  }

  // Each action on its own: stage and microbatch in range, compute on the rank that holds the
  // stage, a message to or from the rank of the neighbouring stage.
  std::string check_actions() const {
    for (int64_t rank = 0; rank < placement_.pp(); ++rank) {
      const std::vector<Action>& actions = schedule_.ranks[static_cast<size_t>(rank)];
      for (size_t k = 0; k < actions.size(); ++k) {
        const Action& a = actions[k];
        if (a.stage < 0 || a.stage > last_stage_ || a.microbatch < 0 ||
            a.microbatch >= schedule_.microbatches) {
          return detail::concat(at(rank, k), ": no such stage or microbatch (stages 0-",
                                last_stage_, ", microbatches 0-", schedule_.microbatches - 1, ")");
        }
        if (placement_.rank_of(a.stage) != rank) {
          return detail::concat(at(rank, k), ": stage ", a.stage, " is on rank ",
                                placement_.rank_of(a.stage), "; move the action there");
        }
        if (a.is_compute()) continue;
        const bool toward_next = a.kind == ActionKind::SEND_ACT || a.kind == ActionKind::RECV_GRAD;
        const int64_t neighbour = toward_next ? a.stage + 1 : a.stage - 1;
        if (neighbour < 0 || neighbour > last_stage_) {
          return detail::concat(at(rank, k), ": stage ", a.stage, " has no stage ", neighbour,
                                " to exchange with; remove it");
        }
        const int64_t expected = placement_.rank_of(neighbour);
        if (expected == rank) {
          return detail::concat(at(rank, k), ": stage ", neighbour,
                                " is on this rank and needs no message; remove it");
        }
        if (a.peer != expected) {
          return detail::concat(at(rank, k), ": stage ", neighbour, " is on rank ", expected,
                                ", not rank ", a.peer, "; use peer ", expected);
        }
      }
    }
    return "";
  }

  // Every send received exactly once by its peer, every receive sent exactly once.
  std::string check_matching() const {
    std::map<MessageKey, std::vector<std::pair<int64_t, size_t>>> sends, receives;
    for (int64_t rank = 0; rank < placement_.pp(); ++rank) {
      const std::vector<Action>& actions = schedule_.ranks[static_cast<size_t>(rank)];
      for (size_t k = 0; k < actions.size(); ++k) {
        if (actions[k].is_compute()) continue;
        auto& table = actions[k].is_send() ? sends : receives;
        table[message_of(actions[k], rank)].emplace_back(rank, k);
      }
    }
    for (const auto& [key, where] : sends) {
      const auto found = receives.find(key);
      const size_t received = found == receives.end() ? 0 : found->second.size();
      if (where.size() > 1)
        return detail::concat(at(where[1].first, where[1].second), ": sent twice");
      if (received == 0) {
        return detail::concat(at(where[0].first, where[0].second), ": rank ", std::get<2>(key),
                              " never receives it; add the matching receive there");
      }
    }
    for (const auto& [key, where] : receives) {
      if (where.size() > 1)
        return detail::concat(at(where[1].first, where[1].second), ": received twice");
      if (!sends.contains(key)) {
        return detail::concat(at(where[0].first, where[0].second), ": rank ", std::get<1>(key),
                              " never sends ", describe_message(key), "; add that send there");
      }
    }
    return "";
  }

  bool done(int64_t rank, ActionKind kind, int64_t stage, int64_t microbatch) const {
    return computed_[static_cast<size_t>(rank)].contains({kind, stage, microbatch});
  }
  bool backwarded(int64_t rank, int64_t stage, int64_t microbatch) const {
    return done(rank, ActionKind::BACKWARD_FULL, stage, microbatch) ||
           done(rank, ActionKind::BACKWARD_INPUT, stage, microbatch);
  }
  bool received(int64_t rank, bool activation, int64_t stage, int64_t microbatch) const {
    return arrived_[static_cast<size_t>(rank)].contains({activation, stage, microbatch});
  }

  // Why the compute at (rank, k) cannot run now, or "" when its inputs are on the rank.
  std::string compute_fault(int64_t rank, size_t k) const {
    const Action& a = schedule_.ranks[static_cast<size_t>(rank)][k];
    const int64_t s = a.stage;
    const int64_t i = a.microbatch;
    switch (a.kind) {
      case ActionKind::FORWARD:
        if (done(rank, ActionKind::FORWARD, s, i))
          return detail::concat(at(rank, k), ": runs twice");
        if (s == 0) return "";
        if (placement_.rank_of(s - 1) == rank) {
          return done(rank, ActionKind::FORWARD, s - 1, i)
                     ? ""
                     : detail::concat(at(rank, k), ": runs before F s", s - 1, " m", i,
                                      " (same rank) has produced its input");
        }
        return received(rank, true, s, i)
                   ? ""
                   : detail::concat(at(rank, k), ": its input from stage ", s - 1,
                                    " has not arrived; put RECV_ACT s", s, " m", i, " from r",
                                    placement_.rank_of(s - 1), " before it");
      case ActionKind::BACKWARD_FULL:
      case ActionKind::BACKWARD_INPUT:
        if (backwarded(rank, s, i))
          return detail::concat(at(rank, k), ": backward of it runs twice");
        if (!done(rank, ActionKind::FORWARD, s, i)) {
          return detail::concat(at(rank, k), ": runs before its forward F s", s, " m", i);
        }
        if (s == last_stage_) return "";
        if (placement_.rank_of(s + 1) == rank) {
          return backwarded(rank, s + 1, i)
                     ? ""
                     : detail::concat(at(rank, k), ": runs before the backward of stage ", s + 1,
                                      " m", i, " (same rank) has produced its gradient");
        }
        return received(rank, false, s, i)
                   ? ""
                   : detail::concat(at(rank, k), ": its gradient from stage ", s + 1,
                                    " has not arrived; put RECV_GRAD s", s, " m", i, " from r",
                                    placement_.rank_of(s + 1), " before it");
      case ActionKind::BACKWARD_WEIGHT:
        if (done(rank, ActionKind::BACKWARD_WEIGHT, s, i))
          return detail::concat(at(rank, k), ": runs twice");
        if (done(rank, ActionKind::BACKWARD_FULL, s, i)) {
          return detail::concat(at(rank, k), ": the full backward B s", s, " m", i,
                                " already made the weight gradient; remove it");
        }
        return done(rank, ActionKind::BACKWARD_INPUT, s, i)
                   ? ""
                   : detail::concat(at(rank, k), ": runs before its input-gradient step I s", s,
                                    " m", i);
      default: return "";
    }
  }

  // Why the send at (rank, k) is wrong, or "": a send follows the compute that produced it.
  std::string send_fault(int64_t rank, size_t k) const {
    const Action& a = schedule_.ranks[static_cast<size_t>(rank)][k];
    if (a.kind == ActionKind::SEND_ACT) {
      return done(rank, ActionKind::FORWARD, a.stage, a.microbatch)
                 ? ""
                 : detail::concat(at(rank, k), ": sends the output of F s", a.stage, " m",
                                  a.microbatch, " before computing it; move it after that forward");
    }
    return backwarded(rank, a.stage, a.microbatch)
               ? ""
               : detail::concat(at(rank, k), ": sends the gradient of stage ", a.stage, " m",
                                a.microbatch,
                                " before its backward computes it; move it after that backward");
  }

  // Advances every rank as far as it can until all are done, a fault, or a deadlock.
  std::string execute() {
    const size_t pp = static_cast<size_t>(placement_.pp());
    next_.assign(pp, 0);
    clock_.assign(pp, 0);
    held_.assign(pp, 0);
    peak_.assign(pp, 0);
    busy_.assign(pp, 0);
    computed_.assign(pp, {});
    arrived_.assign(pp, {});
    timeline_.assign(pp, {});
    bool progress = true;
    while (progress) {
      progress = false;
      for (int64_t rank = 0; rank < placement_.pp(); ++rank) {
        const size_t r = static_cast<size_t>(rank);
        const std::vector<Action>& actions = schedule_.ranks[r];
        while (next_[r] < actions.size()) {
          const size_t k = next_[r];
          const Action& a = actions[k];
          if (a.is_receive()) {
            const auto sent = sent_at_.find(message_of(a, rank));
            if (sent == sent_at_.end()) break;  // blocked until the peer sends
            clock_[r] = std::max(clock_[r], sent->second);
            arrived_[r].insert({is_activation(a.kind), a.stage, a.microbatch});
          } else if (a.is_send()) {
            if (std::string fault = send_fault(rank, k); !fault.empty()) return fault;
            sent_at_[message_of(a, rank)] = clock_[r];
          } else {
            if (std::string fault = compute_fault(rank, k); !fault.empty()) return fault;
            const int64_t cost = own_costs_ != nullptr ? (*own_costs_)[r][k] : costs_.of(a.kind);
            timeline_[r].push_back({a, clock_[r], clock_[r] + cost});
            clock_[r] += cost;
            busy_[r] += cost;
            computed_[r].insert({a.kind, a.stage, a.microbatch});
            if (a.kind == ActionKind::FORWARD) peak_[r] = std::max(peak_[r], ++held_[r]);
            if (a.kind == ActionKind::BACKWARD_FULL || a.kind == ActionKind::BACKWARD_WEIGHT) {
              --held_[r];
            }
          }
          ++next_[r];
          progress = true;
        }
      }
    }
    std::string stuck;
    for (int64_t rank = 0; rank < placement_.pp(); ++rank) {
      const size_t r = static_cast<size_t>(rank);
      if (next_[r] == schedule_.ranks[r].size()) continue;
      const Action& a = schedule_.ranks[r][next_[r]];
      const MessageKey key = message_of(a, rank);
      stuck += detail::concat(stuck.empty() ? "" : "; ", at(rank, next_[r]), " waits for rank ",
                              std::get<1>(key), "'s ", describe_message(key));
    }
    if (!stuck.empty()) return "deadlock: " + stuck;
    return "";
  }

  // Every (stage, microbatch) forwarded once and backwarded once, with its weight gradient.
  std::string check_complete() const {
    for (int64_t s = 0; s <= last_stage_; ++s) {
      const int64_t rank = placement_.rank_of(s);
      for (int64_t i = 0; i < schedule_.microbatches; ++i) {
        const std::string what = detail::concat("rank ", rank, ": stage ", s, " microbatch ", i);
        if (!done(rank, ActionKind::FORWARD, s, i)) return what + " is never forwarded";
        if (!backwarded(rank, s, i)) return what + " is never backwarded";
        if (done(rank, ActionKind::BACKWARD_INPUT, s, i) &&
            !done(rank, ActionKind::BACKWARD_WEIGHT, s, i)) {
          return what + " has no W: its weight gradient is incomplete; add W s" +
                 std::to_string(s) + " m" + std::to_string(i) + " after its I";
        }
      }
    }
    return "";
  }

  Simulation figures() const {
    Simulation sim;
    sim.costs = costs_;
    sim.makespan = *std::max_element(clock_.begin(), clock_.end());
    int64_t idle = 0;
    for (size_t r = 0; r < clock_.size(); ++r) {
      RankFigures rank;
      rank.busy = busy_[r];
      rank.idle = sim.makespan - busy_[r];
      rank.bubble = sim.makespan == 0 ? 0.0 : static_cast<double>(rank.idle) / sim.makespan;
      rank.peak_held = peak_[r];
      idle += rank.idle;
      sim.ranks.push_back(rank);
    }
    sim.bubble = sim.makespan == 0 ? 0.0
                                   : static_cast<double>(idle) /
                                         (static_cast<double>(clock_.size()) * sim.makespan);
    sim.timeline = timeline_;
    return sim;
  }

  const PipelineSchedule& schedule_;
  const SimulationCosts costs_;
  const std::vector<std::vector<int64_t>>* own_costs_;  // null: the kinds' costs
  const StagePlacement& placement_;
  const int64_t last_stage_;

  std::vector<size_t> next_;                    // [pp] index of each rank's next action
  std::vector<int64_t> clock_;                  // [pp] when each rank's next action can start
  std::vector<int64_t> held_;                   // [pp] activations held now
  std::vector<int64_t> peak_;                   // [pp] the most held
  std::vector<int64_t> busy_;                   // [pp]
  std::vector<std::set<ComputeKey>> computed_;  // [pp]
  std::vector<std::set<std::tuple<bool, int64_t, int64_t>>> arrived_;  // [pp] messages in
  std::map<MessageKey, int64_t> sent_at_;
  std::vector<std::vector<TimedAction>> timeline_;  // [pp]
};

}  // namespace

int64_t SimulationCosts::of(ActionKind kind) const {
  switch (kind) {
    case ActionKind::FORWARD: return forward;
    case ActionKind::BACKWARD_FULL: return backward_full;
    case ActionKind::BACKWARD_INPUT: return backward_input;
    case ActionKind::BACKWARD_WEIGHT: return backward_weight;
    default: return 0;
  }
}

ValueOrRefusal<Simulation> simulate(const PipelineSchedule& schedule,
                                    const SimulationCosts& costs) {
  return Simulator(schedule, costs).run();
}

ValueOrRefusal<Simulation> simulate(const PipelineSchedule& schedule,
                                    const std::vector<std::vector<int64_t>>& own_costs) {
  return Simulator(schedule, SimulationCosts{}, &own_costs).run();
}

double measured_bubble(double total_seconds, double total_waits, int64_t ranks, double slowest) {
  if (ranks <= 0 || slowest <= 0) return 0;
  return 1.0 - (total_seconds - total_waits) / (static_cast<double>(ranks) * slowest);
}

double measured_bubble(const std::vector<double>& seconds, const std::vector<double>& waits) {
  if (seconds.size() != waits.size()) return 0;
  double total = 0, waited = 0, slowest = 0;
  for (size_t r = 0; r < seconds.size(); ++r) {
    total += seconds[r];
    waited += waits[r];
    slowest = std::max(slowest, seconds[r]);
  }
  return measured_bubble(total, waited, static_cast<int64_t>(seconds.size()), slowest);
}

}  // namespace titan::parallel::pipeline
