#include "checkpoint/checkpointer.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "core/check.h"
#include "core/memory_tag.h"
#include "core/profiler.h"
#include "parallel/full_state.h"

namespace titan::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr char kStepPrefix[] = "step-";

}  // namespace

Checkpointer::Checkpointer(std::string folder) : folder_(std::move(folder)) {}

std::string Checkpointer::step_folder(int64_t step) const {
  return (fs::path(folder_) / (kStepPrefix + std::to_string(step))).string();
}

std::optional<int64_t> Checkpointer::latest_step() const {
  std::error_code ec;
  if (!fs::is_directory(folder_, ec)) return std::nullopt;
  std::optional<int64_t> latest;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder_, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !name.starts_with(kStepPrefix)) continue;
    const std::string digits = name.substr(sizeof(kStepPrefix) - 1);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int64_t step = std::stoll(digits);
    if (!latest || step > *latest) latest = step;
  }
  return latest;
}

void Checkpointer::save(const TrainState& state, model::Transformer& model,
                        model::AdamW& optimizer, const parallel::DeviceMesh& mesh) const {
  profiler::Span span("checkpoint.save", "checkpoint");
  // The full tensors gathered here are staging for the files: a collective's buffers.
  MemoryTagScope tag(MemoryCategory::CommBuffers);
  // Gather first (every rank), then write (rank 0 only).
  NamedTensors params, moments;
  const std::vector<model::Parameter*>& list = optimizer.params();
  for (size_t i = 0; i < list.size(); ++i) {
    const model::Parameter& p = *list[i];
    params.emplace_back(p.name, parallel::gather_full_tensor(p, p.value, mesh));
    moments.emplace_back(p.name + ".exp_avg",
                         parallel::gather_full_tensor(p, optimizer.state()[i].exp_avg, mesh));
    moments.emplace_back(p.name + ".exp_avg_sq",
                         parallel::gather_full_tensor(p, optimizer.state()[i].exp_avg_sq, mesh));
  }
  if (mesh.comm().rank() != 0) {
    mesh.comm().barrier();  // returns once rank 0 has renamed the folder into place
    return;
  }
  const fs::path final_dir = step_folder(state.step);
  const fs::path tmp_dir = final_dir.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) {
    input_error("checkpoint.folder: cannot create '", tmp_dir.string(), "': ", ec.message(),
                "; point job.dump_folder / checkpoint.folder at a writable place");
  }
  const model::ModelArgs& args = model.args();
  save_safetensors((tmp_dir / "model.safetensors").string(), params,
                   {{"format", "titan_train"}, {"flavor", args.flavor}});
  save_safetensors((tmp_dir / "optimizer.safetensors").string(), moments);

  YAML::Emitter yaml;
  yaml << YAML::BeginMap << YAML::Key << "step" << YAML::Value << state.step << YAML::Key
       << "optimizer_steps" << YAML::Value << optimizer.steps_taken() << YAML::Key
       << "loader_samples_consumed" << YAML::Value << state.loader.samples_consumed << YAML::EndMap;
  std::ofstream((tmp_dir / "train_state.yaml").string()) << yaml.c_str() << "\n";

  fs::remove_all(final_dir, ec);
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) input_error("checkpoint: cannot rename '", tmp_dir.string(), "': ", ec.message());
  mesh.comm().barrier();
}

TrainState Checkpointer::load(int64_t step, model::Transformer& model, model::AdamW& optimizer,
                              const parallel::DeviceMesh& mesh) const {
  profiler::Span span("checkpoint.load", "checkpoint");
  // The full tensors read here are staging on the way to this rank's rows.
  MemoryTagScope tag(MemoryCategory::CommBuffers);
  const fs::path dir = step_folder(step);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    input_error("checkpoint.load_step: no checkpoint for step ", step, " in '", folder_,
                "'; use -1 for the latest, or one of the step-N folders there");
  }
  SafetensorsFile weights((dir / "model.safetensors").string());
  SafetensorsFile moments((dir / "optimizer.safetensors").string());
  const std::vector<model::Parameter*>& list = optimizer.params();
  for (size_t i = 0; i < list.size(); ++i) {
    const model::Parameter& p = *list[i];
    Tensor full = Tensor::empty(p.shape, p.value.dtype());
    auto load = [&](const SafetensorsFile& file, const std::string& name, const Tensor& local) {
      file.read_into(name, full);
      parallel::load_local_tensor(local, p, full, mesh);
    };
    load(weights, p.name, p.value);
    load(moments, p.name + ".exp_avg", optimizer.state()[i].exp_avg);
    load(moments, p.name + ".exp_avg_sq", optimizer.state()[i].exp_avg_sq);
  }
  YAML::Node yaml;
  try {
    yaml = YAML::LoadFile((dir / "train_state.yaml").string());
  } catch (const YAML::Exception& e) {
    input_error("checkpoint: cannot read '", (dir / "train_state.yaml").string(), "': ", e.msg);
  }
  TrainState state;
  state.step = yaml["step"].as<int64_t>();
  state.loader.samples_consumed = yaml["loader_samples_consumed"].as<int64_t>();
  optimizer.set_steps_taken(yaml["optimizer_steps"].as<int64_t>());
  return state;
}

}  // namespace titan::checkpoint
