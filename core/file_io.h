// POSIX file I/O for the readers and writers of checkpoints, safetensors and their JSON files:
// a descriptor that closes itself, and reads and writes that finish the whole request or say
// why not.
//
// The functions report failure and leave the message to the caller (false, with errno set),
// because each file's message names its own format, its own config key and its own fix; the
// one exception, fsync_path, takes the caller's words for its message instead, so that every
// writer that makes its files durable fails the same way when it cannot.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace titan {

// An open file descriptor, closed when its owner goes (or at close()). Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  // ::open(path, flags | O_CLOEXEC, mode): check ok(), and errno when it is not.
  static Fd open(const std::string& path, int flags, unsigned mode = 0644);

  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  // Closes now: false (errno set) when ::close reports an error, which for a file just written
  // can be the first word of a failed write-back.
  bool close();

 private:
  int fd_ = -1;
};

// Linux moves at most 2 GiB - 4 KiB in one read or write call: larger requests go in pieces
// of this size (a whole number of pages, so a large transfer stays page-aligned).
inline constexpr uint64_t kMaxIoChunkBytes = uint64_t{1} << 30;

// Reads exactly `bytes` at `offset`, retrying on EINTR. False when the file ends first (errno
// 0: it is shorter than asked, truncated or shrunk) or a read fails (errno set).
bool pread_all(int fd, void* dst, uint64_t bytes, uint64_t offset);

// Writes all `bytes` at the file position, retrying on EINTR. False (errno set) on a failure,
// a full disk included.
bool write_all(int fd, const void* data, uint64_t bytes);

// Writes `content` to `path` (created or truncated) and fsyncs it. Returns nullptr, or the
// step that failed ("create", "write", "fsync", "close"), errno set: the caller's message
// says what.
const char* write_file_synced(const std::string& path, std::string_view content);

// Flushes `path` to its disk: a file, or a folder, whose fsync makes the names created or
// renamed in it durable. A writer whose fsync fails must fail, since what it wrote may be lost:
// throws InputError "<writer>: cannot fsync '<path>': <why>; <fix>" (or "cannot open").
// TITAN_FAULT_FSYNC=<text> makes the fsync of every path containing <text> fail with EIO, as a
// disk's failed write-back would: how the tests see a writer fail (docs/reliability.md).
void fsync_path(const std::string& path, std::string_view writer, std::string_view fix);

// A name for a file inside a folder that cannot reach outside it: not empty, not "." and no
// '/', '\\', ".." or NUL. For names read from a file (an index, a checkpoint's metadata).
bool is_plain_file_name(std::string_view name);

}  // namespace titan
