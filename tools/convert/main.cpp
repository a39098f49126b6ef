// titan_convert: a titan_train checkpoint (one step folder) to a Hugging Face Llama 3 folder,
// without training and without MPI. docs/hugging_face.md describes the folder it writes.
//
//   titan_convert --checkpoint <step folder> --to-hf <out folder> [--dtype float32|bfloat16]
//   titan_convert --checkpoint <checkpoint folder> [--step N] --to-hf <out folder> …
//   titan_convert --checkpoint <LoRA run's step> --to-hf <out> --merge-lora   the adapted model
//   titan_convert --checkpoint <LoRA run's step> --to-peft <out>              the adapters alone
//
// A checkpoint folder (the one a run saves its step-N folders into) gives its newest complete
// step, or step N with --step.
//
// One process writes every part in turn (export_hf then finish_hf_export, the protocol of
// checkpoint/hf_llama.h), so the result is the same folder a job's last_save_in_hf writes.
// Exit 0 on success, 2 with one line on bad arguments or a bad checkpoint, 1 on a bug.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_reader.h"  // defines: CheckpointReader, CheckpointChoice
#include "checkpoint/checkpointer.h"       // defines: Checkpointer (latest_step, step_folder)
#include "checkpoint/export_dtype.h"       // defines: kExportDTypes
#include "checkpoint/hf_llama.h"           // defines: export_hf, finish_hf_export, hf_export_plan
#include "checkpoint/lora_export.h"        // defines: export_peft_adapters
#include "core/check.h"                    // defines: InputError, input_error
#include "core/exit_code.h"                // defines: ExitCode

namespace {

namespace fs = std::filesystem;

// What the checkpoint's messages tell a titan_convert user to change.
const titan::checkpoint::CheckpointChoice kChoice{
    "--step, or another step folder as --checkpoint",
    "titan_convert reads titan_train checkpoints; this folder is in Hugging Face's format "
    "already"};

// A folder a run saves its step-N folders into, rather than one step folder (which holds
// metadata.json), a Hugging Face folder (config.json) or something that is not a folder: those
// go to the reader as they are, which names what is wrong with them.
bool is_checkpoint_folder(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  const fs::path folder(path);
  std::string name = folder.lexically_normal().filename().string();
  if (name.empty()) name = folder.lexically_normal().parent_path().filename().string();
  return !name.starts_with("step-") && !fs::exists(folder / "metadata.json", ec) &&
         !fs::exists(folder / "config.json", ec);
}

// The step folder to convert: --checkpoint itself, or its step --step (the newest without it).
std::string choose_step_folder(const std::string& checkpoint, std::optional<int64_t> step) {
  if (step && *step < 0) {
    titan::input_error("--step ", *step, ": give the number of a saved step, e.g. 100, or leave "
                       "--step out for the newest");
  }
  if (!is_checkpoint_folder(checkpoint)) {
    if (step) {
      titan::input_error("--step ", *step, ": --checkpoint '", checkpoint,
                         "' is a step folder (or not a checkpoint folder); give --step only with "
                         "the folder that holds the step-N folders, or name the step folder alone");
    }
    return checkpoint;
  }
  const titan::checkpoint::Checkpointer saved({checkpoint});
  const std::optional<int64_t> newest = saved.latest_step(/*warn=*/true);
  if (!newest) {
    titan::input_error("--checkpoint: '", checkpoint,
                       "' holds no complete step-N folder; name the checkpoint folder of a run "
                       "that saved one (…/checkpoint), or one of its step folders");
  }
  if (!step) return saved.step_folder(*newest);
  std::error_code ec;
  if (!fs::is_directory(saved.step_folder(*step), ec)) {
    titan::input_error("--step ", *step, ": '", checkpoint, "' has no step-", *step,
                       " folder; its newest complete step is ", *newest,
                       " (leave --step out to take it)");
  }
  return saved.step_folder(*step);
}

// An export replaces its folder as a whole, so it must be new, empty, or an earlier export of
// the same kind: a typo must not delete a file, the checkpoint being read or a folder of other
// things. `flag`: --to-hf or --to-peft; `kind`: what it writes, for the message.
bool hf_export_file(const std::string& name) {
  return name == "config.json" || name == "model.safetensors.index.json" ||
         (name.starts_with("model") && name.ends_with(".safetensors"));
}
bool peft_export_file(const std::string& name) {
  return name == "adapter_config.json" || name == "adapter_model.safetensors";
}

void check_output_folder(const std::string& out, const char* flag, const char* kind,
                         bool (*exported_file)(const std::string&)) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) {
    titan::input_error(flag, ": '", out,
                       "' is a file; name a folder (titan_convert writes a folder, replacing an "
                       "earlier export there)");
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(out, ec)) {
    const std::string name = entry.path().filename().string();
    if (!exported_file(name)) {
      titan::input_error(flag, ": '", out, "' holds '", name,
                         "', so it is not an earlier ", kind, " export, and titan_convert "
                         "replaces the whole folder; name a new folder, or empty this one first");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"titan_convert: a titan_train checkpoint step folder to a Hugging Face Llama 3 folder"};
  std::string checkpoint, out, peft_out, dtype_name = "float32";
  bool merge_lora = false;
  int parts = 1;
  int64_t step = -1;
  app.add_option("--checkpoint", checkpoint,
                 "a step folder (…/checkpoint/step-N), or the checkpoint folder holding them")
      ->required();
  CLI::Option* step_option = app.add_option(
      "--step", step, "the step to convert, of a checkpoint folder [default: its newest complete one]");
  CLI::Option* to_hf_option =
      app.add_option("--to-hf", out, "the Hugging Face folder to write (replaced atomically)");
  app.add_flag("--merge-lora", merge_lora,
               "a LoRA run's checkpoint: write --to-hf with the adapters merged into the weights "
               "(W + alpha/r·B·A), a plain Llama folder");
  CLI::Option* to_peft_option = app.add_option("--to-peft", peft_out,
                 "a LoRA run's checkpoint: the folder to write its adapters to in PEFT's layout "
                 "(adapter_config.json, adapter_model.safetensors), replaced atomically");
  const std::vector<std::string_view> dtypes = titan::checkpoint::kExportDTypes.names();
  app.add_option("--dtype", dtype_name, titan::list_alternatives(dtypes))
      ->check(CLI::IsMember(std::vector<std::string>(dtypes.begin(), dtypes.end())));
  app.add_option("--parts", parts,
                 "safetensors files to split the weights into (at most one per tensor)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return titan::exit_status(titan::ExitCode::Ok);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "titan_convert: error: %s (see --help)\n", e.what());
    return titan::exit_status(titan::ExitCode::BadInput);
  }
  try {
    if (parts < 1) {
      titan::input_error("--parts ", parts, ": give a positive number of files, e.g. 1");
    }
    for (const CLI::Option* given : {to_hf_option, to_peft_option}) {
      if (given->count() > 0 && given->as<std::string>().empty()) {
        titan::input_error(given->get_name(), ": is empty; name the folder to write, e.g. hf");
      }
    }
    if (out.empty() && peft_out.empty()) {
      titan::input_error("nothing to write; give --to-hf <folder> (a Hugging Face folder) or, "
                         "for a LoRA run, --to-peft <folder> (its adapters), or both");
    }
    if (merge_lora && out.empty()) {
      titan::input_error("--merge-lora: writes the --to-hf folder; give --to-hf <folder> too");
    }
    const std::string step_folder = choose_step_folder(
        checkpoint, step_option->count() > 0 ? std::optional<int64_t>(step) : std::nullopt);
    if (!out.empty()) check_output_folder(out, "--to-hf", "Hugging Face", hf_export_file);
    if (!peft_out.empty()) check_output_folder(peft_out, "--to-peft", "PEFT", peft_export_file);
    const titan::DType dtype = titan::checkpoint::kExportDTypes.parse(dtype_name, "--dtype");
    // Every file's checksum first, as a resuming job does: a corrupt checkpoint must not become
    // a clean-looking Hugging Face folder.
    const titan::checkpoint::CheckpointReader reader(step_folder, kChoice);
    for (size_t i = 0; i < reader.metadata().files.size(); ++i) {
      reader.verify_file(static_cast<int64_t>(i));
    }
    const int64_t lora_rank = reader.metadata().model.lora.rank;
    if (lora_rank > 0 && !out.empty() && !merge_lora) {
      titan::input_error("--to-hf: ", step_folder, " is a LoRA run's (rank ", lora_rank,
                         " adapters), and a plain Hugging Face folder has no place for them; add "
                         "--merge-lora to write the adapted model, or write the adapters alone "
                         "with --to-peft <folder>");
    }
    if (lora_rank == 0 && (merge_lora || !peft_out.empty())) {
      titan::input_error(merge_lora ? "--merge-lora" : "--to-peft", ": ", step_folder,
                         " holds no LoRA adapters (its run had lora.rank 0); export it with "
                         "--to-hf alone");
    }
    if (!peft_out.empty()) {
      titan::checkpoint::export_peft_adapters(step_folder, peft_out, dtype);
      std::printf("titan_convert: wrote %s (LoRA adapters, PEFT, %s) from %s\n", peft_out.c_str(),
                  dtype_name.c_str(), step_folder.c_str());
      if (out.empty()) return titan::exit_status(titan::ExitCode::Ok);
    }
    // A part past the plan's files writes nothing: loop over the files, not over --parts.
    const size_t files =
        titan::checkpoint::hf_export_plan(reader.metadata().model, dtype, parts).size();
    for (size_t part = 0; part < files; ++part) {
      titan::checkpoint::export_hf(step_folder, out, dtype, static_cast<int>(part), parts);
    }
    titan::checkpoint::finish_hf_export(step_folder, out, dtype, parts);
    std::printf("titan_convert: wrote %s (%s) from %s\n", out.c_str(), dtype_name.c_str(),
                step_folder.c_str());
  } catch (const titan::InputError& e) {
    std::fprintf(stderr, "titan_convert: error: %s\n", e.what());
    return titan::exit_status(titan::ExitCode::BadInput);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan_convert: internal error: %s\n", e.what());
    return titan::exit_status(titan::ExitCode::Failure);
  }
  return titan::exit_status(titan::ExitCode::Ok);
}
