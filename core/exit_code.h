// The exit codes of every executable (titan_train, titan_tokenize, titan_convert, titan_bench),
// one table with each code's meaning: the mains return these, and titan_train --help and
// docs/config.md list them from the same table, so a new code is documented where it is added.
//
// 75 is EX_TEMPFAIL of <sysexits.h> ("temporary failure, try again"): a wrapper script or a
// requeue rule can tell "resubmit me" from a failure (1), bad input (2) or divergence (3).
#pragma once

#include <string_view>

namespace titan {

enum class ExitCode : int {
  Ok = 0,
  Failure = 1,
  BadInput = 2,
  Diverged = 3,
  Preempted = 75,
};

struct ExitCodeMeaning {
  ExitCode code;
  std::string_view meaning;
};

inline constexpr ExitCodeMeaning kExitCodes[] = {
    {ExitCode::Ok, "done"},
    {ExitCode::Failure,
     "internal error, or a rank that stopped answering (the watchdog's timeout)"},
    {ExitCode::BadInput, "bad input (one line naming the key or file, the value seen and the fix)"},
    {ExitCode::Diverged,
     "training diverged (the loss or gradient norm became NaN/Inf more often than the run may "
     "skip)"},
    {ExitCode::Preempted,
     "preempted: a SIGTERM/SIGUSR1 stopped the job after saving its step (start it again to "
     "resume)"},
};

// What main returns, and what MPI_Abort and _Exit take.
constexpr int exit_status(ExitCode code) { return static_cast<int>(code); }

}  // namespace titan
