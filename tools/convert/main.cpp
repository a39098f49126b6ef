// titan_convert: a titan_train checkpoint (one step folder) to a Hugging Face Llama 3 folder,
// without training and without MPI. docs/hugging_face.md describes the folder it writes.
//
//   titan_convert --checkpoint <step folder> --to-hf <out folder> [--dtype float32|bfloat16]
//
// One process writes every part in turn (export_hf then finish_hf_export, the protocol of
// checkpoint/hf_llama.h), so the result is the same folder a job's last_save_in_hf writes.
// Exit 0 on success, 2 with one line on bad arguments or a bad checkpoint, 1 on a bug.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "checkpoint/checkpoint_reader.h"  // defines: CheckpointReader
#include "checkpoint/hf_llama.h"           // defines: export_hf, finish_hf_export, hf_export_plan
#include "core/check.h"                    // defines: InputError, input_error

namespace {

// The export replaces --to-hf as a whole, so it must be new, empty, or an earlier export:
// a typo must not delete a file, the checkpoint being read or a folder of other things.
void check_output_folder(const std::string& out) {
  namespace fs = std::filesystem;
  if (out.empty()) titan::input_error("--to-hf: is empty; name the folder to write, e.g. hf");
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) {
    titan::input_error("--to-hf: '", out,
                       "' is a file; name a folder (titan_convert writes a folder, replacing an "
                       "earlier export there)");
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(out, ec)) {
    const std::string name = entry.path().filename().string();
    const bool exported = name == "config.json" || name == "model.safetensors.index.json" ||
                          (name.starts_with("model") && name.ends_with(".safetensors"));
    if (!exported) {
      titan::input_error("--to-hf: '", out, "' holds '", name,
                         "', so it is not an earlier Hugging Face export, and titan_convert "
                         "replaces the whole folder; name a new folder, or empty this one first");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"titan_convert: a titan_train checkpoint step folder to a Hugging Face Llama 3 folder"};
  std::string checkpoint, out, dtype_name = "float32";
  int parts = 1;
  app.add_option("--checkpoint", checkpoint, "a step folder (…/checkpoint/step-N)")->required();
  app.add_option("--to-hf", out, "the Hugging Face folder to write (replaced atomically)")->required();
  app.add_option("--dtype", dtype_name, "float32 or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--parts", parts,
                 "safetensors files to split the weights into (at most one per tensor)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "titan_convert: error: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    if (parts < 1) {
      titan::input_error("--parts ", parts, ": give a positive number of files, e.g. 1");
    }
    check_output_folder(out);
    const titan::DType dtype = dtype_name == "bfloat16" ? titan::DType::BF16 : titan::DType::F32;
    // Every file's checksum first, as a resuming job does: a corrupt checkpoint must not become
    // a clean-looking Hugging Face folder.
    const titan::checkpoint::CheckpointReader reader(checkpoint);
    for (size_t i = 0; i < reader.metadata().files.size(); ++i) {
      reader.verify_file(static_cast<int64_t>(i));
    }
    // A part past the plan's files writes nothing: loop over the files, not over --parts.
    const size_t files =
        titan::checkpoint::hf_export_plan(reader.metadata().model, dtype, parts).size();
    for (size_t part = 0; part < files; ++part) {
      titan::checkpoint::export_hf(checkpoint, out, dtype, static_cast<int>(part), parts);
    }
    titan::checkpoint::finish_hf_export(checkpoint, out, dtype, parts);
    std::printf("titan_convert: wrote %s (%s) from %s\n", out.c_str(), dtype_name.c_str(),
                checkpoint.c_str());
  } catch (const titan::InputError& e) {
    std::fprintf(stderr, "titan_convert: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan_convert: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
