// The harness's file helpers (support/process.h), which every end-to-end test reads its runs
// through: a /proc file announces no size, a running process's log grows, and checkpoints of
// tens of MiB are compared whole.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "support/process.h"

using namespace titan::testing;

namespace {

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("test harness: read_file reads /proc files and large files whole") {
    // /proc/self/stat reports 0 bytes and holds a line naming this process.
    const std::string stat = read_file("/proc/self/stat");
    CHECK(stat.find("(test_") != std::string::npos);
    CHECK(stat.back() == '\n');
    CHECK(read_file("/nonexistent/file").empty());

    const std::string path = scratch_dir("support_files") + "/large.bin";
    std::string bytes(3 * (1 << 20) + 17, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
    write(path, bytes);
    CHECK(read_file(path) == bytes);
  }

  TEST_CASE("test harness: files_equal tells files apart by one byte — by length — by absence") {
    const std::string dir = scratch_dir("support_files");
    std::string bytes(2 * (1 << 20) + 5, 'a');
    write(dir + "/a", bytes);
    write(dir + "/same", bytes);
    bytes[(1 << 20) + 3] = 'b';  // in the second block
    write(dir + "/other", bytes);
    write(dir + "/shorter", bytes.substr(0, bytes.size() - 1));
    CHECK(files_equal(dir + "/a", dir + "/same"));
    CHECK_FALSE(files_equal(dir + "/a", dir + "/other"));
    CHECK_FALSE(files_equal(dir + "/other", dir + "/shorter"));
    CHECK_FALSE(files_equal(dir + "/a", dir + "/missing"));
    write(dir + "/empty1", "");
    write(dir + "/empty2", "");
    CHECK(files_equal(dir + "/empty1", dir + "/empty2"));
  }
}
