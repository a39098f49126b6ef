#include "checkpoint/checkpoint_reader.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "checkpoint/safetensors.h"
#include "core/check.h"
#include "core/crc32c.h"
#include "core/file_io.h"
#include "core/json_reader.h"
#include "core/nonfinite.h"
#include "core/range_reader.h"

namespace titan::checkpoint {

namespace fs = std::filesystem;

namespace {

// Counts, sizes and offsets: never negative.
constexpr int64_t kNonNegative = 0;

// "pick another step (checkpoint.load_step) or delete this folder": the way out of a damaged
// step folder, in the caller's terms.
std::string pick_another_step(const CheckpointChoice& choice) {
  return detail::concat("pick another step",
                        choice.another_step.empty() ? "" : " (" + choice.another_step + ")",
                        " or delete this folder");
}

// Everything metadata.json's parser needs to report a problem: the file, and where in it.
JsonReader metadata_reader(const std::string& path, const CheckpointChoice& choice) {
  JsonReader::Style style;
  style.fix =
      "; the checkpoint is damaged or was not written by titan_train, " + pick_another_step(choice);
  return JsonReader("checkpoint: " + path, style);
}

// A list of `expected` non-negative int64s (a piece's offsets or sizes, a byte range).
std::vector<int64_t> int_list(const JsonReader& json, JsonValue value, const std::string& where,
                              size_t expected) {
  const JsonArray a = json.array(value, where);
  if (a.size() != expected) json.fail(where, a.size(), " numbers, expected ", expected);
  std::vector<int64_t> out;
  out.reserve(expected);
  size_t i = 0;
  for (const JsonValue e : a)
    out.push_back(json.integer(e, json_index_path(where, i++), kNonNegative));
  return out;
}

model::ModelArgs parse_model(const JsonReader& json, JsonObject o) {
  const std::string w = "model";
  model::ModelArgs m;
  m.flavor = std::string(json.string(json.required(o, "flavor", w + ".flavor"), w + ".flavor"));
  m.dim = json.integer_at(o, "dim", w, 1);
  m.n_layers = json.integer_at(o, "n_layers", w, 1);
  m.n_heads = json.integer_at(o, "n_heads", w, 1);
  m.n_kv_heads = json.integer_at(o, "n_kv_heads", w, 1);
  m.ffn_dim = json.integer_at(o, "ffn_dim", w, 1);
  m.vocab_size = json.integer_at(o, "vocab_size", w, 1);
  m.norm_eps = json.number_at(o, "norm_eps", w);
  m.rope_theta = json.number_at(o, "rope_theta", w);
  const std::string rw = w + ".rope_scaling";
  const JsonObject r = json.object(json.required(o, "rope_scaling", rw), rw);
  m.rope_scaling.enabled =
      json.boolean(json.required(r, "enabled", rw + ".enabled"), rw + ".enabled");
  m.rope_scaling.factor = json.number_at(r, "factor", rw);
  m.rope_scaling.low_freq_factor = json.number_at(r, "low_freq_factor", rw);
  m.rope_scaling.high_freq_factor = json.number_at(r, "high_freq_factor", rw);
  m.rope_scaling.original_max_position = json.number_at(r, "original_max_position", rw);
  // Written since tied embeddings came; a checkpoint without it was untied.
  if (o.find("tie_word_embeddings")) {
    m.tie_word_embeddings = json.boolean(json.required(o, "tie_word_embeddings", w + ".tie_word_embeddings"),
                                         w + ".tie_word_embeddings");
  }
  // Written by LoRA runs: the adapters' shape (a checkpoint without it has none).
  if (o.find("lora")) {
    const std::string lw = w + ".lora";
    const JsonObject l = json.object(json.required(o, "lora", lw), lw);
    m.lora.rank = json.integer_at(l, "rank", lw, 1);
    m.lora.alpha = json.number_at(l, "alpha", lw);
    m.lora.targets.clear();
    const std::string targets(json.string(json.required(l, "targets", lw + ".targets"), lw + ".targets"));
    for (size_t begin = 0; begin <= targets.size();) {
      const size_t end = std::min(targets.find(',', begin), targets.size());
      m.lora.targets.push_back(targets.substr(begin, end - begin));
      begin = end + 1;
    }
    try {
      model::validate_lora(m.lora, lw);
    } catch (const InputError& e) {
      json.fail(lw, e.what());
    }
  }
  return m;
}

// A file name inside the step folder: nothing that could reach outside it.
bool plain_file_name(std::string_view name) {
  return name.size() <= 255 && is_plain_file_name(name);  // 255: NAME_MAX
}

// Checks that the pieces of a tensor lie inside it, do not overlap, and together cover it.
void check_pieces(const JsonReader& json, const std::string& where, const StoredTensor& t) {
  const int64_t rows = t.shape[0], cols = t.shape.ndim() == 2 ? t.shape[1] : 1;
  struct Rect {
    int64_t r0, r1, c0, c1;
    size_t index;
  };
  std::vector<Rect> rects;
  rects.reserve(t.pieces.size());
  int64_t covered = 0;  // ≤ rows·cols, which does not overflow (checked with the shape)
  for (size_t i = 0; i < t.pieces.size(); ++i) {
    const StoredPiece& p = t.pieces[i];
    const int64_t r0 = p.offsets[0], c0 = t.shape.ndim() == 2 ? p.offsets[1] : 0;
    const int64_t nr = p.sizes[0], nc = t.shape.ndim() == 2 ? p.sizes[1] : 1;
    if (nr < 1 || nc < 1 || r0 > rows - nr || c0 > cols - nc) {
      json.fail(json_index_path(where + ".pieces", i), "the piece (offsets ", r0, ",", c0,
                ", sizes ", nr, ",", nc, ") lies outside the tensor's shape ", t.shape);
    }
    covered += nr * nc;
    if (covered > rows * cols) {
      json.fail(where + ".pieces", "the pieces hold more elements than the tensor's shape ",
                t.shape, ": two of them overlap");
    }
    rects.push_back({r0, r0 + nr, c0, c0 + nc, i});
  }
  // Sorted by first row, a piece can only overlap those that start before it ends.
  std::sort(rects.begin(), rects.end(),
            [](const Rect& a, const Rect& b) { return a.r0 != b.r0 ? a.r0 < b.r0 : a.c0 < b.c0; });
  for (size_t i = 0; i < rects.size(); ++i) {
    for (size_t j = i + 1; j < rects.size() && rects[j].r0 < rects[i].r1; ++j) {
      if (rects[j].c0 < rects[i].c1 && rects[i].c0 < rects[j].c1) {
        json.fail(where + ".pieces", "pieces ", rects[i].index, " and ", rects[j].index,
                  " overlap");
      }
    }
  }
  if (covered != rows * cols) {
    json.fail(where + ".pieces", "the pieces hold ", covered, " of the tensor's ", rows * cols,
              " elements: part of it is missing");
  }
}

StoredTensor parse_tensor(const JsonReader& json, const std::string& where, JsonObject o,
                          const std::vector<StoredFile>& files) {
  StoredTensor t;
  const std::string dw = where + ".dtype";
  const std::string_view dtype = json.string(json.required(o, "dtype", dw), dw);
  const std::optional<DType> parsed = parse_safetensors_dtype(dtype);
  if (!parsed) json.fail(dw, "unknown dtype '", dtype, "'");
  t.dtype = *parsed;
  const std::string sw = where + ".shape";
  const JsonArray shape = json.array(json.required(o, "shape", sw), sw);
  if (shape.size() != 1 && shape.size() != 2) {
    json.fail(sw, shape.size(), " dims; a stored tensor has 1 or 2");
  }
  std::vector<int64_t> dims;
  int64_t numel = 1;
  size_t d = 0;
  for (const JsonValue e : shape) {
    const int64_t n = json.integer(e, json_index_path(sw, d++), 1);
    if (__builtin_mul_overflow(numel, n, &numel)) json.fail(sw, "the element count overflows");
    dims.push_back(n);
  }
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(t.dtype)), &nbytes)) {
    json.fail(sw, "the byte count overflows");
  }
  for (int64_t n : dims) t.shape.push_back(n);
  const std::string pw = where + ".pieces";
  const JsonArray pieces = json.array(json.required(o, "pieces", pw), pw);
  size_t i = 0;
  for (const JsonValue e : pieces) {
    const std::string at = json_index_path(pw, i++);
    const JsonObject po = json.object(e, at);
    StoredPiece p;
    p.offsets =
        int_list(json, json.required(po, "offsets", at + ".offsets"), at + ".offsets", dims.size());
    p.sizes = int_list(json, json.required(po, "sizes", at + ".sizes"), at + ".sizes", dims.size());
    p.file = json.integer_at(po, "file", at, 0, static_cast<int64_t>(files.size()) - 1);
    const std::string bw = at + ".byte_range";
    const std::vector<int64_t> range = int_list(json, json.required(po, "byte_range", bw), bw, 2);
    const StoredFile& file = files[static_cast<size_t>(p.file)];
    if (range[0] > range[1] || static_cast<uint64_t>(range[1]) > file.bytes) {
      json.fail(bw, "[", range[0], ", ", range[1], ") lies outside ", file.name, " (", file.bytes,
                " bytes)");
    }
    p.byte_begin = static_cast<uint64_t>(range[0]);
    p.byte_end = static_cast<uint64_t>(range[1]);
    t.pieces.push_back(std::move(p));
  }
  check_pieces(json, where, t);
  // Only now are the sizes known to be inside the shape, so their product cannot overflow.
  for (size_t k = 0; k < t.pieces.size(); ++k) {
    const StoredPiece& p = t.pieces[k];
    int64_t n = static_cast<int64_t>(dtype_size(t.dtype));
    for (int64_t s : p.sizes) n *= s;
    if (p.byte_end - p.byte_begin != static_cast<uint64_t>(n)) {
      json.fail(json_index_path(pw, k) + ".byte_range", p.byte_end - p.byte_begin,
                " bytes for a piece of ", n, " bytes");
    }
  }
  return t;
}

}  // namespace

CheckpointReader::CheckpointReader(std::string step_folder, CheckpointChoice choice)
    : folder_(std::move(step_folder)), choice_(std::move(choice)) {
  const std::string path = (fs::path(folder_) / "metadata.json").string();
  metadata_.path = path;
  const JsonReader json = metadata_reader(path, choice_);
  std::error_code ec;
  if (!fs::is_directory(folder_, ec)) {
    input_error("checkpoint: '", folder_, "' ",
                fs::exists(folder_, ec) ? "is a file" : "does not exist",
                "; name a step folder of a checkpoint (…/checkpoint/step-N)");
  }
  JsonDocument document;
  if (!document.load(path)) {
    if (!fs::exists(path, ec)) {
      if (fs::exists(fs::path(folder_) / "config.json", ec)) {
        input_error("checkpoint: '", folder_,
                    "' has a config.json but no metadata.json: a Hugging Face folder, not a "
                    "titan_train step folder",
                    choice_.hf_folder.empty() ? "" : " (" + choice_.hf_folder + ")");
      }
      input_error("checkpoint: ", path, ": missing; the step folder is incomplete, ",
                  pick_another_step(choice_));
    }
    input_error("checkpoint: ", path, ": cannot read it (", document.error(), ")");
  }
  if (!document.parse()) json.fail("(whole file)", "not JSON (", document.error(), ")");
  const JsonObject root = json.object(document.root(), "(top level)");

  const std::string_view format = json.string(json.required(root, "format", "format"), "format");
  if (format != kCheckpointFormat) {
    json.fail("format", "'", format, "', expected '", kCheckpointFormat, "'");
  }
  const int64_t version = json.integer_at(root, "version", "(top level)", kNonNegative);
  if (version != kCheckpointVersion) {
    json.fail("version", version, ": this titan_train reads version ", kCheckpointVersion);
  }
  CheckpointMetadata& m = metadata_;
  m.step = json.integer_at(root, "step", "(top level)", kNonNegative);
  // A save names its folder after the step it records: a step-N folder holding another step
  // was renamed or copied, and resuming it would start at the wrong step, learning-rate and
  // data position without a word.
  fs::path named = fs::path(folder_).lexically_normal();
  if (named.filename().empty()) named = named.parent_path();
  const std::string folder_name = named.filename().string();
  int64_t folder_step = -1;
  if (folder_name.starts_with("step-")) {
    const char* digits = folder_name.data() + 5;
    const char* end = folder_name.data() + folder_name.size();
    const auto [stop, error] = std::from_chars(digits, end, folder_step);
    if (error != std::errc() || stop != end || digits == end) folder_step = -1;
  }
  if (folder_step >= 0 && folder_step != m.step) {
    json.fail("step", m.step, " but the folder is named ", folder_name,
              " (renamed, or copied from another step's folder?)");
  }
  if (root.find("optimizer")) {
    m.optimizer = std::string(json.string(json.required(root, "optimizer", "optimizer"), "optimizer"));
  }
  m.optimizer_steps = json.integer_at(root, "optimizer_steps", "(top level)", kNonNegative);
  m.loader_samples_consumed =
      json.integer_at(root, "loader_samples_consumed", "(top level)", kNonNegative);
  if (root.find("loader_sources")) {
    const JsonArray sources =
        json.array(json.required(root, "loader_sources", "loader_sources"), "loader_sources");
    size_t k = 0;
    for (const JsonValue e : sources) {
      const std::string at = json_index_path("loader_sources", k++);
      const JsonObject so = json.object(e, at);
      m.loader_sources.emplace_back(
          std::string(json.string(json.required(so, "name", at + ".name"), at + ".name")),
          json.integer_at(so, "samples_consumed", at, kNonNegative));
    }
  }
  m.model = parse_model(json, json.object(json.required(root, "model", "model"), "model"));
  const JsonObject mesh = json.object(json.required(root, "mesh", "mesh"), "mesh");
  // pp and cp were added later: a checkpoint without them was saved by a mesh without them.
  m.mesh.pp = mesh.find("pp") ? json.integer_at(mesh, "pp", "mesh", 1) : 1;
  m.mesh.dp_replicate = json.integer_at(mesh, "dp_replicate", "mesh", 1);
  m.mesh.dp_shard = json.integer_at(mesh, "dp_shard", "mesh", 1);
  m.mesh.cp = mesh.find("cp") ? json.integer_at(mesh, "cp", "mesh", 1) : 1;
  m.mesh.tp = json.integer_at(mesh, "tp", "mesh", 1);

  const JsonArray files = json.array(json.required(root, "files", "files"), "files");
  std::set<std::string, std::less<>> names;
  size_t i = 0;
  for (const JsonValue e : files) {
    const std::string at = json_index_path("files", i++);
    const JsonObject fo = json.object(e, at);
    StoredFile f;
    f.name = std::string(json.string(json.required(fo, "name", at + ".name"), at + ".name"));
    if (!plain_file_name(f.name)) {
      json.fail(at + ".name", "'", f.name, "' is not a plain file name in the step folder");
    }
    if (!names.insert(f.name).second) json.fail(at + ".name", "'", f.name, "' is listed twice");
    f.bytes = static_cast<uint64_t>(json.integer_at(fo, "bytes", at, kNonNegative));
    f.crc32c = static_cast<uint32_t>(json.integer_at(fo, "crc32c", at, 0, UINT32_MAX));
    m.files.push_back(std::move(f));
  }
  const JsonObject tensors = json.object(json.required(root, "tensors", "tensors"), "tensors");
  for (const JsonMember kv : tensors) {
    const std::string name(kv.key);
    const std::string at = "tensors." + name;
    if (name.empty()) json.fail("tensors", "a tensor with an empty name");
    m.tensors.emplace(name, parse_tensor(json, at, json.object(kv.value, at), m.files));
  }

  // Two pieces sharing bytes would mean a writer bug or a forged file.
  std::vector<std::tuple<int64_t, uint64_t, uint64_t, std::string>> ranges;
  for (const auto& [name, t] : m.tensors) {
    for (const StoredPiece& p : t.pieces)
      ranges.emplace_back(p.file, p.byte_begin, p.byte_end, name);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k) {
    const auto& [file, begin, end, name] = ranges[k];
    const auto& [prev_file, prev_begin, prev_end, prev_name] = ranges[k - 1];
    if (file == prev_file && begin < prev_end) {
      json.fail("tensors." + name, "its bytes in ", m.files[static_cast<size_t>(file)].name,
                " overlap those of a piece of ", prev_name);
    }
  }

  // Every file is there, whole.
  for (const StoredFile& f : m.files) {
    const std::string file = (fs::path(folder_) / f.name).string();
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
      input_error("checkpoint: ", file, ": missing (", path,
                  " lists it); the checkpoint is "
                  "incomplete, ",
                  pick_another_step(choice_));
    }
    if (!S_ISREG(st.st_mode)) {
      input_error("checkpoint: ", file, ": not a regular file (", path, " lists it as one of ",
                  f.bytes, " bytes); ", pick_another_step(choice_));
    }
    if (static_cast<uint64_t>(st.st_size) != f.bytes) {
      input_error("checkpoint: ", file, ": ", st.st_size, " bytes, ", path, " records ", f.bytes,
                  " (", static_cast<uint64_t>(st.st_size) < f.bytes ? "truncated" : "grown", "); ",
                  pick_another_step(choice_));
    }
  }
}

bool CheckpointReader::contains(const std::string& tensor) const {
  return metadata_.tensors.count(tensor) > 0;
}

void CheckpointReader::verify_file(int64_t index) const {
  TT_CHECK(index >= 0 && index < static_cast<int64_t>(metadata_.files.size()), "verify_file(",
           index, ")");
  const StoredFile& f = metadata_.files[static_cast<size_t>(index)];
  const std::string path = (fs::path(folder_) / f.name).string();
  const Fd fd = Fd::open(path, O_RDONLY);
  if (!fd.ok()) input_error("checkpoint: ", path, ": cannot open (", std::strerror(errno), ")");
  uint32_t crc = 0;
  if (const std::optional<ReadError> failed = file_crc32c(fd.get(), f.bytes, crc)) {
    if (failed->error != 0) {
      input_error("checkpoint: ", path, ": reading byte ", failed->at, " failed (",
                  std::strerror(failed->error), "); ", pick_another_step(choice_));
    }
    input_error("checkpoint: ", path, ": ends at byte ", failed->at, ", ", metadata_.path,
                " records ", f.bytes, " (truncated)");
  }
  if (crc != f.crc32c) {
    input_error("checkpoint: ", path, ": CRC32C ", crc, " but ", metadata_.path, " records ",
                f.crc32c, ": the file is corrupt; ", pick_another_step(choice_));
  }
}

namespace {

// Rows of a piece read as one byte range: `rows` rows of `cols` stored elements, global rows
// from `row` and columns from `col`, which go to dst row `dst_row`, column `dst_col`.
struct RowBlock {
  int64_t row, col, rows, cols;
  int64_t dst_row, dst_col;
};

}  // namespace

void CheckpointReader::read_region(const std::string& name, int64_t row_begin, int64_t rows,
                                   int64_t col_begin, int64_t width, const Tensor& dst) const {
  auto it = metadata_.tensors.find(name);
  if (it == metadata_.tensors.end()) {
    input_error("checkpoint: ", metadata_.path, ": no tensor '", name,
                "': the checkpoint was saved for another model");
  }
  const StoredTensor& t = it->second;
  const int64_t t_rows = t.shape[0], t_cols = t.shape.ndim() == 2 ? t.shape[1] : 1;
  TT_CHECK(row_begin >= 0 && rows >= 0 && row_begin + rows <= t_rows && col_begin >= 0 &&
               width >= 0 && col_begin + width <= t_cols,
           "read_region(", name, ": rows [", row_begin, ", +", rows, "), cols [", col_begin, ", +",
           width, ")) outside ", t.shape);
  TT_CHECK(dst.device().is_cpu() && dst.is_contiguous() && dst.numel() == rows * width,
           "read_region(", name, ") into ", dst, " for [", rows, ", ", width, "]");
  if (!converts_exactly(t.dtype, dst.dtype())) {
    input_error("checkpoint: ", metadata_.path, ": ", name, " is stored as ", dtype_name(t.dtype),
                ", which does not convert exactly to ", dtype_name(dst.dtype()));
  }
  const uint64_t src_size = dtype_size(t.dtype), dst_size = dtype_size(dst.dtype());
  const bool same = t.dtype == dst.dtype();
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  for (const StoredPiece& p : t.pieces) {
    const int64_t pr0 = p.offsets[0], pnr = p.sizes[0];
    const int64_t pc0 = t.shape.ndim() == 2 ? p.offsets[1] : 0;
    const int64_t pnc = t.shape.ndim() == 2 ? p.sizes[1] : 1;
    const int64_t r0 = std::max(row_begin, pr0), r1 = std::min(row_begin + rows, pr0 + pnr);
    const int64_t c0 = std::max(col_begin, pc0), c1 = std::min(col_begin + width, pc0 + pnc);
    if (r0 >= r1 || c0 >= c1) continue;
    const std::string path =
        (fs::path(folder_) / metadata_.files[static_cast<size_t>(p.file)].name).string();
    const Fd fd = Fd::open(path, O_RDONLY);
    if (!fd.ok()) input_error("checkpoint: ", path, ": cannot open (", std::strerror(errno), ")");
    // Whole rows of the piece are one byte range; a column block of it is one range per row,
    // of the owned columns only (a rank reads the bytes it owns and no others).
    std::vector<RowBlock> blocks;
    if (c0 == pc0 && c1 == pc0 + pnc) {
      blocks.push_back({r0, c0, r1 - r0, c1 - c0, r0 - row_begin, c0 - col_begin});
    } else {
      for (int64_t r = r0; r < r1; ++r) {
        blocks.push_back({r, c0, 1, c1 - c0, r - row_begin, c0 - col_begin});
      }
    }
    std::vector<FileRange> ranges;
    ranges.reserve(blocks.size());
    for (const RowBlock& b : blocks) {
      const uint64_t at =
          p.byte_begin + static_cast<uint64_t>((b.row - pr0) * pnc + (b.col - pc0)) * src_size;
      // Contiguous in dst too (its rows are the block's): the stored bytes are read into place.
      const bool in_place = same && (b.rows == 1 || b.cols == width);
      ranges.push_back({at, static_cast<uint64_t>(b.rows * b.cols) * src_size,
                        in_place
                            ? out + static_cast<uint64_t>(b.dst_row * width + b.dst_col) * dst_size
                            : nullptr});
    }
    auto visit = [&](size_t k, const unsigned char* data, uint64_t at, uint64_t n) {
      const RowBlock& b = blocks[k];
      const auto first = static_cast<int64_t>(at / src_size);
      const auto count = static_cast<int64_t>(n / src_size);
      if (const std::optional<NonFinite> bad =
              first_nonfinite(t.dtype, data, static_cast<uint64_t>(count))) {
        const int64_t e = first + static_cast<int64_t>(bad->index);
        const int64_t row = b.row + e / b.cols, col = b.col + e % b.cols;
        input_error("checkpoint: ", path, ": ", name, t.shape, " holds ", bad->what, " at ",
                    t.shape.ndim() == 2 ? Shape{row, col} : Shape{row},
                    ": the run had diverged when it saved this step (or the file was damaged "
                    "before its checksum was taken); ",
                    pick_another_step(choice_));
      }
      if (ranges[k].into != nullptr) return;
      // The chunk's elements, row segment by row segment, converted into their dst rows.
      for (int64_t e = first; e < first + count;) {
        const int64_t row = e / b.cols, col = e % b.cols;
        const int64_t n_here = std::min(b.cols - col, first + count - e);
        unsigned char* d =
            out + static_cast<uint64_t>((b.dst_row + row) * width + b.dst_col + col) * dst_size;
        convert_exactly(t.dtype, data + static_cast<uint64_t>(e - first) * src_size, dst.dtype(), d,
                        static_cast<uint64_t>(n_here));
        e += n_here;
      }
    };
    if (const std::optional<ReadError> failed = read_ranges(fd.get(), ranges, src_size, visit)) {
      const uint64_t byte = ranges[failed->range].offset + failed->at;
      if (failed->error != 0) {
        input_error("checkpoint: ", path, ": reading byte ", byte, " failed (",
                    std::strerror(failed->error), "); ", pick_another_step(choice_));
      }
      input_error("checkpoint: ", path, ": ends before byte ", byte + 1, " (truncated)");
    }
  }
}

void check_same_optimizer(const CheckpointMetadata& saved, const std::string& optimizer,
                          const std::string& key, const std::string& weights_only) {
  if (saved.optimizer == optimizer) return;
  input_error(key, ": ", saved.path, " holds the state of optimizer ", saved.optimizer,
              " and this run's optimizer is ", optimizer, "; resume with optimizer.name ",
              saved.optimizer, ", or start ", optimizer, " from its weights alone",
              weights_only.empty() ? "" : " with ", weights_only);
}

void check_same_model(const CheckpointMetadata& saved, const model::ModelArgs& args,
                      const std::string& key) {
  std::string mismatches;
  auto compare = [&](const char* name, int64_t saved_value, int64_t value) {
    if (saved_value == value) return;
    mismatches += (mismatches.empty() ? "" : ", ") + std::string(name) + " " +
                  std::to_string(saved_value) + " (this run: " + std::to_string(value) + ")";
  };
  compare("dim", saved.model.dim, args.dim);
  compare("n_layers", saved.model.n_layers, args.n_layers);
  compare("n_heads", saved.model.n_heads, args.n_heads);
  compare("n_kv_heads", saved.model.n_kv_heads, args.n_kv_heads);
  compare("ffn_dim", saved.model.ffn_dim, args.ffn_dim);
  compare("vocab_size", saved.model.vocab_size, args.vocab_size);
  if (saved.model.tie_word_embeddings != args.tie_word_embeddings) {
    auto text = [](bool tied) { return tied ? std::string("true") : std::string("false"); };
    mismatches += (mismatches.empty() ? "" : ", ") + std::string("tie_word_embeddings ") +
                  text(saved.model.tie_word_embeddings) +
                  " (this run: " + text(args.tie_word_embeddings) + ")";
  }
  // A base model's checkpoint (no adapters) starts a LoRA run (checkpointer.cpp); adapters once
  // saved must be those of the run.
  const model::LoraConfig& lora = saved.model.lora;
  if (lora.enabled() && (lora.rank != args.lora.rank || lora.targets != args.lora.targets)) {
    auto text = [](const model::LoraConfig& l) {
      if (!l.enabled()) return std::string("off");
      std::string t = "rank " + std::to_string(l.rank) + " on ";
      for (size_t i = 0; i < l.targets.size(); ++i) t += (i ? "," : "") + l.targets[i];
      return t;
    };
    mismatches += (mismatches.empty() ? "" : ", ") + std::string("LoRA adapters ") + text(lora) +
                  " (this run: " + text(args.lora) + ")";
  }
  if (!mismatches.empty()) {
    input_error(key, ": ", saved.path, " was saved for another model: ", mismatches,
                "; train with the same model.*", lora.enabled() ? " and lora.*" : "",
                " settings, or point ", key, " elsewhere");
  }
}

}  // namespace titan::checkpoint
