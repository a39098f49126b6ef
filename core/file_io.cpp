#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/check.h"

namespace titan {

Fd::~Fd() {
  if (fd_ < 0) return;
  const int saved = errno;  // the caller may be about to report why it gave the file up
  ::close(fd_);
  errno = saved;
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

Fd Fd::open(const std::string& path, int flags, unsigned mode) {
  return Fd(::open(path.c_str(), flags | O_CLOEXEC, static_cast<mode_t>(mode)));
}

bool Fd::close() {
  const int fd = fd_;
  fd_ = -1;
  return fd < 0 || ::close(fd) == 0;
}

bool pread_all(int fd, void* dst, uint64_t bytes, uint64_t offset) {
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    const auto want = static_cast<size_t>(std::min(bytes, kMaxIoChunkBytes));
    const ssize_t got = ::pread(fd, out, want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) errno = 0;
    if (got <= 0) return false;
    out += got;
    offset += static_cast<uint64_t>(got);
    bytes -= static_cast<uint64_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* data, uint64_t bytes) {
  const auto* in = static_cast<const char*>(data);
  while (bytes > 0) {
    const auto want = static_cast<size_t>(std::min(bytes, kMaxIoChunkBytes));
    const ssize_t put = ::write(fd, in, want);
    if (put < 0 && errno == EINTR) continue;
    if (put == 0) errno = ENOSPC;  // write(2) returning 0 for a regular file: nothing fits
    if (put <= 0) return false;
    in += put;
    bytes -= static_cast<uint64_t>(put);
  }
  return true;
}

const char* write_file_synced(const std::string& path, std::string_view content) {
  Fd fd = Fd::open(path, O_WRONLY | O_CREAT | O_TRUNC);
  if (!fd.ok()) return "create";
  if (!write_all(fd.get(), content.data(), content.size())) return "write";
  if (::fsync(fd.get()) != 0) return "fsync";
  if (!fd.close()) return "close";
  return nullptr;
}

void fsync_path(const std::string& path, std::string_view writer, std::string_view fix) {
  auto fail = [&](const char* what) {
    input_error(writer, ": cannot ", what, " '", path, "': ", std::strerror(errno), "; ", fix);
  };
  const Fd fd = Fd::open(path, O_RDONLY);  // a folder opens read-only too
  if (!fd.ok()) fail("open");
  const char* injected = std::getenv("TITAN_FAULT_FSYNC");
  if (injected != nullptr && *injected != '\0' && path.find(injected) != std::string::npos) {
    errno = EIO;
    fail("fsync");
  }
  if (::fsync(fd.get()) != 0) fail("fsync");
}

bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name.find('/') == std::string_view::npos &&
         name.find('\\') == std::string_view::npos && name.find("..") == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

}  // namespace titan
