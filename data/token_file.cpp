#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "core/check.h"

namespace titan::data {

namespace {

constexpr char kMagic[8] = {'T', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 64;

template <class T>
void put_le(unsigned char* dst, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) dst[i] = static_cast<unsigned char>(value >> (8 * i));
}

template <class T>
T get_le(const unsigned char* src) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(src[i]) << (8 * i);
  return value;
}

TokenFileHeader parse_header(const unsigned char* h, uint64_t file_bytes, const std::string& path,
                             const std::string& key) {
  if (file_bytes < kHeaderBytes || std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
    input_error(key, ": '", path,
                "' is not a titan token file (no TTTOKENS header); use "
                "data.format: text for plain text, or write it with titan_tokenize");
  }
  uint32_t version = get_le<uint32_t>(h + 8);
  if (version != kVersion && version != kMaskedTokenFileVersion) {
    input_error(key, ": '", path, "' is token file version ", version,
                "; this titan_train reads versions ", kVersion, " and ", kMaskedTokenFileVersion);
  }
  TokenFileHeader header{get_le<uint32_t>(h + 12), get_le<uint64_t>(h + 16),
                         get_le<uint64_t>(h + 24)};
  if (version == kMaskedTokenFileVersion) {
    header.window = get_le<uint64_t>(h + 32);
    if (header.token_bytes != 4 || header.window == 0 || header.window > (uint64_t{1} << 31) ||
        get_le<uint64_t>(h + 40) != 1) {
      input_error(key, ": '", path, "' is a token file of conversations (version 2) whose header ",
                  "is not one titan_tokenize --chat writes (", header.token_bytes,
                  "-byte tokens, window ", header.window, "); the file is corrupt, write it again");
    }
  }
  if (header.token_bytes != 2 && header.token_bytes != 4) {
    input_error(key, ": '", path, "' declares ", header.token_bytes,
                "-byte tokens; the format holds 2 (uint16) or 4 (uint32)");
  }
  // Ids are int32: a vocabulary of 0 or above 2^31 (a uint64 that would read back negative as
  // vocab_bound()) is no vocabulary titan_tokenize writes.
  if (header.vocab_size == 0 || header.vocab_size > (uint64_t{1} << 31)) {
    input_error(key, ": '", path, "' declares a vocabulary of ", header.vocab_size,
                " tokens; a token file's is 1 to 2^31; the file is corrupt, write it again");
  }
  // Compare counts, not byte sizes: a corrupt token_count must not overflow into a match.
  uint64_t payload = file_bytes - kHeaderBytes;
  if (payload % header.token_bytes != 0 || payload / header.token_bytes != header.token_count) {
    uint64_t expected = header.token_count <= (UINT64_MAX - kHeaderBytes) / header.token_bytes
                            ? kHeaderBytes + header.token_count * header.token_bytes
                            : UINT64_MAX;
    input_error(key, ": '", path, "' is ", file_bytes, " bytes but its header promises ",
                header.token_count, " tokens (", expected,
                " bytes); the file is truncated or "
                "corrupt, write it again");
  }
  return header;
}

void fill_header(unsigned char* h, int token_bytes, uint64_t token_count, int64_t vocab_size) {
  std::memset(h, 0, kHeaderBytes);
  std::memcpy(h, kMagic, sizeof(kMagic));
  put_le<uint32_t>(h + 8, kVersion);
  put_le<uint32_t>(h + 12, static_cast<uint32_t>(token_bytes));
  put_le<uint64_t>(h + 16, token_count);
  put_le<uint64_t>(h + 24, static_cast<uint64_t>(vocab_size));
}

class MappedTokenFile final : public TokenSource {
 public:
  MappedTokenFile(const std::string& path, const std::string& key) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      input_error(key, ": cannot open '", path, "': ", std::strerror(errno),
                  "; point ", key, " at an existing token file");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int error = errno;
      ::close(fd);
      input_error(key, ": cannot stat '", path, "': ", std::strerror(error));
    }
    bytes_ = static_cast<size_t>(st.st_size);
    if (bytes_ < kHeaderBytes) {
      ::close(fd);
      input_error(key, ": '", path, "' is ", bytes_, " bytes, shorter than a token file's ",
                  kHeaderBytes, "-byte header; use data.format: text for plain text");
    }
    void* map = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) {
      input_error(key, ": cannot map '", path, "' (", bytes_, " bytes): ", std::strerror(errno),
                  "; check the file is a readable token file");
    }
    base_ = static_cast<const unsigned char*>(map);
    try {
      header_ = parse_header(base_, bytes_, path, key);
    } catch (...) {
      ::munmap(const_cast<unsigned char*>(base_), bytes_);
      throw;
    }
  }
  ~MappedTokenFile() override { ::munmap(const_cast<unsigned char*>(base_), bytes_); }

  int64_t size() const override { return static_cast<int64_t>(header_.token_count); }
  int64_t vocab_bound() const override { return static_cast<int64_t>(header_.vocab_size); }
  int64_t packed_window() const override { return static_cast<int64_t>(header_.window); }

  void read(int64_t start, int64_t count, int32_t* dst) const override {
    TT_CHECK(start >= 0 && count >= 0 && start + count <= size(), "token file read [", start, ", ",
             start + count, ") outside ", size(), " tokens");
    const unsigned char* src = base_ + kHeaderBytes + start * header_.token_bytes;
    for (int64_t i = 0; i < count; ++i, src += header_.token_bytes) {
      dst[i] = header_.token_bytes == 2 ? static_cast<int32_t>(get_le<uint16_t>(src))
                                        : static_cast<int32_t>(get_le<uint32_t>(src));
    }
  }

  std::string describe() const override {
    return detail::concat(path_, " (uint", 8 * header_.token_bytes, " tokens, ", size(),
                          " tokens, vocab ", vocab_bound(), ")");
  }

 private:
  std::string path_;
  const unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
  TokenFileHeader header_;
};

}  // namespace

void write_masked_token_file(const std::string& path, const std::vector<int32_t>& ids,
                             const std::vector<uint8_t>& trained, int64_t vocab_size,
                             int64_t window) {
  TT_CHECK(ids.size() == trained.size(), "write_masked_token_file: ", ids.size(), " ids, ",
           trained.size(), " mask entries");
  TT_CHECK(vocab_size > 0 && vocab_size <= (int64_t{1} << 31) && window > 0,
           "write_masked_token_file: vocab ", vocab_size, ", window ", window);
  std::vector<unsigned char> bytes(kHeaderBytes + ids.size() * 4, 0);
  fill_header(bytes.data(), 4, ids.size(), vocab_size);
  put_le<uint32_t>(bytes.data() + 8, kMaskedTokenFileVersion);
  put_le<uint64_t>(bytes.data() + 32, static_cast<uint64_t>(window));
  put_le<uint64_t>(bytes.data() + 40, 1);
  unsigned char* dst = bytes.data() + kHeaderBytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    TT_CHECK(ids[i] >= 0 && ids[i] < vocab_size, "token ", ids[i], " outside vocab ", vocab_size);
    put_le<uint32_t>(dst, static_cast<uint32_t>(ids[i]) | (trained[i] ? 0u : kUntrainedBit));
    dst += 4;
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    input_error("cannot write token file '", path, "'; check the directory exists and is writable");
  }
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                      int64_t vocab_size, int token_bytes) {
  TT_CHECK(token_bytes == 2 || token_bytes == 4, "token files hold 2- or 4-byte tokens, not ",
           token_bytes);
  TT_CHECK(vocab_size > 0 && (token_bytes == 4 || vocab_size <= 65536), "vocab ", vocab_size,
           " does not fit ", token_bytes, "-byte tokens");
  std::vector<unsigned char> bytes(kHeaderBytes + tokens.size() * token_bytes, 0);
  fill_header(bytes.data(), token_bytes, tokens.size(), vocab_size);
  unsigned char* dst = bytes.data() + kHeaderBytes;
  for (int32_t token : tokens) {
    TT_CHECK(token >= 0 && token < vocab_size, "token ", token, " outside vocab ", vocab_size);
    if (token_bytes == 2) {
      put_le<uint16_t>(dst, static_cast<uint16_t>(token));
    } else {
      put_le<uint32_t>(dst, static_cast<uint32_t>(token));
    }
    dst += token_bytes;
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out)
    input_error("cannot write token file '", path, "'; check the directory exists and is writable");
}

TokenFileWriter::TokenFileWriter(std::string path, int64_t vocab_size, int token_bytes)
    : path_(std::move(path)), vocab_size_(vocab_size), token_bytes_(token_bytes) {
  TT_CHECK(token_bytes == 2 || token_bytes == 4, "token files hold 2- or 4-byte tokens, not ",
           token_bytes);
  TT_CHECK(vocab_size > 0 && (token_bytes == 4 || vocab_size <= 65536), "vocab ", vocab_size,
           " does not fit ", token_bytes, "-byte tokens");
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) {
    input_error("cannot write token file '", path_, "': ", std::strerror(errno),
                "; check the directory exists and is writable");
  }
  unsigned char header[kHeaderBytes];
  fill_header(header, token_bytes_, 0, vocab_size_);
  write(header, kHeaderBytes);
}

TokenFileWriter::~TokenFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TokenFileWriter::append(std::span<const int32_t> tokens) {
  TT_CHECK(file_ != nullptr, "token file '", path_, "' appended to after finish()");
  buffer_.resize(tokens.size() * token_bytes_);
  unsigned char* dst = buffer_.data();
  for (int32_t token : tokens) {
    TT_CHECK(token >= 0 && token < vocab_size_, "token ", token, " outside vocab ", vocab_size_);
    if (token_bytes_ == 2) {
      put_le<uint16_t>(dst, static_cast<uint16_t>(token));
    } else {
      put_le<uint32_t>(dst, static_cast<uint32_t>(token));
    }
    dst += token_bytes_;
  }
  write(buffer_.data(), buffer_.size());
  count_ += static_cast<int64_t>(tokens.size());
}

void TokenFileWriter::finish() {
  TT_CHECK(file_ != nullptr, "token file '", path_, "' finished twice");
  unsigned char header[kHeaderBytes];
  fill_header(header, token_bytes_, static_cast<uint64_t>(count_), vocab_size_);
  if (std::fseek(file_, 0, SEEK_SET) != 0) {
    input_error("cannot write token file '", path_, "': ", std::strerror(errno));
  }
  write(header, kHeaderBytes);
  int status = std::fclose(file_);
  file_ = nullptr;
  if (status != 0) {
    input_error("cannot write token file '", path_, "': ", std::strerror(errno),
                "; check the disk has room");
  }
}

void TokenFileWriter::write(const unsigned char* bytes, size_t size) {
  if (std::fwrite(bytes, 1, size, file_) != size) {
    input_error("cannot write token file '", path_, "': ", std::strerror(errno),
                "; check the disk has room");
  }
}

std::unique_ptr<TokenSource> open_token_file(const std::string& path, const std::string& key) {
  return std::make_unique<MappedTokenFile>(path, key);
}

WindowTokens split_window(const Tensor& window, int64_t seq_len) {
  TT_CHECK(window.ndim() == 2 && window.size(1) == seq_len + 1 && window.dtype() == DType::I32,
           "split_window: ", window, " is not [B, ", seq_len + 1, "] i32");
  WindowTokens out{window.narrow(1, 0, seq_len).contiguous(),
                   window.narrow(1, 1, seq_len).contiguous(), 0};
  int32_t* in = out.inputs.data<int32_t>();
  int32_t* target = out.targets.data<int32_t>();
  for (int64_t i = 0; i < out.inputs.numel(); ++i) {
    in[i] = token_id(in[i]);
    if (is_trained(target[i])) {
      ++out.trained;
    } else {
      target[i] = kUntrainedTarget;
    }
  }
  return out;
}

}  // namespace titan::data
