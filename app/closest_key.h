// The spelling hint of an unknown section, key or flag: "did you mean 'training.steps'?".
#pragma once

#include <string>
#include <vector>

namespace titan::app {

// The known name closest to `unknown` by edit distance, or "" when every one is more than
// max(3, a third of its length) edits away.
std::string closest_key(const std::string& unknown, const std::vector<std::string>& known);

}  // namespace titan::app
