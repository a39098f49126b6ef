#include "support/process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace titan::testing {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> ProcessResult::err_lines() const {
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

int ProcessResult::error_lines() const {
  int count = 0;
  for (const std::string& line : err_lines()) count += line.starts_with("titan_train: error:");
  return count;
}

std::string mpirun_launcher(int ranks) {
  return "mpirun --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(ranks) +
         " ";
}

ProcessResult run_process(const std::string& command) {
  // ctest runs test cases as parallel processes: name the capture files by pid as well.
  static int counter = 0;
  std::string base =
      scratch_dir("process") + "/" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  std::string shell = "cd '" + std::string(TITAN_SOURCE_DIR) + "' && " + command + " >'" + base +
                      ".out' 2>'" + base + ".err'";
  int status = std::system(shell.c_str());
  ProcessResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_file(base + ".out");
  result.err = read_file(base + ".err");
  return result;
}

std::string source_path(const std::string& relative) {
  return std::string(TITAN_SOURCE_DIR) + "/" + relative;
}

std::string binary_path(const std::string& name) {
  return std::string(TITAN_BINARY_DIR) + "/" + name;
}

std::string scratch_dir(const std::string& test_name) {
  std::filesystem::path dir = std::filesystem::path(TITAN_BINARY_DIR) / "test_scratch" / test_name;
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace titan::testing
