#include "support/process.h"

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <sstream>

namespace titan::testing {

std::string read_file(const std::string& path) {
  // The size the file announces is read in one call: checkpoint files of tens of MiB are read
  // whole, and a stringstream that grew by doubling, then copied out, took seconds of page
  // faults for each. What it does not announce follows a block at a time: /proc files report
  // 0 bytes, and a running process's log grows while it is read.
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::error_code error;  // a /proc file cannot seek to its end: ask the file system instead
  const auto size = static_cast<std::streamsize>(std::filesystem::file_size(path, error));
  std::string bytes(error ? 0 : static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  char block[1 << 16];
  while (in.read(block, sizeof block) || in.gcount() > 0) {
    bytes.append(block, static_cast<size_t>(in.gcount()));
  }
  return bytes;
}

bool files_equal(const std::string& a, const std::string& b) {
  std::ifstream in_a(a, std::ios::binary), in_b(b, std::ios::binary);
  if (!in_a || !in_b) return false;
  std::vector<char> block_a(size_t{1} << 20), block_b(block_a.size());
  while (true) {
    in_a.read(block_a.data(), static_cast<std::streamsize>(block_a.size()));
    in_b.read(block_b.data(), static_cast<std::streamsize>(block_b.size()));
    const std::streamsize n = in_a.gcount();
    if (n != in_b.gcount() || std::memcmp(block_a.data(), block_b.data(), static_cast<size_t>(n)) != 0) {
      return false;
    }
    if (n == 0) return true;
  }
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

namespace {

// The name of the test case running now, kept by a doctest listener.
std::string& current_case() {
  static std::string name = "outside_a_test_case";
  return name;
}

struct CurrentCaseListener : doctest::IReporter {
  explicit CurrentCaseListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& data) override { current_case() = data.m_name; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("current_case", 1, CurrentCaseListener);

// A folder name for a test case: its words joined by '_' (at most 60 characters), then a hash
// of the whole name, so that two cases that begin alike still get folders of their own.
std::string folder_of(const std::string& case_name) {
  std::string folder;
  for (const char c : case_name) {
    if (folder.size() >= 60) break;
    if (std::isalnum(static_cast<unsigned char>(c))) {
      folder += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!folder.empty() && folder.back() != '_') {
      folder += '_';
    }
  }
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(std::hash<std::string>{}(case_name)));
  return folder + "-" + std::string(hash, 8);
}

}  // namespace

std::string scratch_dir(const std::string& name) {
  std::filesystem::path dir = std::filesystem::path(TITAN_BINARY_DIR) / "test_scratch" /
                              folder_of(current_case()) / name;
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string fixture_text(const std::string& name) {
  const std::string path = source_path("test/fixtures/" + name);
  std::string text = read_file(path);
  REQUIRE_MESSAGE(!text.empty(), "the fixture " << path << " is missing or empty");
  return text;
}

std::string setup_cache_path(const std::string& relative, const std::string& what) {
  const std::string path = source_path(".cache/" + relative);
  REQUIRE_MESSAGE(std::filesystem::exists(path),
                  what << " is missing (" << path << "): run scripts/setup.sh --tests");
  return path;
}

}  // namespace titan::testing
