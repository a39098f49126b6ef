// Checking that a binary refuses its input as bad input: exit code 2 and one line that says
// what was wrong, before it does anything else.
#pragma once

#include <string>
#include <vector>

#include "support/process.h"

namespace titan::testing {

// What a refused run may print on stdout: nothing, or set-up lines but no training step.
enum class Stdout { Empty, NoStep };

// Runs `env` `binary` (built next to titan_train) `args`, where env is "" or "NAME=value ", and
// checks the refusal: exit code 2, one stderr line "<binary>: error: " holding every fragment,
// and stdout as `out` says. Returns what ran, for more checks.
ProcessResult check_refused(const std::string& binary, const std::string& args,
                            const std::vector<std::string>& fragments, Stdout out = Stdout::Empty,
                            const std::string& env = "");

}  // namespace titan::testing
