// Whether any rank failed, agreed by every rank (docs/architecture.md#decision-12).
//
// Where a failure can be one rank's own (set-up, a checkpoint's writes and commit), a rank that
// threw alone would leave the others waiting in their next collective. So at such a point every
// rank reports its outcome and every rank learns the job's: the highest status (bad input, 2,
// over an internal error, 1, over success, 0) and the message of the lowest rank that had it,
// so that one line, from one rank, says what went wrong.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include "parallel/comm/communicator.h"

namespace titan::parallel {

// What one rank's work came to: status 0 when it returned, 2 for an InputError, 1 for any other
// std::exception (the exit codes of bad input and of an internal error), with its message.
struct RankResult {
  int status = 0;
  std::string message;
  std::exception_ptr error;  // what it threw, to rethrow on this rank
};
RankResult attempt(const std::function<void()>& work);

struct AgreedStatus {
  int status = 0;
  int rank = -1;  // the rank whose message this is; -1 when status is 0
  std::string message;
};

// Collective over the world, by MPI directly: the set-up's agreement, which runs before any
// communicator exists. Every rank calls it at the same point with its own status and message.
AgreedStatus agree_on_status(int status, const std::string& message);
// The same over the ranks of `comm`.
AgreedStatus agree_on_status(Communicator& comm, int status, const std::string& message);

// Collective over `comm`: runs `work` on this rank, then agrees. If any rank failed, every rank
// throws: a failing rank its own exception, the others the agreed message (an InputError when
// it was bad input).
void run_agreed(Communicator& comm, const std::function<void()>& work);

}  // namespace titan::parallel
