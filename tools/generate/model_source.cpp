#include "tools/generate/model_source.h"

#include <climits>
#include <filesystem>
#include <optional>
#include <string_view>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpointer.h"
#include "checkpoint/hf_files.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/load_staging.h"
#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "core/json_reader.h"
#include "model/parameter.h"
#include "parallel/parallelize.h"

namespace titan::generate {

namespace {

namespace fs = std::filesystem;

// transformers' LlamaConfig: max_position_embeddings when config.json leaves it out.
constexpr int64_t kLlamaConfigDefaultPositions = 2048;

const checkpoint::CheckpointChoice kChoice{"another step folder as --model", ""};
const checkpoint::HfFolderKeys kHfKeys{"--model", ""};

// max_position_embeddings of a config.json loaded into `document`, or LlamaConfig's default.
int64_t max_positions(JsonDocument& document, const std::string& file) {
  JsonReader::Style style;
  style.null_is_absent = true;
  const JsonReader json("--model: " + file, style);
  if (!document.parse()) json.fail_file("not valid JSON (", document.error(), ")");
  const JsonObject root = json.object(document.root(), "config.json");
  const std::optional<JsonValue> value = json.member(root, "max_position_embeddings");
  if (!value) return kLlamaConfigDefaultPositions;
  return json.integer(*value, "max_position_embeddings", 1, INT32_MAX);
}

// The step folder a checkpoint folder (one holding step-N folders) stands for: its newest
// complete step. nullopt when `path` holds no step folder at all.
std::optional<std::string> newest_step(const std::string& path) {
  bool has_steps = false;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, ec)) {
    has_steps = has_steps || entry.path().filename().string().starts_with("step-");
  }
  if (!has_steps) return std::nullopt;
  const checkpoint::Checkpointer saved({path});
  const std::optional<int64_t> step = saved.latest_step(/*warn=*/false);
  if (!step) {
    input_error("--model: '", path,
                "' holds step folders but no complete one (each lacks "
                "metadata.json: saves that never completed); name a step folder of a finished "
                "save");
  }
  return saved.step_folder(*step);
}

ModelSource titan_checkpoint(const std::string& folder) {
  const checkpoint::CheckpointReader reader(folder, kChoice);
  ModelSource source;
  source.format = ModelFormat::TitanCheckpoint;
  source.folder = folder;
  source.args = reader.metadata().model;
  model::validate_model_args(source.args, "metadata.json");
  // What its Hugging Face export would declare (see model_source.h).
  JsonDocument exported;
  exported.set_text(checkpoint::hf_config_json(source.args, DType::F32));
  source.position_limit = max_positions(exported, "its Hugging Face config");
  source.default_tokenizer = "byte";  // metadata.json records the model, not its tokenizer
  return source;
}

ModelSource hugging_face(const std::string& folder) {
  const std::string config = (fs::path(folder) / checkpoint::kHfConfigFile).string();
  ModelSource source;
  source.format = ModelFormat::HuggingFace;
  source.folder = folder;
  const checkpoint::HfConfig hf = checkpoint::read_hf_config(config);
  source.args = hf.args;
  source.args.flavor = "hf";
  if (!hf.assumed.empty()) source.notes.push_back(hf.assumed);
  model::validate_model_args(source.args, "config.json");
  checkpoint::check_hf_folder(folder, source.args, kHfKeys);
  JsonDocument document;  // read_hf_config read it already: it is a small JSON file
  if (!document.load(config)) input_error("--model: cannot read '", config, "'");
  source.position_limit = max_positions(document, config);
  const fs::path tokenizer = fs::path(folder) / "tokenizer.json";
  std::error_code ec;
  source.default_tokenizer = fs::is_regular_file(tokenizer, ec) ? tokenizer.string() : "byte";
  return source;
}

// parallel/'s training plan, by the end of each linear's name: column-parallel linears split
// their rows (output features), row-parallel ones their columns.
void cut_for_tensor_parallel(model::Transformer& model, int64_t rank, int64_t tp) {
  for (model::Linear* linear : model.linears()) {
    const parallel::TpPlanEntry* entry = nullptr;
    const std::string_view fqn = linear->fqn();
    for (const parallel::TpPlanEntry& e : parallel::kLlamaTpPlan) {
      const size_t n = e.layer.size();
      if (fqn == e.layer ||
          (fqn.size() > n && fqn.ends_with(e.layer) && fqn[fqn.size() - n - 1] == '.')) {
        entry = &e;
      }
    }
    TT_CHECK(entry != nullptr, "no tensor-parallel plan entry for ", linear->fqn());
    linear->weight().slice = {entry->style == parallel::TpStyle::ColumnParallel ? 0 : 1, rank, tp};
  }
  for (model::Parameter* p : model.parameters()) {
    if (p->name == "tok_embeddings.weight") p->slice = {0, rank, tp};
  }
}

bool is_linear_weight(const model::Parameter& p, model::Transformer& model) {
  for (model::Linear* linear : model.linears()) {
    if (&linear->weight() == &p) return true;
  }
  return false;
}

}  // namespace

std::string ModelSource::describe() const {
  return format == ModelFormat::TitanCheckpoint ? "titan_train checkpoint " + folder
                                                : "Hugging Face folder " + folder;
}

ModelSource find_model(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    input_error("--model: '", path,
                "' does not exist; name a step folder "
                "(…/checkpoint/step-N) or a Hugging Face Llama folder");
  }
  if (!fs::is_directory(path, ec)) {
    input_error("--model: '", path,
                "' is a file; name a folder: a step folder "
                "(…/checkpoint/step-N) or a Hugging Face Llama folder");
  }
  if (fs::exists(fs::path(path) / "metadata.json", ec)) return titan_checkpoint(path);
  if (fs::exists(fs::path(path) / checkpoint::kHfConfigFile, ec)) return hugging_face(path);
  if (const std::optional<std::string> step = newest_step(path)) return titan_checkpoint(*step);
  input_error("--model: '", path,
              "' holds neither metadata.json (a titan_train step folder) "
              "nor config.json (a Hugging Face Llama folder); name one of those, e.g. "
              "outputs/checkpoint/step-200");
}

void load_weights(const ModelSource& source, model::Transformer& model, int64_t tp_rank, int64_t tp,
                  Device device, DType dtype) {
  if (tp > 1) cut_for_tensor_parallel(model, tp_rank, tp);
  // On the CPU bf16 keeps f32 storage: the CPU ops compute in f32, and the GEMMs emulate bf16
  // by reading bf16-rounded operands (training's bfloat16 on the CPU), so the linears' weights
  // are rounded once after the load.
  const DType stored = device.is_cuda() ? dtype : DType::F32;
  const std::vector<model::Parameter*> params = model.parameters();
  // Allocated where they compute, in the dtype they compute in: the readers convert into them
  // (on the device for a GPU), with no f32 copy of the model on the host.
  for (model::Parameter* p : params) p->value = Tensor::empty(p->local_shape(), stored, device);
  auto round_linears = [&] {
    if (!device.is_cpu() || dtype != DType::BF16) return;
    for (model::Parameter* p : params) {
      if (!is_linear_weight(*p, model)) continue;
      float* v = p->value.data<float>();
      const int64_t n = p->value.numel();
      for (int64_t i = 0; i < n; ++i) v[i] = round_to_bf16(v[i]);
    }
  };

  if (source.format == ModelFormat::HuggingFace) {
    checkpoint::load_hf_weights(
        source.folder, source.args, params,
        [](const model::Parameter& p, const Tensor& local,
           const std::function<void(const model::LocalRun&)>& visit) {
          model::for_each_local_run(p, 0, local.size(0), visit);
        },
        kHfKeys);
    round_linears();
    return;
  }

  const checkpoint::CheckpointReader reader(source.folder, kChoice);
  checkpoint::check_same_model(reader.metadata(), model.args(), "--model");
  // A corrupt file must not become plausible text: every byte is checked once over the ranks.
  const int64_t files = static_cast<int64_t>(reader.metadata().files.size());
  for (int64_t i = tp_rank; i < files; i += tp) reader.verify_file(i);
  checkpoint::HostStaging staging;
  for (model::Parameter* p : params) {
    const Tensor& local = p->value;
    // Read as stored (f32), into the parameter itself when it takes that dtype on the CPU. A
    // tensor missing, or of a dtype that does not widen exactly to f32, is read_region's to refuse.
    const auto stored_tensor = reader.metadata().tensors.find(p->name);
    const DType saved =
        stored_tensor != reader.metadata().tensors.end() &&
                checkpoint::converts_exactly(stored_tensor->second.dtype, DType::F32)
            ? stored_tensor->second.dtype
            : DType::F32;
    const bool in_place = device.is_cpu() && local.dtype() == saved;
    const Tensor host = in_place ? local : staging.take(local.shape(), saved, device.is_cuda());
    const int64_t rows = host.size(0), cols = host.ndim() == 2 ? host.size(1) : 1;
    const Tensor host2 = host.view({rows, cols});
    model::for_each_local_run(*p, 0, rows, [&](const model::LocalRun& run) {
      reader.read_region(p->name, run.full_row, run.rows, run.col_begin, run.width,
                         host2.rows(run.local_offset, run.local_offset + run.rows));
    });
    if (!in_place) checkpoint::move_into(local, host);
  }
  round_linears();
}

}  // namespace titan::generate
