#include "checkpoint/lora_export.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/export_dtype.h"
#include "checkpoint/hf_files.h"
#include "checkpoint/safetensors.h"
#include "core/cast.h"
#include "core/check.h"
#include "core/file_io.h"
#include "core/gemm.h"
#include "core/json_text.h"
#include "model/lora.h"
#include "model/transformer.h"

namespace titan::checkpoint {

namespace fs = std::filesystem;

namespace {

// One adapter as the checkpoint stores it: its factors' names and its parts' full rows.
struct StoredAdapter {
  std::string a, b;
  std::vector<model::ParamPart> parts;  // B's parts: the base weight's, rows as W's
  int64_t in = 0;                       // A's columns
};

// The model's adapters by base weight name, from its own declaration (no storage).
std::map<std::string, StoredAdapter> stored_adapters(const model::ModelArgs& args) {
  if (!args.lora.enabled()) {
    input_error("LoRA export: the checkpoint holds no LoRA adapters (lora.rank 0); export it "
                "as a plain Hugging Face folder instead");
  }
  model::Transformer declared(args, DType::F32);
  std::map<std::string, StoredAdapter> adapters;
  for (model::Linear* linear : declared.linears()) {
    const model::LowRankAdapter* adapter = linear->adapter();
    if (adapter == nullptr) continue;
    adapters[linear->weight().name] = {adapter->a->name, adapter->b->name, adapter->b->parts,
                                       adapter->a->cols()};
  }
  return adapters;
}

}  // namespace

ParamRowReader merged_lora_reader(const model::ModelArgs& args, ParamRowReader read) {
  const int64_t r = args.lora.rank;
  const double scale = args.lora.scale();
  return [adapters = stored_adapters(args), read = std::move(read), r, scale](
             const std::string& param, int64_t row_begin, int64_t rows, const Tensor& dst) {
    read(param, row_begin, rows, dst);
    const auto it = adapters.find(param);
    if (it == adapters.end()) return;
    const StoredAdapter& adapter = it->second;
    int64_t part_begin = 0;
    for (size_t p = 0; p < adapter.parts.size(); ++p) {
      const int64_t part_end = part_begin + adapter.parts[p].rows;
      const int64_t begin = std::max(row_begin, part_begin);
      const int64_t end = std::min(row_begin + rows, part_end);
      if (begin < end) {
        // dst rows += s · B_p rows [n, r] · A_p [r, in]
        Tensor b = Tensor::empty({end - begin, r}, DType::F32);
        read(adapter.b, begin, end - begin, b);
        Tensor a = Tensor::empty({r, adapter.in}, DType::F32);
        read(adapter.a, static_cast<int64_t>(p) * r, r, a);
        gemm(b, false, a, false, dst.rows(begin - row_begin, end - row_begin), scale, 1.0);
      }
      part_begin = part_end;
    }
  };
}

void export_peft_adapters(const model::ModelArgs& args, const ParamRowReader& read,
                          const std::string& out_folder, DType dtype) {
  if (!kExportDTypes.contains(dtype)) {
    input_error("PEFT export: dtype ", dtype_name(dtype), " is not written; use one of ",
                list_alternatives(kExportDTypes.names()));
  }
  const std::map<std::string, StoredAdapter> adapters = stored_adapters(args);
  const int64_t r = args.lora.rank, head_dim = args.head_dim();

  // PEFT's names: the HF module's, under the wrapper's "base_model.model." prefix.
  struct Entry {
    std::string name;
    Tensor values;  // f32 [rows, cols]
  };
  std::vector<Entry> entries;
  std::vector<std::string> modules;  // target_modules: the HF leaf names, in model order
  // Layer order, then the block's own (wqkv, wo, w13, w2), as HF folders list them.
  model::Transformer declared(args, DType::F32);
  std::vector<const StoredAdapter*> in_order;
  for (model::Linear* linear : declared.linears()) {
    const auto it = adapters.find(linear->weight().name);
    if (it != adapters.end()) in_order.push_back(&it->second);
  }
  for (const StoredAdapter* adapter : in_order) {
    int64_t part_begin = 0;
    for (size_t p = 0; p < adapter->parts.size(); ++p) {
      const model::ParamPart& part = adapter->parts[p];
      // The base part's HF name: "layers.0.attention.wq.lora_b.weight" adapts
      // "layers.0.attention.wq.weight", HF's "model.layers.0.self_attn.q_proj.weight".
      std::string base_part = part.name;
      base_part.replace(base_part.rfind(".lora_b.weight"), 14, ".weight");
      const std::string hf = hf_tensor_name(base_part);
      const std::string stem = "base_model.model." + hf.substr(0, hf.size() - 7);  // no .weight
      const std::string leaf = stem.substr(stem.rfind('.') + 1);
      if (std::find(modules.begin(), modules.end(), leaf) == modules.end()) modules.push_back(leaf);

      Tensor a = Tensor::empty({r, adapter->in}, DType::F32);
      read(adapter->a, static_cast<int64_t>(p) * r, r, a);
      Tensor b = Tensor::empty({part.rows, r}, DType::F32);
      read(adapter->b, part_begin, part.rows, b);
      if (hf_rope_permuted(base_part)) {  // B's rows are W's rows: HF's order for q and k
        Tensor permuted = Tensor::empty(b.shape(), DType::F32);
        for (int64_t row = 0; row < part.rows; ++row) {
          permuted.rows(hf_row(row, head_dim), hf_row(row, head_dim) + 1)
              .copy_from(b.rows(row, row + 1));
        }
        b = permuted;
      }
      entries.push_back({stem + ".lora_A.weight", a});
      entries.push_back({stem + ".lora_B.weight", b});
      part_begin += part.rows;
    }
  }

  const fs::path tmp = out_folder + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) {
    input_error("PEFT export: cannot create '", tmp.string(), "': ", ec.message(),
                "; export into a folder you can write");
  }
  std::vector<TensorInfo> infos;
  for (const Entry& e : entries) infos.push_back({e.name, dtype, e.values.shape()});
  SafetensorsWriter writer((tmp / "adapter_model.safetensors").string(), infos,
                           {{"format", "pt"}});
  for (const Entry& e : entries) {
    writer.write(e.name, dtype == DType::F32 ? e.values : cast(e.values, DType::BF16));
  }
  writer.close();

  std::string targets;
  for (const std::string& m : modules) {
    if (!targets.empty()) targets += ", ";
    append_json_string(targets, m);
  }
  const std::string config =
      "{\n"
      "  \"peft_type\": \"LORA\",\n"
      "  \"task_type\": \"CAUSAL_LM\",\n"
      "  \"base_model_name_or_path\": null,\n"
      "  \"r\": " + std::to_string(r) + ",\n"
      "  \"lora_alpha\": " + json_number(args.lora.alpha) + ",\n"
      "  \"lora_dropout\": 0.0,\n"
      "  \"target_modules\": [" + targets + "],\n"
      "  \"bias\": \"none\",\n"
      "  \"fan_in_fan_out\": false,\n"
      "  \"use_rslora\": false,\n"
      "  \"use_dora\": false,\n"
      "  \"init_lora_weights\": true,\n"
      "  \"modules_to_save\": null,\n"
      "  \"inference_mode\": true\n"
      "}\n";
  write_file_synced((tmp / "adapter_config.json").string(), config);
  fsync_path(tmp.string(), "PEFT export", "export to a folder on a writable disk with free space");
  move_export_into_place(tmp.string(), out_folder);
}

void export_peft_adapters(const std::string& step_folder, const std::string& out_folder,
                          DType dtype) {
  const CheckpointReader reader(step_folder);
  export_peft_adapters(
      reader.metadata().model,
      [&reader](const std::string& param, int64_t row_begin, int64_t rows, const Tensor& dst) {
        reader.read_region(param, row_begin, rows, 0, dst.size(1), dst);
      },
      out_folder, dtype);
}

}  // namespace titan::checkpoint
