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

std::string source_path(const std::string& relative);  // under the source tree
std::string binary_path(const std::string& name);      // build/<name>
// A directory under the build tree for one test's files (created if missing, not emptied).
std::string scratch_dir(const std::string& test_name);

}  // namespace titan::testing
