// safetensors files: the format HF checkpoints use, readable by every tool in the field.
//
//   8 bytes   little-endian header length N
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, …,
//                    "__metadata__": {"key": "value", …}}, padded with spaces to 8 bytes
//   …         the tensors' bytes, offsets relative to the end of the header
//
// Files come from anywhere (a download, another tool, a disk that filled up), so the reader
// trusts nothing in them: the header length is checked against the file's size and a cap
// before anything is allocated, the JSON is parsed by core's reader (which refuses a key given
// twice: two entries for one tensor), and every entry's dtype, shape
// (no overflow, at most Shape::kMaxDims dims), byte size (= dtype size × elements) and offsets
// (inside the data, no two tensors overlapping) are checked. Any problem is one InputError
// line that names the file and the problem. Reads are pread()s of exactly the bytes needed
// (core/range_reader.h: 1 MiB chunks over several threads), so a rank can take a few rows of a
// 100 GB file, and a whole file comes at the disk's speed.
//
// The writer streams: it writes the header first, from the list of {name, dtype, shape}, then
// takes the tensors' bytes in order, in as many pieces as the caller likes, so an export never
// holds more than the piece in hand. Where each tensor's bytes will lie is known before the
// file is opened (SafetensorsLayout), so a checkpoint can record its byte ranges while a
// background thread writes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/file_io.h"
#include "core/tensor.h"

namespace titan::checkpoint {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The largest header the reader accepts (the safetensors reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// "F32", "BF16", "F8_E4M3", … (the format's names, which checkpoints' metadata.json uses too),
// and back: nullopt for a name that is not one of the dtypes titan_train reads.
std::string_view safetensors_dtype_name(DType dtype);
std::optional<DType> parse_safetensors_dtype(std::string_view name);

// The one rule for reading stored values into another dtype, for every reader of stored
// tensors (safetensors files, sharded checkpoints, Hugging Face imports): allowed when it is
// exact and widens within a kind: a float into a wider float (bf16 → f32, bf16 → f64,
// f32 → f64), a signed integer into a wider one (i32 → i64), and any dtype into itself. Every
// value then survives, so what a reader gets does not depend on the dtype a file chose.
// Refused: narrowing (a caller that wants it reads the stored dtype and rounds, explicitly),
// integers to floats and back (ids where weights belong are the wrong tensor, not a
// conversion), and fp8 to anything wider (its bytes are not its values without the scales
// kept beside them).
bool converts_exactly(DType from, DType to);
// dst[i] = src[i] for `count` elements, for a pair converts_exactly allows.
void convert_exactly(DType from, const void* src, DType to, void* dst, uint64_t count);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
};

// A file's header and where each tensor's bytes go, before anything is written. Tensors lie
// back to back in the order listed.
class SafetensorsLayout {
 public:
  SafetensorsLayout(std::vector<TensorInfo> tensors,
                    const std::map<std::string, std::string>& metadata = {});

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The 8-byte length, then the JSON padded with spaces to a multiple of 8 bytes.
  const std::string& header() const { return header_; }
  // Tensor i's bytes are [begin(i), end(i)) of the file (counted from its first byte).
  uint64_t begin(size_t i) const { return header_.size() + data_offsets_[i]; }
  uint64_t end(size_t i) const { return header_.size() + data_offsets_[i + 1]; }
  uint64_t file_bytes() const { return header_.size() + data_offsets_.back(); }

 private:
  std::vector<TensorInfo> tensors_;
  std::string header_;
  std::vector<uint64_t> data_offsets_;  // tensor i is [i, i + 1), relative to the data
};

// What a writer's I/O failure tells the user to do, after "checkpoint: cannot write '<path>':
// <why>; ".
inline constexpr char kSafetensorsWriteFix[] =
    "check the folder exists and is writable, with free space";

// Writes the layout's header on construction, then the tensors' bytes in the order listed:
// append() takes the next bytes of the current tensor (any number of rows of it at a time;
// dtype must match), moving to the next tensor when one is complete. close() checks every
// tensor is complete, flushes and fsyncs. An object destroyed before close() leaves a file
// the reader refuses (short data): write to a temporary name and rename after close().
// Every byte goes through CRC32C on its way, for the checkpoint's metadata.
class SafetensorsWriter {
 public:
  // `fix` ends the message of an I/O failure (InputError "checkpoint: cannot create|write|
  // fsync|close '<path>': <why>; <fix>"): the caller knows which setting chose the folder.
  SafetensorsWriter(std::string path, SafetensorsLayout layout,
                    std::string fix = kSafetensorsWriteFix);
  SafetensorsWriter(std::string path, std::vector<TensorInfo> tensors,
                    const std::map<std::string, std::string>& metadata = {})
      : SafetensorsWriter(std::move(path), SafetensorsLayout(std::move(tensors), metadata)) {}
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The bytes of `chunk` (CPU; contiguous or not) continue the current tensor.
  void append(const Tensor& chunk);
  // A whole tensor, which must be the next one listed.
  void write(const std::string& name, const Tensor& tensor);
  void close();

  // The CRC32C of the bytes written so far: after close(), of the whole file.
  uint32_t crc32c() const { return crc_; }

 private:
  [[noreturn]] void io_failed(const char* step) const;
  void write_bytes(const void* data, uint64_t bytes);
  void skip_empty_tensors();

  std::string path_;
  SafetensorsLayout layout_;
  std::string fix_;
  size_t current_ = 0;            // index of the tensor being written
  uint64_t current_written_ = 0;  // its bytes written so far
  uint32_t crc_ = 0;
  Fd fd_;
};

// Writes `tensors` (CPU, contiguous or not) and string metadata to `path`.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

class SafetensorsFile {
 public:
  // Reads and checks the header; InputError naming the file when it is missing, malformed,
  // truncated or hostile. Copies share the open file.
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  DType dtype(const std::string& name) const;
  Shape shape(const std::string& name) const;

  // Reads one tensor into `dst` (contiguous, CPU), which must have its shape and a dtype it
  // converts to exactly (converts_exactly). This read and read_rows() refuse a value that is
  // NaN or infinite (InputError naming the tensor, the file and the element; core/nonfinite.h).
  void read_into(const std::string& name, const Tensor& dst) const;

  // dst [rows, width] (contiguous, CPU) = rows [row_begin, + rows), columns [col_begin,
  // + width) of a 2-D tensor, converted exactly to dst's dtype. A 1-D tensor is read as
  // [n, 1] (col_begin 0, width 1). Whole rows are one byte range, read in chunks; a column
  // block is one range per row, of its `width` elements only. InputError naming the file for a
  // region outside the tensor, a dtype that does not convert exactly, or a file that ends
  // early (truncated, or shrunk while being read).
  void read_rows(const std::string& name, int64_t row_begin, int64_t rows, int64_t col_begin,
                 int64_t width, const Tensor& dst) const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    uint64_t begin, end;  // relative to the end of the header
  };
  // `count` elements of a tensor from element `first`, to go to `dst`.
  struct ElementSpan {
    uint64_t first = 0, count = 0;
    void* dst = nullptr;
  };
  const Entry& entry(const std::string& name) const;
  // Reads the spans of entry `e` into their dst (dst_dtype), through core/range_reader.h.
  void read_spans(const std::string& name, const Entry& e, std::span<const ElementSpan> spans,
                  DType dst_dtype) const;
  [[noreturn]] void refuse_nonfinite(const std::string& name, const Entry& e, uint64_t flat,
                                     const char* what) const;

  std::string path_;
  std::shared_ptr<const Fd> fd_;  // closed when the last copy goes
  uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace titan::checkpoint
