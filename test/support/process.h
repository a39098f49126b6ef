// Running the project's binaries from tests, and finding the files they need.
#pragma once

#include <string>
#include <vector>

namespace titan::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
  std::vector<std::string> err_lines() const;
  int error_lines() const;  // stderr lines starting "titan_train: error:"
};

// Runs `command` through /bin/sh in the source tree, capturing stdout and stderr.
ProcessResult run_process(const std::string& command);

// "mpirun … -np N ": the prefix that launches N ranks here (as root, more ranks than cores,
// each rank free to use every core).
std::string mpirun_launcher(int ranks);

// The whole file, bytes as they are ("" when it cannot be read).
std::string read_file(const std::string& path);
// Whether two files hold the same bytes (false when either cannot be read), compared a block at a
// time: checkpoints of tens of MiB compared whole would be read into memory first.
bool files_equal(const std::string& a, const std::string& b);

// The text of test/fixtures/NAME, a file tests share; the test stops (REQUIRE) when it is missing.
std::string fixture_text(const std::string& name);

std::string source_path(const std::string& relative);  // under the source tree
std::string binary_path(const std::string& name);      // build/<name>

// A directory under the build tree for the files of the test case running now, named `name`
// inside the case's own folder (created if missing, not emptied): ctest runs cases as parallel
// processes, and two cases never share a folder.
std::string scratch_dir(const std::string& name);

// The path of `relative` under .cache/, where scripts/setup.sh --tests puts what the tests use
// (Node packages from the npm registry, the container test's base). Tests never install or download anything: when
// the file is missing the test stops (REQUIRE) with one line naming `what` and that setup step.
std::string setup_cache_path(const std::string& relative, const std::string& what);

}  // namespace titan::testing
