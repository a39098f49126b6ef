// Preemption: SIGTERM or SIGUSR1 (what Slurm sends with --signal, and what a scheduler sends
// before it takes the nodes back) asks the job to stop cleanly: every rank finishes the step it
// is in, the job saves a checkpoint of that step and exits with ExitCode::Preempted (75).
//
// A signal may reach only some ranks (kill of one pid, a signal to one node). Ranks therefore
// agree after every step, in one small all-reduce, whether any rank was signalled; all of them
// stop after the same step. The handler only sets a flag: nothing else is safe in a signal
// handler, and the training thread acts on it at the step boundary.
#pragma once

namespace titan::app {

// Installs the handlers for SIGTERM and SIGUSR1 (idempotent). Until then those signals keep
// their default action (SIGTERM ends the process).
void install_preemption_handlers();

// Whether this process received one of the signals since the handlers were installed, and
// which (0 for none).
int preemption_signal();

// For tests: forget a received signal.
void reset_preemption_signal();

}  // namespace titan::app
