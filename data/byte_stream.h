// The bytes of one corpus file, decompressed as its name says: as is, gzip (".gz", zlib) or
// zstd (".zst", libzstd). titan_tokenize reads every input through this, one chunk at a time,
// so a 300 MB .json.gz never sits in memory whole.
//
// A compressed stream must end where its format says it ends: a file cut short (a download
// that stopped) is an InputError, not a quietly shorter corpus. zlib reports it only as "no
// progress possible" (Z_BUF_ERROR) with the input used up, so the reader checks for it itself.
// Concatenated gzip members (`cat a.gz b.gz`) and zstd frames are read one after another, as
// gzip -d and zstd -d do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace titan::data {

enum class Compression { NONE, GZIP, ZSTD };

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Up to `capacity` decompressed bytes into `dst`; 0 only at the end of the stream.
  // InputError naming the file when it cannot be read, is corrupt or is truncated.
  virtual size_t read(char* dst, size_t capacity) = 0;
  // Bytes of the file itself read so far (compressed bytes for .gz and .zst): progress is
  // measured against file sizes.
  uint64_t consumed() const { return consumed_; }

 protected:
  uint64_t consumed_ = 0;
};

// Opens `path`; InputError naming it when it cannot be opened.
std::unique_ptr<ByteStream> open_byte_stream(const std::string& path, Compression compression);

}  // namespace titan::data
