#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "core/bf16.h"
#include "core/check.h"
#include "core/json_text.h"

namespace titan::checkpoint {

namespace dom = simdjson::dom;

namespace {

const std::vector<std::pair<DType, std::string>>& dtype_names() {
  static const std::vector<std::pair<DType, std::string>> names = {
      {DType::F32, "F32"},      {DType::F64, "F64"},      {DType::BF16, "BF16"},
      {DType::E4M3, "F8_E4M3"}, {DType::E5M2, "F8_E5M2"}, {DType::I32, "I32"},
      {DType::I64, "I64"},      {DType::U8, "U8"}};
  return names;
}

std::optional<DType> from_safetensors_dtype(std::string_view name) {
  for (const auto& [d, n] : dtype_names()) {
    if (n == name) return d;
  }
  return std::nullopt;
}

// Reads exactly `bytes` at `offset`; false on a short read (the file shrank) or an error.
bool pread_all(int fd, void* dst, uint64_t bytes, uint64_t offset) {
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(bytes, 1ull << 30));
    const ssize_t got = ::pread(fd, out, want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    offset += static_cast<uint64_t>(got);
    bytes -= static_cast<uint64_t>(got);
  }
  return true;
}

// Element conversion for converts_exactly's pairs.
void convert(DType from, const void* src, DType to, void* dst, uint64_t count) {
  if (from == to) {
    std::memcpy(dst, src, count * dtype_size(from));
    return;
  }
  auto loop = [&](auto read, auto* out) {
    for (uint64_t i = 0; i < count; ++i) out[i] = read(i);
  };
  if (from == DType::BF16) {
    const auto* in = static_cast<const bf16_t*>(src);
    auto read = [in](uint64_t i) { return bf16_to_float(in[i]); };
    if (to == DType::F32) return loop(read, static_cast<float*>(dst));
    if (to == DType::F64) return loop(read, static_cast<double*>(dst));
  }
  if (from == DType::F32 && to == DType::F64) {
    const auto* in = static_cast<const float*>(src);
    return loop([in](uint64_t i) { return static_cast<double>(in[i]); }, static_cast<double*>(dst));
  }
  if (from == DType::I32 && to == DType::I64) {
    const auto* in = static_cast<const int32_t*>(src);
    return loop([in](uint64_t i) { return static_cast<int64_t>(in[i]); }, static_cast<int64_t*>(dst));
  }
  TT_CHECK(false, "convert: ", dtype_name(from), " to ", dtype_name(to));
}

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  for (const auto& [d, name] : dtype_names()) {
    if (d == dtype) return name;
  }
  TT_CHECK(false, "no safetensors name for dtype ", dtype_name(dtype));
}

bool converts_exactly(DType from, DType to) {
  return from == to || (from == DType::BF16 && (to == DType::F32 || to == DType::F64)) ||
         (from == DType::F32 && to == DType::F64) || (from == DType::I32 && to == DType::I64);
}

// ---- writing ----------------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorInfo> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  // Entries are separated by commas: each one after the first starts with one.
  std::string header = "{";
  auto separate = [&header] {
    if (header.back() != '{') header += ',';
  };
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      separate();
      append_json_string(header, key);
      header += ':';
      append_json_string(header, value);
    }
    header += '}';
  }
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const TensorInfo& t : tensors_) {
    TT_CHECK(seen.insert(t.name).second && t.name != "__metadata__", "SafetensorsWriter: tensor ",
             t.name, " listed twice (or reserved) for ", path_);
    const uint64_t end = offset + static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    separate();
    append_json_string(header, t.name);
    header += ":{\"dtype\":\"" + safetensors_dtype_name(t.dtype) + "\",\"shape\":[";
    for (int d = 0; d < t.shape.ndim(); ++d) {
      if (d > 0) header += ',';
      header += std::to_string(t.shape[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    input_error("checkpoint: cannot write '", path_, "': ", std::strerror(errno),
                "; check the folder exists and is writable");
  }
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  write_bytes(length, 8);
  write_bytes(header.data(), header.size());
  // Zero-byte tensors at the front are complete already.
  while (current_ < tensors_.size() && tensors_[current_].shape.numel() == 0) ++current_;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsWriter::write_bytes(const void* data, uint64_t bytes) {
  const auto* in = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t put = ::write(fd_, in, static_cast<size_t>(std::min<uint64_t>(bytes, 1ull << 30)));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      input_error("checkpoint: writing '", path_, "' failed: ", std::strerror(errno),
                  " (disk full?)");
    }
    in += put;
    bytes -= static_cast<uint64_t>(put);
  }
}

void SafetensorsWriter::append(const Tensor& chunk) {
  TT_CHECK(fd_ >= 0, "SafetensorsWriter::append after close: ", path_);
  TT_CHECK(current_ < tensors_.size(), "SafetensorsWriter: more bytes than the header lists for ",
           path_);
  const TensorInfo& t = tensors_[current_];
  TT_CHECK(chunk.device().is_cpu(), "SafetensorsWriter: ", t.name, " chunk is on ", chunk.device());
  TT_CHECK(chunk.dtype() == t.dtype, "SafetensorsWriter: ", t.name, " is ", dtype_name(t.dtype),
           " but a chunk is ", dtype_name(chunk.dtype()));
  const uint64_t total = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
  TT_CHECK(current_written_ + chunk.nbytes() <= total, "SafetensorsWriter: chunk of ",
           chunk.shape(), " overruns ", t.name, t.shape);
  const Tensor contiguous = chunk.contiguous();
  write_bytes(contiguous.raw_data(), contiguous.nbytes());
  current_written_ += chunk.nbytes();
  if (current_written_ == total) {
    current_written_ = 0;
    ++current_;
    while (current_ < tensors_.size() && tensors_[current_].shape.numel() == 0) ++current_;
  }
}

void SafetensorsWriter::write(const std::string& name, const Tensor& tensor) {
  TT_CHECK(current_ < tensors_.size() && tensors_[current_].name == name &&
               current_written_ == 0 && tensor.shape() == tensors_[current_].shape,
           "SafetensorsWriter: ", name, tensor.shape(), " is not the next tensor of ", path_);
  append(tensor);
}

void SafetensorsWriter::close() {
  if (fd_ < 0) return;
  TT_CHECK(current_ == tensors_.size(), "SafetensorsWriter: closing ", path_, " with tensor ",
           current_ < tensors_.size() ? tensors_[current_].name : "", " incomplete");
  const int fd = fd_;
  fd_ = -1;
  const bool synced = ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    input_error("checkpoint: writing '", path_, "' failed at fsync/close: ", std::strerror(errno));
  }
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorInfo> infos;
  for (const auto& [name, tensor] : tensors) {
    TT_CHECK(tensor.device().is_cpu(), "save_safetensors: ", name, " is on ", tensor.device());
    infos.push_back({name, tensor.dtype(), tensor.shape()});
  }
  SafetensorsWriter writer(path, std::move(infos), metadata);
  for (const auto& [name, tensor] : tensors) {
    if (tensor.numel() > 0) writer.append(tensor);
  }
  writer.close();
}

// ---- reading ----------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  auto bad = [this](auto&&... what) {
    input_error("safetensors file '", path_, "': ", std::forward<decltype(what)>(what)...);
  };
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad("cannot open (", std::strerror(errno), "); check the path");
  fd_ = std::shared_ptr<const int>(new int(fd), [](const int* p) {
    ::close(*p);
    delete p;
  });
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) bad("not a regular file");
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8) bad("only ", file_bytes, " bytes, shorter than the 8-byte header length (truncated?)");
  unsigned char length_bytes[8] = {};
  if (!pread_all(fd, length_bytes, 8, 0)) bad("cannot read the header length");
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
  if (header_bytes > file_bytes - 8) {
    bad("header length ", header_bytes, " runs past the end of the file (", file_bytes,
        " bytes): truncated, or not a safetensors file");
  }
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    bad("header length ", header_bytes, " is over the ", kMaxSafetensorsHeaderBytes, "-byte limit");
  }
  if (header_bytes < 2) bad("header length ", header_bytes, " is too short for a JSON object");
  data_start_ = 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - data_start_;

  simdjson::padded_string header(static_cast<size_t>(header_bytes));
  if (!pread_all(fd, header.data(), header_bytes, 8)) bad("cannot read the header");
  if (header.data()[0] != '{') bad("the header is not a JSON object (a safetensors file?)");
  dom::parser parser;
  dom::element root;
  if (simdjson::error_code error = parser.parse(header).get(root)) {
    bad("the header is not valid JSON (", simdjson::error_message(error), ")");
  }
  dom::object object;
  if (root.get(object) != simdjson::SUCCESS) bad("the header is not a JSON object");

  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (dom::key_value_pair field : object) {
    const std::string name(field.key);
    if (name == "__metadata__") {
      dom::object meta;
      if (field.value.get(meta) != simdjson::SUCCESS) bad("__metadata__ is not an object");
      for (dom::key_value_pair kv : meta) {
        std::string_view value;
        if (kv.value.get(value) != simdjson::SUCCESS) {
          bad("__metadata__ value of '", kv.key, "' is not a string");
        }
        metadata_[std::string(kv.key)] = std::string(value);
      }
      continue;
    }
    if (entries_.count(name) > 0) bad("tensor '", name, "' is listed twice");
    dom::object info;
    if (field.value.get(info) != simdjson::SUCCESS) bad("tensor '", name, "' is not an object");
    std::string_view dtype_text;
    if (info["dtype"].get(dtype_text) != simdjson::SUCCESS) {
      bad("tensor '", name, "' has no dtype string");
    }
    const std::optional<DType> dtype = from_safetensors_dtype(dtype_text);
    if (!dtype) {
      bad("tensor '", name, "' has unsupported dtype ", dtype_text,
          " (supported: F32, F64, BF16, F8_E4M3, F8_E5M2, I32, I64, U8)");
    }
    dom::array shape_json;
    if (info["shape"].get(shape_json) != simdjson::SUCCESS) bad("tensor '", name, "' has no shape array");
    if (shape_json.size() > static_cast<size_t>(Shape::kMaxDims)) {
      bad("tensor '", name, "' has ", shape_json.size(), " dims, more than ", Shape::kMaxDims);
    }
    Shape shape;
    uint64_t numel = 1;
    for (dom::element dim_json : shape_json) {
      uint64_t dim = 0;
      if (dim_json.get(dim) != simdjson::SUCCESS ||
          dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        bad("tensor '", name, "' has a shape entry that is not a non-negative integer");
      }
      if (__builtin_mul_overflow(numel, dim, &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        bad("tensor '", name, "' has a shape whose element count overflows");
      }
      shape.push_back(static_cast<int64_t>(dim));
    }
    dom::array offsets;
    uint64_t begin = 0, end = 0;
    if (info["data_offsets"].get(offsets) != simdjson::SUCCESS || offsets.size() != 2 ||
        offsets.at(0).get(begin) != simdjson::SUCCESS ||
        offsets.at(1).get(end) != simdjson::SUCCESS) {
      bad("tensor '", name, "' has no data_offsets [begin, end] of non-negative integers");
    }
    uint64_t expected_bytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(*dtype)), &expected_bytes)) {
      bad("tensor '", name, "' has a byte size that overflows");
    }
    if (end < begin || end - begin != expected_bytes) {
      bad("tensor '", name, "' has data_offsets [", begin, ", ", end, "] for ", dtype_text, shape,
          ", which needs ", expected_bytes, " bytes");
    }
    if (end > data_bytes) {
      bad("tensor '", name, "' ends at byte ", end, " of the data, past its end (", data_bytes,
          " bytes): truncated file?");
    }
    entries_[name] = Entry{*dtype, shape, begin, end};
    if (end > begin) ranges.push_back({begin, end, name});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      bad("tensors '", ranges[i - 1].name, "' and '", ranges[i].name, "' overlap (bytes [",
          ranges[i].begin, ", ", ranges[i - 1].end, ") of the data)");
    }
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) input_error("safetensors file '", path_, "' has no tensor ", name);
  return it->second;
}

DType SafetensorsFile::dtype(const std::string& name) const { return entry(name).dtype; }

Shape SafetensorsFile::shape(const std::string& name) const { return entry(name).shape; }

void SafetensorsFile::read_elements(const std::string& name, const Entry& e, uint64_t first,
                                    uint64_t count, DType dst_dtype, void* dst) const {
  const uint64_t esize = dtype_size(e.dtype);
  const uint64_t offset = data_start_ + e.begin + first * esize;
  auto failed = [&] {
    input_error("safetensors file '", path_, "': reading ", name, " failed (",
                std::strerror(errno), "; did the file shrink?)");
  };
  if (e.dtype == dst_dtype) {
    if (!pread_all(*fd_, dst, count * esize, offset)) failed();
    return;
  }
  // Converted through a bounded staging buffer.
  constexpr uint64_t kChunk = 1 << 20;
  std::vector<unsigned char> staging(static_cast<size_t>(std::min(count, kChunk) * esize));
  auto* out = static_cast<unsigned char*>(dst);
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(kChunk, count - done);
    if (!pread_all(*fd_, staging.data(), n * esize, offset + done * esize)) failed();
    convert(e.dtype, staging.data(), dst_dtype, out + done * dtype_size(dst_dtype), n);
    done += n;
  }
}

void SafetensorsFile::read_into(const std::string& name, const Tensor& dst) const {
  const Entry& e = entry(name);
  if (e.shape != dst.shape() || !converts_exactly(e.dtype, dst.dtype())) {
    input_error("safetensors file '", path_, "': ", name, " is ", dtype_name(e.dtype), e.shape,
                " but the model expects ", dtype_name(dst.dtype()), dst.shape(),
                "; load it with the config it was saved with");
  }
  TT_CHECK(dst.is_contiguous() && dst.device().is_cpu(), "read_into: ", name,
           " needs a contiguous CPU tensor");
  read_elements(name, e, 0, static_cast<uint64_t>(e.shape.numel()), dst.dtype(), dst.raw_data());
}

void SafetensorsFile::read_rows(const std::string& name, int64_t row_begin, int64_t rows,
                                int64_t col_begin, int64_t width, const Tensor& dst) const {
  const Entry& e = entry(name);
  if (e.shape.ndim() != 1 && e.shape.ndim() != 2) {
    input_error("safetensors file '", path_, "': ", name, e.shape,
                " is not 1-D or 2-D; read rows of matrices and vectors only");
  }
  const int64_t n_rows = e.shape[0];
  const int64_t n_cols = e.shape.ndim() == 2 ? e.shape[1] : 1;
  if (row_begin < 0 || rows < 0 || row_begin > n_rows - rows || col_begin < 0 || width < 0 ||
      col_begin > n_cols - width) {
    input_error("safetensors file '", path_, "': rows [", row_begin, ", +", rows, "), columns [",
                col_begin, ", +", width, ") lie outside ", name, e.shape);
  }
  if (!converts_exactly(e.dtype, dst.dtype())) {
    input_error("safetensors file '", path_, "': ", name, " is ", dtype_name(e.dtype),
                ", which does not convert exactly to ", dtype_name(dst.dtype()),
                "; read it into ", dtype_name(e.dtype), " and round explicitly");
  }
  TT_CHECK(dst.is_contiguous() && dst.device().is_cpu() && dst.numel() == rows * width,
           "read_rows: ", name, " needs a contiguous CPU [", rows, ", ", width, "] tensor, got ",
           dst);
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  const uint64_t out_row_bytes = static_cast<uint64_t>(width) * dtype_size(dst.dtype());
  if (width == n_cols) {
    read_elements(name, e, static_cast<uint64_t>(row_begin * n_cols),
                  static_cast<uint64_t>(rows * n_cols), dst.dtype(), out);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    read_elements(name, e, static_cast<uint64_t>((row_begin + r) * n_cols + col_begin),
                  static_cast<uint64_t>(width), dst.dtype(), out + r * out_row_bytes);
  }
}

}  // namespace titan::checkpoint
