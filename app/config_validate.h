// The checks a config passes before any rank does anything with it: every key's own check (its
// row in config_keys.h), then the rules between the keys of one section (one function per
// section), then the rules between sections. Rules that need more than the config — the world
// size (ParallelDims, the global batch), the model's dims (tp against heads), the machine (a
// GPU, memory, files) — are checked where that is known, in the trainer's set-up.
#pragma once

#include "app/config.h"

namespace titan::app {

// InputError naming the key at fault, the value seen and the fix, for the first rule broken.
void validate(const JobConfig& config);

}  // namespace titan::app
