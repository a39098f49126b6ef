// The prompts to complete, in order: the --prompt texts; or the lines of a --prompts file (a
// JSON lines file, by its name or because --field was given: the string field of each line's
// object); or, with neither, the lines of standard input. Empty lines are not prompts. A bad
// JSON line, and a source that holds no prompt, are refused with one line.
#pragma once

#include <string>
#include <vector>

#include "tools/generate/options.h"

namespace titan::generate {

std::vector<std::string> read_prompts(const Options& options);

}  // namespace titan::generate
