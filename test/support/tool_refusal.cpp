#include "support/tool_refusal.h"

#include <doctest/doctest.h>

#include <sstream>

#include "support/process.h"
#include "support/refusal.h"

namespace titan::testing {

namespace {

bool key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

const std::vector<std::string>& trainer_config_keys() {
  static const std::vector<std::string> keys = [] {
    const ProcessResult r = run_process(binary_path("titan_train") + " --print-config");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    // Sections at the margin ("model:"), their keys indented by two ("  dim: 0").
    std::vector<std::string> found;
    std::istringstream lines(r.out);
    std::string section;
    for (std::string line; std::getline(lines, line);) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      if (line.starts_with("  ") && !line.starts_with("   ") && !section.empty()) {
        found.push_back(section + "." + line.substr(2, colon - 2));
      } else if (!line.starts_with(" ")) {
        section = line.substr(0, colon);
      }
    }
    REQUIRE_MESSAGE(found.size() >= 50, "titan_train --print-config gave ", found.size(),
                    " keys:\n", r.out);
    return found;
  }();
  return keys;
}

std::vector<std::string> trainer_keys_named(const std::string& text) {
  std::vector<std::string> named;
  for (const std::string& key : trainer_config_keys()) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
      const size_t end = at + key.size();
      const bool starts_word = at == 0 || (!key_char(text[at - 1]) && text[at - 1] != '.');
      const bool ends_word = end == text.size() || !key_char(text[end]);
      if (starts_word && ends_word) {
        named.push_back(key);
        break;
      }
    }
  }
  return named;
}

void check_tool_refused(const std::string& binary, const std::string& args,
                        const std::vector<std::string>& fragments) {
  const ProcessResult r = check_refused(binary, args, fragments);
  check_names_no_trainer_key(binary, r.err + r.out);
}

void check_names_no_trainer_key(const std::string& binary, const std::string& output) {
  std::string keys;
  for (const std::string& key : trainer_keys_named(output)) keys += " " + key;
  CHECK_MESSAGE(keys.empty(), binary, " names titan_train's config keys:", keys, " in: ", output);
}

}  // namespace titan::testing
