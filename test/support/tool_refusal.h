// The refusals of the tools beside titan_train (titan_tokenize, titan_convert, titan_bench):
// each names its own flags, never one of titan_train's config keys, which its user cannot set.
#pragma once

#include <string>
#include <vector>

namespace titan::testing {

// Every "section.key" of titan_train's key table, read from `titan_train --print-config` (so a
// key added to the table is checked with no list here to update).
const std::vector<std::string>& trainer_config_keys();

// The trainer keys `text` names: each as a whole word ("model.vocab" of a tokenizer.json is not
// model.vocab_size; "tensors.model.dim" is not model.dim).
std::vector<std::string> trainer_keys_named(const std::string& text);

// Checks that what `binary` printed names none of titan_train's config keys.
void check_names_no_trainer_key(const std::string& binary, const std::string& output);

// Runs `binary` (built next to titan_train) with `args` and checks the refusal: exit code 2,
// one stderr line "<binary>: error: " holding every fragment, nothing on stdout, and no
// trainer key in what it printed.
void check_tool_refused(const std::string& binary, const std::string& args,
                        const std::vector<std::string>& fragments);

}  // namespace titan::testing
