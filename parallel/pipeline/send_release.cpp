#include "parallel/pipeline/send_release.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include "core/check.h"

namespace titan::parallel::pipeline {

std::vector<std::vector<int64_t>> send_release_points(const PipelineSchedule& schedule,
                                                      const Simulation& simulation) {
  const size_t pp = schedule.ranks.size();
  TT_CHECK(simulation.timeline.size() == pp, "send_release_points: a simulation of ",
           simulation.timeline.size(), " ranks for a schedule of ", pp);
  // Each action's post time: a send at the end of the compute before it, a receive at the start
  // of that compute (the executor posts a compute's receives as the compute before it starts);
  // 0 before the first compute. And each compute's start, by list index.
  std::vector<std::vector<int64_t>> posted(pp), starts(pp);
  for (size_t r = 0; r < pp; ++r) {
    const std::vector<Action>& list = schedule.ranks[r];
    const std::vector<TimedAction>& timed = simulation.timeline[r];
    posted[r].assign(list.size(), 0);
    starts[r].assign(list.size(), -1);
    size_t computes = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].is_compute()) {
        TT_CHECK(computes < timed.size() && timed[computes].action == list[i],
                 "send_release_points: rank ", r, "'s simulation does not follow its list at ",
                 to_string(list[i]));
        starts[r][i] = timed[computes++].start;
        continue;
      }
      if (computes > 0) {
        const TimedAction& before = timed[computes - 1];
        posted[r][i] = list[i].is_send() ? before.end : before.start;
      }
    }
  }
  // The receives of each (sender, receiver, kind) in the receiver's order: the k-th matches the
  // sender's k-th send of that kind to it.
  using Channel = std::tuple<int64_t, int64_t, bool>;  // sender, receiver, activations
  std::map<Channel, std::deque<size_t>> receives;
  for (size_t r = 0; r < pp; ++r) {
    const std::vector<Action>& list = schedule.ranks[r];
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_receive()) continue;
      receives[{list[i].peer, static_cast<int64_t>(r), list[i].kind == ActionKind::RECV_ACT}]
          .push_back(i);
    }
  }
  std::vector<std::vector<int64_t>> release(pp);
  for (size_t r = 0; r < pp; ++r) {
    const std::vector<Action>& list = schedule.ranks[r];
    release[r].assign(list.size(), -1);
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_send()) continue;
      const Action& send = list[i];
      std::deque<size_t>& matching =
          receives[{static_cast<int64_t>(r), send.peer, send.kind == ActionKind::SEND_ACT}];
      TT_CHECK(!matching.empty(), "send_release_points: ", to_string(send), " on rank ", r,
               " has no receive");
      const int64_t received = posted[static_cast<size_t>(send.peer)][matching.front()];
      matching.pop_front();
      const int64_t done = std::max(posted[r][i], received);
      int64_t gone = static_cast<int64_t>(list.size());
      for (size_t j = i + 1; j < list.size(); ++j) {
        if (starts[r][j] > done) {
          gone = static_cast<int64_t>(j);
          break;
        }
      }
      release[r][i] = gone;
    }
  }
  return release;
}

}  // namespace titan::parallel::pipeline
