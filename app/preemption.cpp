#include "app/preemption.h"

#include <csignal>

namespace titan::app {

namespace {

// Written by the handler, read by the training thread: a lock-free atomic flag is what a
// signal handler may touch.
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_preemption_signal(int signal) { g_signal = signal; }

}  // namespace

void install_preemption_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_preemption_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read or write the signal interrupts resumes instead of failing with EINTR.
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int preemption_signal() { return g_signal; }

void reset_preemption_signal() { g_signal = 0; }

}  // namespace titan::app
