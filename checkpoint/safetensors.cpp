#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include "core/bf16.h"
#include "core/check.h"
#include "core/crc32c.h"
#include "core/json_reader.h"
#include "core/json_text.h"
#include "core/nonfinite.h"
#include "core/range_reader.h"

namespace titan::checkpoint {

namespace {

// The one dtype table, in the order the reader's "supported" list gives them.
constexpr std::pair<DType, std::string_view> kDtypeNames[] = {
    {DType::F32, "F32"},      {DType::F64, "F64"}, {DType::BF16, "BF16"}, {DType::E4M3, "F8_E4M3"},
    {DType::E5M2, "F8_E5M2"}, {DType::I32, "I32"}, {DType::I64, "I64"},   {DType::U8, "U8"}};

std::string supported_dtype_names() {
  std::string out;
  for (const auto& [dtype, name] : kDtypeNames) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

// The conversions converts_exactly allows besides same → same (its comment says why these).
constexpr std::pair<DType, DType> kWidenings[] = {{DType::BF16, DType::F32},
                                                  {DType::BF16, DType::F64},
                                                  {DType::F32, DType::F64},
                                                  {DType::I32, DType::I64}};

template <class From, class To, class Read>
void widen(const void* src, void* dst, uint64_t count, Read read) {
  const auto* in = static_cast<const From*>(src);
  auto* out = static_cast<To*>(dst);
  for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<To>(read(in[i]));
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& [d, name] : kDtypeNames) {
    if (d == dtype) return name;
  }
  TT_CHECK(false, "no safetensors name for dtype ", dtype_name(dtype));
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const auto& [d, n] : kDtypeNames) {
    if (n == name) return d;
  }
  return std::nullopt;
}

bool converts_exactly(DType from, DType to) {
  if (from == to) return true;
  return std::find(std::begin(kWidenings), std::end(kWidenings), std::pair{from, to}) !=
         std::end(kWidenings);
}

void convert_exactly(DType from, const void* src, DType to, void* dst, uint64_t count) {
  const auto same = [](auto x) { return x; };
  if (from == to) {
    std::memcpy(dst, src, count * dtype_size(from));
  } else if (from == DType::BF16 && to == DType::F32) {
    widen<bf16_t, float>(src, dst, count, bf16_to_float);
  } else if (from == DType::BF16 && to == DType::F64) {
    widen<bf16_t, double>(src, dst, count, bf16_to_float);
  } else if (from == DType::F32 && to == DType::F64) {
    widen<float, double>(src, dst, count, same);
  } else if (from == DType::I32 && to == DType::I64) {
    widen<int32_t, int64_t>(src, dst, count, same);
  } else {
    TT_CHECK(false, "convert_exactly: ", dtype_name(from), " to ", dtype_name(to), " is not exact");
  }
}

// ---- writing ----------------------------------------------------------------------------------

SafetensorsLayout::SafetensorsLayout(std::vector<TensorInfo> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : tensors_(std::move(tensors)) {
  // Entries are separated by commas: each one after the first starts with one.
  std::string json = "{";
  auto separate = [&json] {
    if (json.back() != '{') json += ',';
  };
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      separate();
      append_json_string(json, key);
      json += ':';
      append_json_string(json, value);
    }
    json += '}';
  }
  data_offsets_.push_back(0);
  std::set<std::string> seen;
  for (const TensorInfo& t : tensors_) {
    TT_CHECK(seen.insert(t.name).second && t.name != "__metadata__", "SafetensorsLayout: tensor ",
             t.name, " listed twice (or reserved)");
    const uint64_t begin = data_offsets_.back();
    const uint64_t end = begin + static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    separate();
    append_json_string(json, t.name);
    json += ":{\"dtype\":\"";
    json += safetensors_dtype_name(t.dtype);
    json += "\",\"shape\":[";
    for (int d = 0; d < t.shape.ndim(); ++d) {
      if (d > 0) json += ',';
      json += std::to_string(t.shape[d]);
    }
    json += "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
    data_offsets_.push_back(end);
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  header_.reserve(8 + json.size());
  for (int i = 0; i < 8; ++i) header_ += static_cast<char>((json.size() >> (8 * i)) & 0xff);
  header_ += json;
}

SafetensorsWriter::SafetensorsWriter(std::string path, SafetensorsLayout layout, std::string fix)
    : path_(std::move(path)), layout_(std::move(layout)), fix_(std::move(fix)) {
  fd_ = Fd::open(path_, O_WRONLY | O_CREAT | O_TRUNC);
  if (!fd_.ok()) io_failed("create");
  write_bytes(layout_.header().data(), layout_.header().size());
  skip_empty_tensors();
}

void SafetensorsWriter::io_failed(const char* step) const {
  input_error("checkpoint: cannot ", step, " '", path_, "': ", std::strerror(errno), "; ", fix_);
}

void SafetensorsWriter::write_bytes(const void* data, uint64_t bytes) {
  crc_ = titan::crc32c(data, bytes, crc_);
  if (!write_all(fd_.get(), data, bytes)) io_failed("write");
}

// Zero-byte tensors are complete before anything is written to them.
void SafetensorsWriter::skip_empty_tensors() {
  const std::vector<TensorInfo>& tensors = layout_.tensors();
  while (current_ < tensors.size() && tensors[current_].shape.numel() == 0) ++current_;
}

void SafetensorsWriter::append(const Tensor& chunk) {
  const std::vector<TensorInfo>& tensors = layout_.tensors();
  TT_CHECK(fd_.ok(), "SafetensorsWriter::append after close: ", path_);
  TT_CHECK(current_ < tensors.size(), "SafetensorsWriter: more bytes than the header lists for ",
           path_);
  const TensorInfo& t = tensors[current_];
  TT_CHECK(chunk.device().is_cpu(), "SafetensorsWriter: ", t.name, " chunk is on ", chunk.device());
  TT_CHECK(chunk.dtype() == t.dtype, "SafetensorsWriter: ", t.name, " is ", dtype_name(t.dtype),
           " but a chunk is ", dtype_name(chunk.dtype()));
  const uint64_t total = layout_.end(current_) - layout_.begin(current_);
  TT_CHECK(current_written_ + chunk.nbytes() <= total, "SafetensorsWriter: chunk of ",
           chunk.shape(), " overruns ", t.name, t.shape);
  const Tensor contiguous = chunk.contiguous();
  write_bytes(contiguous.raw_data(), contiguous.nbytes());
  current_written_ += chunk.nbytes();
  if (current_written_ == total) {
    current_written_ = 0;
    ++current_;
    skip_empty_tensors();
  }
}

void SafetensorsWriter::write(const std::string& name, const Tensor& tensor) {
  const std::vector<TensorInfo>& tensors = layout_.tensors();
  TT_CHECK(current_ < tensors.size() && tensors[current_].name == name && current_written_ == 0 &&
               tensor.shape() == tensors[current_].shape,
           "SafetensorsWriter: ", name, tensor.shape(), " is not the next tensor of ", path_);
  append(tensor);
}

void SafetensorsWriter::close() {
  if (!fd_.ok()) return;
  const std::vector<TensorInfo>& tensors = layout_.tensors();
  TT_CHECK(current_ == tensors.size(), "SafetensorsWriter: closing ", path_, " with tensor ",
           current_ < tensors.size() ? tensors[current_].name : "", " incomplete");
  if (::fsync(fd_.get()) != 0) {
    const int saved = errno;
    fd_.close();
    errno = saved;
    io_failed("fsync");
  }
  if (!fd_.close()) io_failed("close");
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
  auto fd = std::make_shared<Fd>(Fd::open(path_, O_RDONLY));
  if (!fd->ok()) bad("cannot open (", std::strerror(errno), "); check the path");
  fd_ = fd;
  struct stat st {};
  if (::fstat(fd_->get(), &st) != 0 || !S_ISREG(st.st_mode)) bad("not a regular file");
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8)
    bad("only ", file_bytes, " bytes, shorter than the 8-byte header length (truncated?)");
  unsigned char length_bytes[8] = {};
  if (!pread_all(fd_->get(), length_bytes, 8, 0)) bad("cannot read the header length");
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

  JsonDocument header;
  char* header_text = header.text_buffer(static_cast<size_t>(header_bytes));
  if (!pread_all(fd_->get(), header_text, header_bytes, 8)) bad("cannot read the header");
  if (header_text[0] != '{') bad("the header is not a JSON object (a safetensors file?)");
  if (!header.parse()) bad("the header is not valid JSON (", header.error(), ")");
  const std::optional<JsonObject> object = header.root().get_object();
  if (!object) bad("the header is not a JSON object");

  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (const JsonMember field : *object) {
    const std::string name(field.key);
    if (name == "__metadata__") {
      const std::optional<JsonObject> meta = field.value.get_object();
      if (!meta) bad("__metadata__ is not an object");
      for (const JsonMember kv : *meta) {
        const std::optional<std::string_view> value = kv.value.get_string();
        if (!value) bad("__metadata__ value of '", kv.key, "' is not a string");
        metadata_[std::string(kv.key)] = std::string(*value);
      }
      continue;
    }
    const std::optional<JsonObject> info = field.value.get_object();
    if (!info) bad("tensor '", name, "' is not an object");
    const std::optional<JsonValue> dtype_json = info->find("dtype");
    const std::optional<std::string_view> dtype_text =
        dtype_json ? dtype_json->get_string() : std::nullopt;
    if (!dtype_text) bad("tensor '", name, "' has no dtype string");
    const std::optional<DType> dtype = parse_safetensors_dtype(*dtype_text);
    if (!dtype) {
      bad("tensor '", name, "' has unsupported dtype ", *dtype_text,
          " (supported: ", supported_dtype_names(), ")");
    }
    const std::optional<JsonValue> shape_value = info->find("shape");
    const std::optional<JsonArray> shape_json =
        shape_value ? shape_value->get_array() : std::nullopt;
    if (!shape_json) bad("tensor '", name, "' has no shape array");
    if (shape_json->size() > static_cast<size_t>(Shape::kMaxDims)) {
      bad("tensor '", name, "' has ", shape_json->size(), " dims, more than ", Shape::kMaxDims);
    }
    Shape shape;
    uint64_t numel = 1;
    for (const JsonValue dim_json : *shape_json) {
      const std::optional<uint64_t> dim_value = dim_json.get_uint64();
      if (!dim_value || *dim_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        bad("tensor '", name, "' has a shape entry that is not a non-negative integer");
      }
      const uint64_t dim = *dim_value;
      if (__builtin_mul_overflow(numel, dim, &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        bad("tensor '", name, "' has a shape whose element count overflows");
      }
      shape.push_back(static_cast<int64_t>(dim));
    }
    const std::optional<JsonValue> offsets_value = info->find("data_offsets");
    const std::optional<JsonArray> offsets =
        offsets_value ? offsets_value->get_array() : std::nullopt;
    const std::optional<uint64_t> offset_begin =
        offsets && offsets->size() == 2 ? offsets->at(0).get_uint64() : std::nullopt;
    const std::optional<uint64_t> offset_end =
        offsets && offsets->size() == 2 ? offsets->at(1).get_uint64() : std::nullopt;
    if (!offset_begin || !offset_end) {
      bad("tensor '", name, "' has no data_offsets [begin, end] of non-negative integers");
    }
    const uint64_t begin = *offset_begin, end = *offset_end;
    uint64_t expected_bytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(*dtype)), &expected_bytes)) {
      bad("tensor '", name, "' has a byte size that overflows");
    }
    if (end < begin || end - begin != expected_bytes) {
      bad("tensor '", name, "' has data_offsets [", begin, ", ", end, "] for ", *dtype_text, shape,
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

void SafetensorsFile::read_spans(const std::string& name, const Entry& e,
                                 std::span<const ElementSpan> spans, DType dst_dtype) const {
  const uint64_t esize = dtype_size(e.dtype), dsize = dtype_size(dst_dtype);
  const bool same = e.dtype == dst_dtype;
  std::vector<FileRange> ranges;
  ranges.reserve(spans.size());
  for (const ElementSpan& span : spans) {
    // A destination that takes the stored bytes as they are is read into directly.
    ranges.push_back({data_start_ + e.begin + span.first * esize, span.count * esize,
                      same ? span.dst : nullptr});
  }
  // Each chunk as read, in its stored dtype: the NaN check, then the conversion into dst.
  auto visit = [&](size_t r, const unsigned char* data, uint64_t at, uint64_t n) {
    const ElementSpan& span = spans[r];
    const uint64_t first = at / esize, count = n / esize;
    if (const std::optional<NonFinite> bad = first_nonfinite(e.dtype, data, count)) {
      refuse_nonfinite(name, e, span.first + first + bad->index, bad->what);
    }
    if (!same) {
      convert_exactly(e.dtype, data, dst_dtype,
                      static_cast<unsigned char*>(span.dst) + first * dsize, count);
    }
  };
  if (const std::optional<ReadError> failed = read_ranges(fd_->get(), ranges, esize, visit)) {
    const uint64_t byte = ranges[failed->range].offset + failed->at;
    if (failed->error == 0) {
      input_error("safetensors file '", path_, "': ends at byte ", byte, ", inside ", name,
                  " (truncated, or it shrank while being read); download or export it again");
    }
    input_error("safetensors file '", path_, "': reading ", name, " at byte ", byte, " failed (",
                std::strerror(failed->error), "); check the disk and the file");
  }
}

void SafetensorsFile::refuse_nonfinite(const std::string& name, const Entry& e, uint64_t flat,
                                       const char* what) const {
  // The element's index in each dim of the tensor.
  Shape where = e.shape;
  for (int d = e.shape.ndim() - 1; d >= 0; --d) {
    where[d] = static_cast<int64_t>(flat % static_cast<uint64_t>(e.shape[d]));
    flat /= static_cast<uint64_t>(e.shape[d]);
  }
  input_error("safetensors file '", path_, "': ", name, e.shape, " holds ", what, " at ", where,
              "; a model with a weight that is not finite computes nothing but NaN: "
              "the file is damaged or was saved from a run that diverged, so download or export "
              "it again");
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
  const ElementSpan whole{0, static_cast<uint64_t>(e.shape.numel()), dst.raw_data()};
  read_spans(name, e, {&whole, 1}, dst.dtype());
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
                ", which does not convert exactly to ", dtype_name(dst.dtype()), "; read it into ",
                dtype_name(e.dtype), " and round explicitly");
  }
  TT_CHECK(dst.is_contiguous() && dst.device().is_cpu() && dst.numel() == rows * width,
           "read_rows: ", name, " needs a contiguous CPU [", rows, ", ", width, "] tensor, got ",
           dst);
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  const auto cols = static_cast<uint64_t>(n_cols);
  std::vector<ElementSpan> spans;
  if (width == n_cols) {
    spans.push_back(
        {static_cast<uint64_t>(row_begin) * cols, static_cast<uint64_t>(rows) * cols, out});
  } else {
    // A column block: the `width` elements of each row, and no byte of the others.
    const uint64_t out_row_bytes = static_cast<uint64_t>(width) * dtype_size(dst.dtype());
    for (int64_t r = 0; r < rows; ++r) {
      spans.push_back(
          {static_cast<uint64_t>(row_begin + r) * cols + static_cast<uint64_t>(col_begin),
           static_cast<uint64_t>(width), out + static_cast<uint64_t>(r) * out_row_bytes});
    }
  }
  read_spans(name, e, spans, dst.dtype());
}

}  // namespace titan::checkpoint
