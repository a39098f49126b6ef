#include "parallel/pipeline/run_replay.h"

#include <utility>

#include "core/check.h"

namespace titan::parallel::pipeline {
namespace {

// One rank's list as it ran, and each action's cost; or one line on the first compute out of
// place.
struct RankAsRun {
  std::vector<Action> actions;
  std::vector<int64_t> costs;
  std::string fault;
};

RankAsRun rank_as_run(const std::vector<Action>& list, const std::vector<RanCompute>& ran,
                      int64_t rank) {
  RankAsRun out;
  std::vector<bool> placed(list.size(), false);
  auto place = [&](size_t k, int64_t cost) {
    placed[k] = true;
    out.actions.push_back(list[k]);
    out.costs.push_back(cost);
  };
  auto fault = [&](const RanCompute& c, const std::string& why) {
    const bool listed = c.index >= 0 && static_cast<size_t>(c.index) < list.size();
    const std::string what = listed ? to_string(list[static_cast<size_t>(c.index)]) : "";
    out.fault = detail::concat("rank ", rank, " ran action ", c.index, listed ? " (" : "", what,
                               listed ? ") " : " ", why);
  };
  size_t next = 0;  // every action before it is placed
  for (const RanCompute& c : ran) {
    if (c.index < 0 || static_cast<size_t>(c.index) >= list.size()) {
      fault(c, detail::concat("of a list of ", list.size()));
      return out;
    }
    const size_t k = static_cast<size_t>(c.index);
    if (!list[k].is_compute()) {
      fault(c, "as a compute");
      return out;
    }
    if (placed[k]) {
      fault(c, "twice");
      return out;
    }
    if (c.cost < 0) {
      fault(c, detail::concat("in ", c.cost, " time units"));
      return out;
    }
    // The first compute of the list not run yet: everything before it has run or was posted.
    size_t due = next;
    while (due < list.size() && (placed[due] || !list[due].is_compute())) ++due;
    if (k == due) {
      for (; next < k; ++next) {
        if (!placed[next]) place(next, 0);
      }
      place(k, c.cost);
      next = k + 1;
      continue;
    }
    // Ahead of its place: only a W may run there, in place of the wait of the compute due.
    if (list[k].kind != ActionKind::BACKWARD_WEIGHT) {
      fault(c, detail::concat("before ", to_string(list[due]), ", which precedes it"));
      return out;
    }
    for (size_t s = next; s < due; ++s) {
      if (!placed[s] && list[s].is_send()) place(s, 0);
    }
    place(k, c.cost);
  }
  for (; next < list.size(); ++next) {
    if (placed[next]) continue;
    if (list[next].is_compute()) {
      out.fault = detail::concat("rank ", rank, " never ran action ", next, " (",
                                 to_string(list[next]), ")");
      return out;
    }
    place(next, 0);
  }
  return out;
}

// Every rank's list as it ran, with each action's cost ([pp][index in the list as run]).
ValueOrRefusal<std::pair<PipelineSchedule, std::vector<std::vector<int64_t>>>> lists_as_run(
    const PipelineSchedule& schedule, const std::vector<std::vector<RanCompute>>& ran) {
  using Result = ValueOrRefusal<std::pair<PipelineSchedule, std::vector<std::vector<int64_t>>>>;
  if (ran.size() != schedule.ranks.size()) {
    return Result::refused(detail::concat("pipeline replay: the run of ", ran.size(),
                                          " ranks for a schedule of pp ", schedule.ranks.size()));
  }
  PipelineSchedule as_ran = schedule;
  std::vector<std::vector<int64_t>> costs;
  for (size_t r = 0; r < ran.size(); ++r) {
    RankAsRun rank = rank_as_run(schedule.ranks[r], ran[r], static_cast<int64_t>(r));
    if (!rank.fault.empty()) return Result::refused("pipeline replay: " + rank.fault);
    as_ran.ranks[r] = std::move(rank.actions);
    costs.push_back(std::move(rank.costs));
  }
  return std::make_pair(std::move(as_ran), std::move(costs));
}

}  // namespace

ValueOrRefusal<PipelineSchedule> as_run(const PipelineSchedule& schedule,
                                        const std::vector<std::vector<RanCompute>>& ran) {
  ValueOrRefusal<std::pair<PipelineSchedule, std::vector<std::vector<int64_t>>>> lists =
      lists_as_run(schedule, ran);
  if (!lists) return ValueOrRefusal<PipelineSchedule>::refused(lists.error());
  return std::move(lists).value().first;
}

ValueOrRefusal<Simulation> replay_run(const PipelineSchedule& schedule,
                                      const std::vector<std::vector<RanCompute>>& ran) {
  ValueOrRefusal<std::pair<PipelineSchedule, std::vector<std::vector<int64_t>>>> lists =
      lists_as_run(schedule, ran);
  if (!lists) return ValueOrRefusal<Simulation>::refused(lists.error());
  const auto& [as_ran, costs] = lists.value();
  return simulate(as_ran, costs);
}

ValueOrRefusal<double> replayed_bubble(
    const PipelineSchedule& schedule,
    const std::vector<std::vector<std::vector<RanCompute>>>& runs) {
  double idle = 0, span = 0;
  for (const std::vector<std::vector<RanCompute>>& ran : runs) {
    ValueOrRefusal<Simulation> replayed = replay_run(schedule, ran);
    if (!replayed) return ValueOrRefusal<double>::refused(replayed.error());
    for (const RankFigures& rank : replayed.value().ranks) idle += static_cast<double>(rank.idle);
    span += static_cast<double>(schedule.pp() * replayed.value().makespan);
  }
  return span > 0 ? idle / span : 0.0;
}

}  // namespace titan::parallel::pipeline
