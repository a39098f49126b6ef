// Runs every rank's action list of a PipelineSchedule with no communication and no model, to
// prove it before anything real runs: no deadlock, every message matched, every dependency
// respected, every gradient complete. It then measures the makespan, the bubble and the peak
// activations under stated costs.
//
// Time: each compute takes its cost (integer time units); sends and receives take none. A rank
// runs its list in order; a receive waits until the matching send has happened on the peer (a
// send never waits: the receiver buffers), and then the rank's clock is the later of the two.
// This is the lock-step time of the ranks with every message free.
//
// Activations: a forward adds one (stage, microbatch) to its rank's held activations; a full
// backward frees it, and with a split backward the weight-gradient step W frees it, not the
// input-gradient step I, because W still reads the inputs of every linear that the forward
// saved. The peak is therefore what the executor's memory must hold at least, in units of one
// stage's activations for one microbatch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/value_or_refusal.h"

namespace titan::parallel::pipeline {

// The cost of each compute in time units. The defaults are the zero-bubble papers' model: a
// backward costs twice a forward, split evenly between the input and the weight gradient.
struct SimulationCosts {
  int64_t forward = 1;
  int64_t backward_full = 2;
  int64_t backward_input = 1;
  int64_t backward_weight = 1;

  int64_t of(ActionKind kind) const;  // 0 for sends and receives
};

// One compute in time: [start, end) on its rank.
struct TimedAction {
  Action action;
  int64_t start = 0;
  int64_t end = 0;
};

struct RankFigures {
  int64_t busy = 0;       // time spent computing
  int64_t idle = 0;       // makespan − busy
  double bubble = 0;      // idle / makespan
  int64_t peak_held = 0;  // the most (stage, microbatch) activations held at once
};

struct Simulation {
  SimulationCosts costs;  // what it was simulated with
  int64_t makespan = 0;
  double bubble = 0;                               // idle time of all ranks / (pp × makespan)
  std::vector<RankFigures> ranks;                  // [pp]
  std::vector<std::vector<TimedAction>> timeline;  // [pp] the computes of each rank, in order
};

// The figures of a valid schedule, or one line naming the first fault: the rank, the action
// (its index in the rank's list and to_string), and what is wrong with it; on a deadlock, the
// action every unfinished rank is stuck at and what it waits for.
ValueOrRefusal<Simulation> simulate(const PipelineSchedule& schedule,
                                    const SimulationCosts& costs = {});
// The same with each action's own cost ([pp][index in the rank's list]; sends and receives
// ignored) in place of its kind's: a run's measured times (pipeline::replay_run). Its
// Simulation::costs are the defaults, which priced nothing.
ValueOrRefusal<Simulation> simulate(const PipelineSchedule& schedule,
                                    const std::vector<std::vector<int64_t>>& own_costs);

// The bubble of a run, measured in the simulator's terms (Simulation::bubble): 1 − the ranks'
// compute time / (ranks × the slowest rank's pipeline time), from each rank's pipeline time
// (`seconds`: its whole list, from its start to its last send) and the part of it spent waiting
// on a message (`waits`). It is not the mean of the ranks' own shares waits / seconds: a rank
// whose list ends early idles until the slowest rank's ends, but in the step's next collective,
// where its pipeline timer does not see it. 0 when nothing was timed.
double measured_bubble(const std::vector<double>& seconds, const std::vector<double>& waits);
// The same from totals over the ranks: their summed pipeline time and wait, and the slowest
// one's pipeline time.
double measured_bubble(double total_seconds, double total_waits, int64_t ranks, double slowest);

// How a transport tells messages apart: by the order they were posted in only (one channel:
// NCCL), or also by their kind, activations and gradients on two channels (the executor's MPI
// tags).
enum class MessageChannels { ONE, PER_KIND };

// Whether, between every two ranks (and, per kind, within each channel), the receives of a list
// come in the order of the sender's sends, as a transport that matches messages in post order
// needs. Empty when they do; otherwise one line naming the pair of ranks and the first send and
// receive that cross. simulate() refuses lists that fail MessageChannels::PER_KIND, the
// executor's transport.
std::string message_order_fault(const PipelineSchedule& schedule, MessageChannels channels);

}  // namespace titan::parallel::pipeline
