#include "support/refusal.h"

#include <doctest/doctest.h>

#include <regex>

namespace titan::testing {

ProcessResult check_refused(const std::string& binary, const std::string& args,
                            const std::vector<std::string>& fragments, Stdout out,
                            const std::string& env) {
  const std::string command = env + binary_path(binary) + " " + args;
  CAPTURE(command);
  const ProcessResult r = run_process(command);
  CAPTURE(r.err);
  CAPTURE(r.out);
  CHECK(r.exit_code == 2);
  const std::vector<std::string> lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].starts_with(binary + ": error: "));
  for (const std::string& fragment : fragments) {
    CHECK_MESSAGE(lines[0].find(fragment) != std::string::npos, fragment);
  }
  if (out == Stdout::Empty) {
    CHECK(r.out.empty());
  } else {
    CHECK_FALSE(std::regex_search(r.out, std::regex(R"(step +[0-9]+/[0-9]+)")));
  }
  return r;
}

}  // namespace titan::testing
