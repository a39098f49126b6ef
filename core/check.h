// Error reporting for the whole project.
//
// Nothing in titan_train calls exit() or abort() on an error: every failure throws, so that
// app/ can decide what the job does about it (exit code 2 for bad input, MPI_Abort of the whole
// job for a failure on one rank). Two kinds of error exist because they need different
// handling, not because they are different bugs:
//
//   InputError  the user's input was wrong (config key, data file, sizes). The message is one
//               line: what was wrong, the value seen, and how to fix it. Exit code 2.
//   Error       an internal invariant or a library call failed. The message carries the file
//               and line of the check. Exit code 1.
//
// This header is included from .cu files too, so it uses only the standard library.
#pragma once

#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace titan {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

[[noreturn]] void check_failed(const char* expr, const std::string& message,
                               std::source_location where = std::source_location::current());

}  // namespace detail

// Throws InputError with a message built from the arguments (streamed, so shapes print).
template <class... Args>
[[noreturn]] void input_error(Args&&... args) {
  throw InputError(detail::concat(std::forward<Args>(args)...));
}

}  // namespace titan

// TT_CHECK(cond, message parts...): throws titan::Error naming the condition, file and line.
// The message parts are only evaluated when the check fails.
#define TT_CHECK(cond, ...)                                                                  \
  do {                                                                                       \
    if (!(cond)) [[unlikely]]                                                                \
      ::titan::detail::check_failed(#cond,                                                   \
                                    ::titan::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
