#include "data/byte_stream.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace titan::data {

namespace {

constexpr size_t kInputChunk = 1 << 18;  // compressed bytes read from the file at a time

// The file under any stream: read(2) with EINTR retried.
class RawFile {
 public:
  explicit RawFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      input_error("cannot open input '", path, "': ", std::strerror(errno),
                  "; check the path and its permissions");
    }
  }
  ~RawFile() { ::close(fd_); }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  size_t read(char* dst, size_t capacity) {
    for (;;) {
      ssize_t n = ::read(fd_, dst, capacity);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno != EINTR) {
        input_error("cannot read input '", path_, "': ", std::strerror(errno),
                    "; check the file is a readable regular file");
      }
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(const std::string& path) : file_(path) {}
  size_t read(char* dst, size_t capacity) override {
    size_t n = file_.read(dst, capacity);
    consumed_ += n;
    return n;
  }

 private:
  RawFile file_;
};

class GzipStream final : public ByteStream {
 public:
  explicit GzipStream(const std::string& path) : file_(path), input_(kInputChunk) {
    // 16 + MAX_WBITS: a gzip header and trailer (CRC-32 and length checked), not raw zlib.
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) {
      input_error("cannot start a gzip reader for '", path, "': out of memory");
    }
  }
  ~GzipStream() override { inflateEnd(&z_); }

  size_t read(char* dst, size_t capacity) override {
    if (capacity == 0) return 0;
    z_.next_out = reinterpret_cast<Bytef*>(dst);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(capacity, UINT32_MAX));
    const uInt space = z_.avail_out;
    while (z_.avail_out == space) {
      if (z_.avail_in == 0 && !eof_) refill();
      const bool starved = z_.avail_in == 0 && eof_;
      if (starved && !member_open_) break;  // the last member ended with the file
      member_open_ = true;
      int status = inflate(&z_, Z_NO_FLUSH);
      if (status == Z_STREAM_END) {
        // Another member may follow; what comes after must be one.
        inflateReset(&z_);
        member_open_ = false;
      } else if (status == Z_BUF_ERROR) {
        if (starved) truncated();
      } else if (status != Z_OK) {
        corrupt(status);
      }
    }
    return space - z_.avail_out;
  }

 private:
  void refill() {
    size_t n = file_.read(reinterpret_cast<char*>(input_.data()), input_.size());
    consumed_ += n;
    eof_ = n == 0;
    if (eof_ && consumed_ == 0) {
      input_error("input '", file_.path(),
                  "' is empty, and a .gz file holds a gzip stream; remove it or compress the "
                  "text again");
    }
    z_.next_in = input_.data();
    z_.avail_in = static_cast<uInt>(n);
  }
  [[noreturn]] void truncated() const {
    input_error("input '", file_.path(), "' is truncated: its gzip stream ends early (after ",
                consumed_, " compressed bytes); download or compress it again");
  }
  [[noreturn]] void corrupt(int status) const {
    input_error("input '", file_.path(), "' is not valid gzip near compressed byte ",
                consumed_ - z_.avail_in, " (zlib: ", z_.msg ? z_.msg : zError(status),
                "); download or compress it again");
  }

  RawFile file_;
  std::vector<Bytef> input_;
  z_stream z_{};
  bool eof_ = false;
  bool member_open_ = false;  // inside a gzip member whose trailer has not been read
};

class ZstdStream final : public ByteStream {
 public:
  explicit ZstdStream(const std::string& path)
      : file_(path), input_(ZSTD_DStreamInSize()), context_(ZSTD_createDCtx()) {
    if (context_ == nullptr) input_error("cannot start a zstd reader for '", path, "'");
  }
  ~ZstdStream() override { ZSTD_freeDCtx(context_); }

  size_t read(char* dst, size_t capacity) override {
    ZSTD_outBuffer out{dst, capacity, 0};
    while (out.pos == 0 && capacity > 0) {
      if (in_.pos == in_.size && !eof_) refill();
      const bool starved = in_.pos == in_.size && eof_;
      if (starved && !frame_open_) break;
      // Called even when starved: the decoder may still hold output of an open frame.
      size_t status = ZSTD_decompressStream(context_, &out, &in_);
      if (ZSTD_isError(status)) {
        input_error("input '", file_.path(), "' is not valid zstd near compressed byte ",
                    consumed_ - (in_.size - in_.pos), " (zstd: ", ZSTD_getErrorName(status),
                    "); download or compress it again");
      }
      frame_open_ = status != 0;
      if (starved && out.pos == 0 && frame_open_) {
        input_error("input '", file_.path(), "' is truncated: its zstd stream ends early (after ",
                    consumed_, " compressed bytes); download or compress it again");
      }
    }
    return out.pos;
  }

 private:
  void refill() {
    size_t n = file_.read(input_.data(), input_.size());
    consumed_ += n;
    eof_ = n == 0;
    if (eof_ && consumed_ == 0) {
      input_error("input '", file_.path(),
                  "' is empty, and a .zst file holds a zstd stream; remove it or compress the "
                  "text again");
    }
    in_ = ZSTD_inBuffer{input_.data(), n, 0};
  }

  RawFile file_;
  std::vector<char> input_;
  ZSTD_DCtx* context_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool eof_ = false;
  bool frame_open_ = false;  // inside a frame that has not been fully decoded and flushed
};

}  // namespace

std::unique_ptr<ByteStream> open_byte_stream(const std::string& path, Compression compression) {
  switch (compression) {
    case Compression::NONE: return std::make_unique<PlainStream>(path);
    case Compression::GZIP: return std::make_unique<GzipStream>(path);
    case Compression::ZSTD: return std::make_unique<ZstdStream>(path);
  }
  TT_CHECK(false, "unknown compression ", static_cast<int>(compression));
}

}  // namespace titan::data
