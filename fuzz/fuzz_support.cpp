#include "fuzz/fuzz_support.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>

namespace titan::fuzz {

namespace {

void remove_scratch_folder() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_folder(), ec);
}

}  // namespace

const std::string& scratch_folder() {
  // Never destroyed: remove_scratch_folder runs at exit, after static destructors would have.
  static const std::string& folder = *new std::string([] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/titan_fuzz.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "fuzz: cannot create a scratch folder from '%s': %s\n", pattern.c_str(),
                   std::strerror(errno));
      std::abort();
    }
    std::atexit(remove_scratch_folder);
    return pattern;
  }());
  return folder;
}

std::string write_scratch_file(std::string_view name, const void* data, size_t size) {
  std::string path = scratch_folder() + "/" + std::string(name);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) contract_violation("fuzz harness", "cannot create " + path);
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) contract_violation("fuzz harness", "cannot write " + path);
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

std::string first_difference(std::string_view a, std::string_view b) {
  size_t line = 1, begin = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()) && a[i] == b[i]; ++i) {
    if (a[i] == '\n') ++line, begin = i + 1;
  }
  auto line_of = [&](std::string_view text) {
    std::string_view rest = text.substr(std::min(begin, text.size()));
    return std::string(rest.substr(0, rest.find('\n')));
  };
  return "first difference at line " + std::to_string(line) + ": '" + line_of(a) + "' vs '" +
         line_of(b) + "'";
}

void contract_violation(std::string_view reader, std::string_view what) {
  std::fprintf(stderr, "fuzz contract: %.*s: %.*s\n", static_cast<int>(reader.size()),
               reader.data(), static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace titan::fuzz
