#include "checkpoint/checkpoint_metadata.h"

#include <charconv>
#include <string_view>

#include "checkpoint/safetensors.h"
#include "core/json_text.h"

namespace titan::checkpoint {

namespace {

// Shortest round-trip digits (1e-05, 5e+05, 8), as to_chars gives them.
template <class T>
void append_number(std::string& out, T value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

// One JSON object on one line: {"key": value, "key": value}. Which fields share a line is
// part of what makes the file readable, so the layout is written out here, not left to a
// general writer.
class LineObject {
 public:
  explicit LineObject(std::string& out) : out_(out) { out_ += '{'; }
  ~LineObject() { out_ += '}'; }
  LineObject(const LineObject&) = delete;
  LineObject& operator=(const LineObject&) = delete;

  // Starts field `key`, for the caller to append its value (a nested object, say).
  std::string& field(std::string_view key) {
    if (fields_++ > 0) out_ += ", ";
    append_json_string(out_, key);
    out_ += ": ";
    return out_;
  }
  template <class T>
  void number(std::string_view key, T value) {
    append_number(field(key), value);
  }
  void string(std::string_view key, std::string_view value) {
    append_json_string(field(key), value);
  }
  void boolean(std::string_view key, bool value) { field(key) += value ? "true" : "false"; }
  // [a, b, …]
  template <class Range>
  void numbers(std::string_view key, const Range& values) {
    std::string& out = field(key);
    out += '[';
    bool first = true;
    for (const auto value : values) {
      if (!first) out += ", ";
      first = false;
      append_number(out, value);
    }
    out += ']';
  }

 private:
  std::string& out_;
  int fields_ = 0;
};

void append_model(std::string& out, const model::ModelArgs& model) {
  LineObject o(out);
  o.string("flavor", model.flavor);
  o.number("dim", model.dim);
  o.number("n_layers", model.n_layers);
  o.number("n_heads", model.n_heads);
  o.number("n_kv_heads", model.n_kv_heads);
  o.number("ffn_dim", model.ffn_dim);
  o.number("vocab_size", model.vocab_size);
  o.number("norm_eps", model.norm_eps);
  o.number("rope_theta", model.rope_theta);
  o.boolean("tie_word_embeddings", model.tie_word_embeddings);
  {  // each nested object closes (its destructor) before the next field of `o` opens
    const model::RopeScaling& r = model.rope_scaling;
    LineObject scaling(o.field("rope_scaling"));
    scaling.boolean("enabled", r.enabled);
    scaling.number("factor", r.factor);
    scaling.number("low_freq_factor", r.low_freq_factor);
    scaling.number("high_freq_factor", r.high_freq_factor);
    scaling.number("original_max_position", r.original_max_position);
  }
  if (model.lora.enabled()) {
    LineObject lora(o.field("lora"));
    lora.number("rank", model.lora.rank);
    lora.number("alpha", model.lora.alpha);
    std::string targets;
    for (const std::string& t : model.lora.targets) targets += (targets.empty() ? "" : ",") + t;
    lora.string("targets", targets);
  }
}

void append_tensor(std::string& out, const StoredTensor& t) {
  LineObject o(out);
  o.string("dtype", safetensors_dtype_name(t.dtype));
  o.numbers("shape", t.shape);
  std::string& pieces = o.field("pieces");
  pieces += '[';
  for (size_t i = 0; i < t.pieces.size(); ++i) {
    const StoredPiece& p = t.pieces[i];
    pieces += i == 0 ? "\n      " : ",\n      ";
    LineObject piece(pieces);
    piece.numbers("offsets", p.offsets);
    piece.numbers("sizes", p.sizes);
    piece.number("file", p.file);
    piece.numbers("byte_range", std::initializer_list<uint64_t>{p.byte_begin, p.byte_end});
  }
  pieces += ']';
}

}  // namespace

std::string metadata_json(const CheckpointMetadata& m) {
  std::string out = "{";
  // A top-level field on its own line.
  bool first = true;
  auto field = [&](std::string_view key) -> std::string& {
    out += first ? "\n  " : ",\n  ";
    first = false;
    append_json_string(out, key);
    out += ": ";
    return out;
  };
  append_json_string(field("format"), kCheckpointFormat);
  append_number(field("version"), kCheckpointVersion);
  append_number(field("step"), m.step);
  append_json_string(field("optimizer"), m.optimizer);
  append_number(field("optimizer_steps"), m.optimizer_steps);
  append_number(field("loader_samples_consumed"), m.loader_samples_consumed);
  if (!m.loader_sources.empty()) {
    field("loader_sources") += '[';
    for (size_t i = 0; i < m.loader_sources.size(); ++i) {
      if (i > 0) out += ", ";
      LineObject source(out);
      source.string("name", m.loader_sources[i].first);
      source.number("samples_consumed", m.loader_sources[i].second);
    }
    out += ']';
  }
  append_model(field("model"), m.model);
  {
    LineObject mesh(field("mesh"));
    mesh.number("pp", m.mesh.pp);
    mesh.number("dp_replicate", m.mesh.dp_replicate);
    mesh.number("dp_shard", m.mesh.dp_shard);
    mesh.number("cp", m.mesh.cp);
    mesh.number("tp", m.mesh.tp);
  }
  field("files") += '[';
  for (size_t i = 0; i < m.files.size(); ++i) {
    out += i == 0 ? "\n    " : ",\n    ";
    LineObject file(out);
    file.string("name", m.files[i].name);
    file.number("bytes", m.files[i].bytes);
    file.number("crc32c", m.files[i].crc32c);
  }
  out += "\n  ]";
  append_json_lines(field("tensors"), m.tensors, 4, append_tensor);
  out += "\n}\n";
  return out;
}

}  // namespace titan::checkpoint
