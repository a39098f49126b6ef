#include "checkpoint/hf_llama.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/export_dtype.h"
#include "checkpoint/hf_files.h"
#include "checkpoint/load_staging.h"
#include "checkpoint/lora_export.h"
#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "core/cast.h"
#include "core/check.h"
#include "core/file_io.h"
#include "core/profiler.h"
#include "model/transformer.h"
#include "parallel/owned_rows.h"

namespace titan::checkpoint {

namespace fs = std::filesystem;

namespace {

// Per-layer names: ours after "layers.N." → HF's after "model.layers.N.".
const std::vector<std::pair<std::string, std::string>>& layer_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"attention_norm.weight", "input_layernorm.weight"},
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"}};
  return names;
}

// The bytes of chunk staging an export reads at a time (whole rows, whole heads).
constexpr int64_t kExportChunkBytes = 64ll << 20;

// What an export that cannot make its files durable tells the user to do.
constexpr char kExportFolderFix[] = "export to a folder on a writable disk with free space";

void sync_folder(const fs::path& path) { fsync_path(path.string(), "HF export", kExportFolderFix); }

void check_export_args(DType dtype, int part, int parts) {
  if (!kExportDTypes.contains(dtype)) {
    input_error("HF export: ", dtype_name(dtype), " cannot be exported; use ",
                list_alternatives(kExportDTypes.names()));
  }
  if (parts < 1 || part < 0 || part >= parts) {
    input_error("HF export: part ", part, " of ", parts, " is out of range (0 ≤ part < parts)");
  }
}

fs::path tmp_folder(const std::string& out_folder) {
  std::string out = out_folder;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return fs::path(out + ".tmp");
}

}  // namespace

std::string hf_tensor_name(const std::string& part_name) {
  if (part_name == "tok_embeddings.weight") return "model.embed_tokens.weight";
  if (part_name == "norm.weight") return "model.norm.weight";
  if (part_name == "output.weight") return "lm_head.weight";
  if (part_name.starts_with("layers.")) {
    const size_t dot = part_name.find('.', 7);
    if (dot != std::string::npos && dot > 7) {
      const std::string layer = part_name.substr(7, dot - 7);
      const std::string rest = part_name.substr(dot + 1);
      for (const auto& [ours, theirs] : layer_names()) {
        if (rest == ours) return "model.layers." + layer + "." + theirs;
      }
    }
  }
  input_error("HF export: parameter part '", part_name, "' has no Hugging Face Llama name");
}

bool hf_rope_permuted(const std::string& part_name) {
  return part_name.ends_with(".attention.wq.weight") || part_name.ends_with(".attention.wk.weight");
}

int64_t hf_row(int64_t row, int64_t head_dim) {
  const int64_t head = row / head_dim, k = row % head_dim;
  return head * head_dim + (k % 2) * (head_dim / 2) + k / 2;
}

std::vector<HfTensor> hf_tensors(const model::ModelArgs& args) {
  // The model's own declaration (no storage), so names and parts cannot drift from it.
  model::Transformer model(args, DType::F32);
  std::vector<HfTensor> out;
  for (const model::Parameter* p : model.parameters()) {
    if (p->adapter) continue;  // not in a plain HF folder (merged into the weights on export)
    int64_t row = 0;
    for (const model::ParamPart& part : p->parts) {
      HfTensor t;
      t.hf_name = hf_tensor_name(part.name);
      t.param = p->name;
      t.param_row = row;
      t.rows = part.rows;
      t.cols = p->cols();
      t.vector = p->shape.ndim() == 1;
      t.rope_permuted = hf_rope_permuted(part.name);
      out.push_back(std::move(t));
      row += part.rows;
    }
  }
  // HF order: embeddings, the layers in order, norm, lm_head (stable within a layer).
  auto rank = [](const HfTensor& t) -> std::pair<int, int64_t> {
    if (t.hf_name == "model.embed_tokens.weight") return {0, 0};
    if (t.hf_name == "model.norm.weight") return {2, 0};
    if (t.hf_name == "lm_head.weight") return {3, 0};
    return {1, std::stoll(t.hf_name.substr(13))};  // "model.layers.N."
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const HfTensor& a, const HfTensor& b) { return rank(a) < rank(b); });
  return out;
}

// ---- import -----------------------------------------------------------------------------------

namespace {

// A checked HF folder: its config, its tensors, and the HF tensor of each part of ours.
struct HfSource {
  HfConfig config;
  std::unique_ptr<HfWeights> weights;
  std::vector<HfTensor> tensors;
  std::map<std::string, const HfTensor*> by_part_start;  // "param@first row" → tensor

  // The HF tensor a run of a parameter's rows lies in.
  const HfTensor& part(const std::string& param, const model::LocalRun& run) const {
    auto it = by_part_start.find(param + "@" + std::to_string(run.full_row - run.part_row));
    TT_CHECK(it != by_part_start.end(), "load_hf_weights: no HF tensor for ", param, " rows from ",
             run.full_row - run.part_row);
    return *it->second;
  }

  // The tensor a part is read from. A tied model has no lm_head (hf_tensors declares none), and
  // a folder whose tie_word_embeddings differs from the model's is refused (check_hf_config).
  std::string source_name(const HfTensor& t) const { return t.hf_name; }
};

HfSource open_hf_folder(const std::string& hf_folder, const model::ModelArgs& args,
                        const HfFolderKeys& keys) {
  HfSource source;
  const std::string config_path = (fs::path(hf_folder) / kHfConfigFile).string();
  std::error_code ec;
  if (!fs::is_directory(hf_folder, ec)) {
    input_error(keys.folder, ": '", hf_folder,
                "' is not a folder; point it at a Hugging Face Llama folder (config.json, "
                "model*.safetensors)");
  }
  if (!fs::is_regular_file(config_path, ec)) {
    input_error(keys.folder, ": '", hf_folder, "' has no ", kHfConfigFile,
                "; a Hugging Face Llama folder has config.json next to its safetensors");
  }
  source.config = read_hf_config(config_path);
  check_hf_config(source.config, args, config_path, keys.model_section);
  source.weights = std::make_unique<HfWeights>(hf_folder, keys.folder);
  source.tensors = hf_tensors(args);
  std::vector<std::string> missing;
  for (const HfTensor& t : source.tensors) {
    const std::string name = source.source_name(t);
    if (!source.weights->contains(name)) {
      missing.push_back(name);
      continue;
    }
    const SafetensorsFile& file = source.weights->file_of(name);
    const Shape expected = t.vector ? Shape{t.rows} : Shape{t.rows, t.cols};
    if (file.shape(name) != expected) {
      input_error("'", file.path(), "': ", name, " is ", file.shape(name),
                  " but the model expects ", expected, "; config.json and the weights disagree");
    }
    if (!converts_exactly(file.dtype(name), DType::F32)) {
      input_error("'", file.path(), "': ", name, " is ", dtype_name(file.dtype(name)),
                  "; titan_train loads float32 and bfloat16 weights");
    }
    source.by_part_start[t.param + "@" + std::to_string(t.param_row)] = &t;
  }
  if (!missing.empty()) {
    std::ostringstream list;
    for (size_t i = 0; i < missing.size() && i < 5; ++i) list << (i ? ", " : "") << missing[i];
    if (missing.size() > 5) list << ", … (" << missing.size() << " in all)";
    input_error("'", source.weights->describe(), "' lacks tensors the model needs: ", list.str());
  }
  return source;
}

// dst [rows, width] = our rows [run.part_row, + run.rows) of a RoPE-permuted part (wq, wk),
// whose HF rows are a permutation within each head (hf_row). Whole heads are read as one block of
// rows and permuted in memory; the rows of a head the run holds only in part (an FSDP shard
// that starts or ends inside a head) are read one by one, so only owned rows are read.
void read_rope_permuted(const SafetensorsFile& file, const std::string& name,
                        const model::LocalRun& run, int64_t head_dim, const Tensor& dst) {
  const int64_t begin = run.part_row, end = run.part_row + run.rows;
  const int64_t whole_begin = (begin + head_dim - 1) / head_dim * head_dim;
  const int64_t whole_end = std::max(whole_begin, end / head_dim * head_dim);
  auto one_row = [&](int64_t row) {
    file.read_rows(name, hf_row(row, head_dim), 1, run.col_begin, run.width,
                   dst.rows(row - begin, row - begin + 1));
  };
  for (int64_t row = begin; row < std::min(whole_begin, end); ++row) one_row(row);
  if (whole_end > whole_begin) {
    // Read in HF order, then each row to its place: our row r is HF row hf_row(r).
    const Tensor hf = Tensor::empty({whole_end - whole_begin, run.width}, dst.dtype());
    file.read_rows(name, whole_begin, whole_end - whole_begin, run.col_begin, run.width, hf);
    const size_t row_bytes = static_cast<size_t>(run.width) * dtype_size(dst.dtype());
    const auto* in = static_cast<const unsigned char*>(hf.raw_data());
    auto* out = static_cast<unsigned char*>(dst.raw_data());
    for (int64_t row = whole_begin; row < whole_end; ++row) {
      std::memcpy(out + static_cast<size_t>(row - begin) * row_bytes,
                  in + static_cast<size_t>(hf_row(row, head_dim) - whole_begin) * row_bytes,
                  row_bytes);
    }
  }
  for (int64_t row = std::max(whole_end, whole_begin); row < end; ++row) one_row(row);
}

}  // namespace

HfConfig check_hf_folder(const std::string& hf_folder, const model::ModelArgs& args,
                         const HfFolderKeys& keys) {
  return open_hf_folder(hf_folder, args, keys).config;
}

void load_hf_weights(const std::string& hf_folder, const model::ModelArgs& args,
                     const std::vector<model::Parameter*>& params, const OwnedRuns& owned_runs,
                     const HfFolderKeys& keys) {
  profiler::Span span("checkpoint.load_hf", "checkpoint");
  const HfSource source = open_hf_folder(hf_folder, args, keys);
  const HfWeights& weights = *source.weights;
  auto source_name = [&source](const HfTensor& t) { return source.source_name(t); };

  const int64_t head_dim = args.head_dim();
  HostStaging staging;
  for (model::Parameter* p : params) {
    if (p->adapter) continue;  // a LoRA run's adapters start as declared on the HF base model
    const Tensor& local = p->value;
    TT_CHECK(local.defined(), "load_hf_weights: ", p->name, " has no storage");
    std::vector<model::LocalRun> runs;
    owned_runs(*p, local, [&runs](const model::LocalRun& run) { runs.push_back(run); });
    // The bytes travel as stored when every HF tensor of the parameter has one dtype (bf16 across
    // PCIe is half of f32), else as f32, to which both bf16 and f32 convert exactly.
    std::optional<DType> stored;
    bool widens = true;  // every stored dtype converts exactly to the parameter's
    for (const model::LocalRun& run : runs) {
      const HfTensor& t = source.part(p->stored_name(), run);
      const DType d = weights.file_of(source_name(t)).dtype(source_name(t));
      stored = !stored || *stored == d ? d : DType::F32;
      widens = widens && converts_exactly(d, local.dtype());
    }
    const DType stage_dtype = stored.value_or(DType::F32);
    // A CPU parameter the stored values widen into is read into directly, each chunk converted
    // by the thread that read it.
    const bool in_place = local.device().is_cpu() && widens;
    const Tensor host =
        in_place ? local : staging.take(local.shape(), stage_dtype, local.device().is_cuda());
    const int64_t local_cols = local.ndim() == 2 ? local.size(1) : 1;
    const Tensor host2 = host.view({local.size(0), local_cols});
    int64_t covered = 0;
    for (const model::LocalRun& run : runs) covered += run.rows;
    if (covered < local.size(0)) host.zero_();  // FSDP's padding rows
    for (const model::LocalRun& run : runs) {
      const HfTensor& t = source.part(p->stored_name(), run);
      const std::string name = source_name(t);
      const SafetensorsFile& file = weights.file_of(name);
      TT_CHECK(run.width == local_cols, "load_hf_weights: run of ", run.width,
               " columns in a local slice of ", local_cols);
      const Tensor dst = host2.rows(run.local_offset, run.local_offset + run.rows);
      if (t.rope_permuted) {
        read_rope_permuted(file, name, run, head_dim, dst);
      } else {
        file.read_rows(name, run.part_row, run.rows, run.col_begin, run.width, dst);
      }
    }
    if (!in_place) move_into(local, host);
  }
}

void load_hf_weights(const std::string& hf_folder, const model::ModelArgs& args,
                     model::Optimizer& optimizer, const parallel::DeviceMesh& mesh,
                     const HfFolderKeys& keys) {
  load_hf_weights(
      hf_folder, args, optimizer.params(),
      [&mesh](const model::Parameter& p, const Tensor& local,
              const std::function<void(const model::LocalRun&)>& visit) {
        parallel::for_each_owned_run(p, local, mesh, visit);
      },
      keys);
}

// ---- export -----------------------------------------------------------------------------------

std::vector<std::vector<size_t>> hf_export_plan(const model::ModelArgs& args, DType dtype,
                                                int parts) {
  const std::vector<HfTensor> tensors = hf_tensors(args);
  const int64_t files = std::min<int64_t>(parts, static_cast<int64_t>(tensors.size()));
  std::vector<uint64_t> bytes;
  uint64_t total = 0;
  for (const HfTensor& t : tensors) {
    bytes.push_back(static_cast<uint64_t>(t.rows * t.cols) * dtype_size(dtype));
    total += bytes.back();
  }
  // Greedy in HF order: file k closes once the running total reaches (k+1)/files of the bytes,
  // keeping at least one tensor for each file still to come.
  std::vector<std::vector<size_t>> plan(static_cast<size_t>(files));
  uint64_t running = 0;
  size_t k = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t left_after = tensors.size() - i - 1;
    plan[k].push_back(i);
    running += bytes[i];
    const size_t files_after = plan.size() - k - 1;
    const bool reached = static_cast<long double>(running) >=
                         static_cast<long double>(total) * (k + 1) / plan.size();
    if (files_after > 0 && (reached || left_after == files_after)) ++k;
  }
  return plan;
}

void export_hf_part(const model::ModelArgs& args, const ParamRowReader& read,
                    const std::string& out_folder, DType dtype, int part, int parts) {
  profiler::Span span("checkpoint.export_hf", "checkpoint");
  check_export_args(dtype, part, parts);
  const fs::path tmp = tmp_folder(out_folder);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) {
    input_error("HF export: cannot create '", tmp.string(), "': ", ec.message(),
                "; export into a folder you can write");
  }
  const std::vector<std::vector<size_t>> plan = hf_export_plan(args, dtype, parts);
  if (part >= static_cast<int>(plan.size())) return;  // more ranks than tensors
  const std::vector<HfTensor> tensors = hf_tensors(args);

  std::vector<TensorInfo> infos;
  for (size_t i : plan[part]) {
    const HfTensor& t = tensors[i];
    infos.push_back({t.hf_name, dtype, t.vector ? Shape{t.rows} : Shape{t.rows, t.cols}});
  }
  const std::string name = hf_shard_name(part + 1, static_cast<int64_t>(plan.size()));
  const fs::path partial = tmp / (name + ".partial");
  SafetensorsWriter writer(partial.string(), infos, {{"format", "pt"}});
  const int64_t head_dim = args.head_dim();
  for (size_t i : plan[part]) {
    const HfTensor& t = tensors[i];
    // Chunks of whole rows (whole heads for q and k), at most ~64 MiB of f32.
    int64_t chunk = std::max<int64_t>(1, kExportChunkBytes / (4 * t.cols));
    if (t.rope_permuted) chunk = std::max<int64_t>(1, chunk / head_dim) * head_dim;
    chunk = std::min(chunk, t.rows);
    Tensor ours = Tensor::empty({chunk, t.cols}, DType::F32);
    Tensor hf = t.rope_permuted ? Tensor::empty({chunk, t.cols}, DType::F32) : ours;
    for (int64_t r0 = 0; r0 < t.rows; r0 += chunk) {
      const int64_t n = std::min(chunk, t.rows - r0);
      const Tensor src = ours.rows(0, n);
      read(t.param, t.param_row + r0, n, src);
      Tensor out = src;
      if (t.rope_permuted) {
        // r0 is a multiple of Dh, so the chunk's HF rows are a permutation of its own rows.
        const float* in = src.data<float>();
        float* dst = hf.data<float>();
        for (int64_t r = 0; r < n; ++r) {
          std::copy(in + r * t.cols, in + (r + 1) * t.cols, dst + hf_row(r, head_dim) * t.cols);
        }
        out = hf.rows(0, n);
      }
      if (t.vector) out = out.view({n});
      writer.append(dtype == DType::F32 ? out : cast(out, DType::BF16));
    }
  }
  writer.close();
  fs::rename(partial, tmp / name, ec);
  if (ec) input_error("HF export: cannot rename '", partial.string(), "': ", ec.message());
  sync_folder(tmp);
}

void finish_hf_export(const model::ModelArgs& args, const std::string& out_folder, DType dtype,
                      int parts) {
  check_export_args(dtype, 0, parts);
  const fs::path tmp = tmp_folder(out_folder);
  const std::vector<std::vector<size_t>> plan = hf_export_plan(args, dtype, parts);
  const std::vector<HfTensor> tensors = hf_tensors(args);
  std::map<std::string, std::string> weight_map;
  std::set<std::string> keep = {kHfIndexFile, kHfConfigFile};
  uint64_t total = 0;
  for (size_t k = 0; k < plan.size(); ++k) {
    const std::string name =
        hf_shard_name(static_cast<int64_t>(k) + 1, static_cast<int64_t>(plan.size()));
    keep.insert(name);
    std::error_code ec;
    if (!fs::is_regular_file(tmp / name, ec)) {
      input_error("HF export: '", (tmp / name).string(),
                  "' is missing; every part must be written (export_hf) before finish_hf_export");
    }
    const SafetensorsFile file((tmp / name).string());
    std::vector<std::string> expected;
    for (size_t i : plan[k]) {
      expected.push_back(tensors[i].hf_name);
      weight_map[tensors[i].hf_name] = name;
      total += static_cast<uint64_t>(tensors[i].rows * tensors[i].cols) * dtype_size(dtype);
    }
    std::sort(expected.begin(), expected.end());
    if (file.names() != expected) {
      input_error("HF export: '", (tmp / name).string(),
                  "' does not hold the tensors of this export's plan (another export's file?); "
                  "export every part again");
    }
  }
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(tmp, ec)) {
    if (!keep.count(entry.path().filename().string())) fs::remove_all(entry.path(), ec);
  }
  write_file_synced((tmp / kHfIndexFile).string(), hf_index_json(weight_map, total));
  write_file_synced((tmp / kHfConfigFile).string(), hf_config_json(args, dtype));
  sync_folder(tmp);
  move_export_into_place(tmp.string(), tmp.string().substr(0, tmp.string().size() - 4));
}

void move_export_into_place(const std::string& tmp_folder, const std::string& out_folder) {
  const fs::path tmp(tmp_folder), out(out_folder);
  const fs::path old = out.string() + ".old";
  std::error_code ec;
  fs::remove_all(old, ec);
  if (fs::exists(out, ec)) {
    fs::rename(out, old, ec);
    if (ec)
      input_error("HF export: cannot move the previous '", out.string(), "' aside: ", ec.message());
  }
  fs::rename(tmp, out, ec);
  if (ec)
    input_error("HF export: cannot rename '", tmp.string(), "' to '", out.string(),
                "': ", ec.message());
  fs::remove_all(old, ec);
  sync_folder(out.parent_path().empty() ? fs::path(".") : out.parent_path());
}

void export_hf(const std::string& step_folder, const std::string& out_folder, DType dtype, int part,
               int parts) {
  const CheckpointReader reader(step_folder);
  const model::ModelArgs& args = reader.metadata().model;
  const ParamRowReader read = [&reader](const std::string& param, int64_t row_begin, int64_t rows,
                                        const Tensor& dst) {
    reader.read_region(param, row_begin, rows, 0, dst.size(1), dst);
  };
  // A LoRA checkpoint's folder is its adapted model: W + s·B·A.
  export_hf_part(args, args.lora.enabled() ? merged_lora_reader(args, read) : read, out_folder,
                 dtype, part, parts);
}

void finish_hf_export(const std::string& step_folder, const std::string& out_folder, DType dtype,
                      int parts) {
  const CheckpointReader reader(step_folder);
  finish_hf_export(reader.metadata().model, out_folder, dtype, parts);
}

}  // namespace titan::checkpoint
