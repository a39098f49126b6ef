// A process a test starts and then watches, signals or kills while it runs: for the tests of
// preemption and of jobs killed mid-save. run_process (process.h) waits; this does not.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace titan::testing {

class BackgroundProcess {
 public:
  // Starts `command` through /bin/sh in the source tree, in a session of its own (so that
  // mpirun and its ranks can be found and killed together), stdout and stderr going to
  // <log_prefix>.out and <log_prefix>.err.
  BackgroundProcess(const std::string& command, const std::string& log_prefix);
  ~BackgroundProcess();  // kills whatever of the session still runs
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  // The exit code once the shell has exited (128 + N for a signal N), without blocking.
  std::optional<int> poll();
  // Waits up to `seconds` for the exit; then kills the session and returns nullopt.
  std::optional<int> wait_for(double seconds);
  // Waits up to `seconds` until stdout holds `text`; false on timeout or exit.
  bool wait_for_output(const std::string& text, double seconds);

  // The session's live processes whose command name is `name` (e.g. the titan_train ranks).
  std::vector<pid_t> processes_named(const std::string& name) const;
  // The live process `name` that the launcher made world rank `world_rank` (its environment's
  // OMPI_COMM_WORLD_RANK, PMIX_RANK or SLURM_PROCID); nullopt when there is none (yet).
  std::optional<pid_t> rank_process(const std::string& name, int world_rank) const;
  void kill_session(int signal) const;

  std::string out() const;
  std::string err() const;

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string log_prefix_;
};

}  // namespace titan::testing
