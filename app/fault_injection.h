// Faults made on purpose, so that tests can check what the job does about each
// (docs/architecture.md#decision-12): the environment variable
//
//   TITAN_FAULT_INJECT=RANK:STEP[:KIND][,RANK:STEP[:KIND]]...
//
// makes world rank RANK (or every rank, for `*`) do KIND during step STEP:
//
//   throw             throw an exception at the start of the step (the default): one rank fails
//   hang              spin forever at the start of the step, outside communication: a rank stuck
//                     in a loop, which the MPI watchdog reports as not arrived
//   late              sleep 0.1 s at the start of the step: a rank that reaches the step's
//                     collectives a moment after the others, so that when a rank stops it times
//                     out a moment after them (which of them reports the stall)
//   stop              stop itself with SIGSTOP at the start of the step: a frozen process, which
//                     the watchdog reports as not answering
//   stop_after        stop itself with SIGSTOP once the step has ended (after its checkpoint):
//                     at the last step, a rank frozen at its exit while the others finalize MPI
//   nan_loss          make its share of the step's loss NaN: the loss is NaN on every rank
//   nan_grad          make one of its gradient elements NaN after backward: the global gradient
//                     norm is NaN while the loss is finite
//   extra_collective  post a barrier on the world that no other rank posts at the start of the
//                     step: the ranks disagree on the order of collectives
//
// A malformed value is bad input (exit 2), found before anything is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan::app {

enum class FaultKind { Throw, Hang, Late, Stop, StopAfter, NanLoss, NanGrad, ExtraCollective };

// How long a `late` rank sleeps: shorter than the time mpirun takes to end a job after one rank
// aborts it, so that two ranks whose timeouts are this far apart would both report if the later
// one did not count as reporting.
inline constexpr double kLateFaultSeconds = 0.1;

struct InjectedFault {
  int rank = -1;  // -1: every rank
  int64_t step = -1;
  FaultKind kind = FaultKind::Throw;
};

// Parses a TITAN_FAULT_INJECT value; InputError naming the variable, the value and the syntax.
std::vector<InjectedFault> parse_fault_injection(const std::string& spec);

// TITAN_FAULT_INJECT's faults; none when it is unset or empty.
std::vector<InjectedFault> injected_faults();

// Whether `faults` holds one of `kind` for world rank `rank` at `step`.
bool fault_due(const std::vector<InjectedFault>& faults, int rank, int64_t step, FaultKind kind);

}  // namespace titan::app
