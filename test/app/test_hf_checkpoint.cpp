// Hugging Face Llama folders end to end: titan_convert and checkpoint.last_save_in_hf write the
// same folder; starting a run from it (checkpoint.initial_load_in_hf) is the same as starting
// from the titan_train checkpoint it came from, bit for bit; and an independent PyTorch forward
// over it (test/checkpoint/hf_llama_reference.py, HF's names and RoPE) gives the validation loss
// titan_train computed on those weights and tokens.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/token_file.h"
#include "support/hf_reference.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/tool_refusal.h"
#include "support/training_run.h"

using namespace titan::testing;
namespace fs = std::filesystem;

namespace {

// Every file of two folders, byte for byte.
void check_same_folder(const fs::path& a, const fs::path& b) {
  int files = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(a)) {
    const fs::path other = b / entry.path().filename();
    REQUIRE_MESSAGE(fs::exists(other), other.string(), " is missing");
    CHECK_MESSAGE(files_equal(entry.path(), other), entry.path().filename().string());
    ++files;
  }
  CHECK(files >= 3);  // a safetensors file, the index, config.json
}

}  // namespace

TEST_SUITE("check") {

TEST_CASE("HF: export then import gives the same run and PyTorch computes the same loss" * doctest::test_suite("check torch ranks=4")) {
  const std::string dir = scratch_dir("hf_checkpoint");
  // Fresh dump folders: a checkpoint left by an earlier run would be resumed instead.
  for (const char* old : {"/first", "/from_hf", "/from_ckpt", "/converted", "/from_hf_mesh"}) fs::remove_all(dir + old);
  // Held-out tokens: 2 windows of 32 (+1) from the corpus, validated after step 2, whose
  // weights the checkpoint saves.
  const int S = 32, B = 2;
  std::vector<int32_t> tokens;
  {
    std::ifstream in(source_path("corpus/kjv.txt"), std::ios::binary);
    for (int i = 0; i < B * S + 1; ++i) tokens.push_back(in.get());
  }
  titan::data::write_token_file(dir + "/held_out.bin", tokens, 256, 2);
  {
    std::ofstream txt(dir + "/held_out.txt");
    for (int32_t t : tokens) txt << t << ' ';
  }
  const std::string common = "--training.steps 2 --training.seq_len 64 --checkpoint.enable true "
                             "--checkpoint.interval 2 ";
  const TrainingRun first = train_debug_model(
      "hf_checkpoint", "first",
      common + "--job.dump_folder " + dir + "/first --checkpoint.last_save_in_hf true "
               "--validation.enable true --validation.freq 2 --validation.steps 1 "
               "--validation.seq_len 32 --validation.local_batch_size 2 "
               "--validation.dataset_path " + dir + "/held_out.bin");
  const fs::path step2 = dir + "/first/checkpoint/step-2";
  REQUIRE(fs::exists(step2 / "metadata.json"));

  // titan_convert writes what last_save_in_hf wrote.
  fs::remove_all(dir + "/converted");
  const ProcessResult convert = run_process(binary_path("titan_convert") + " --checkpoint " +
                                            step2.string() + " --to-hf " + dir + "/converted");
  REQUIRE_MESSAGE(convert.exit_code == 0, convert.err);
  const fs::path saved_hf = dir + "/first/checkpoint/hf-step-2";
  if (fs::exists(saved_hf)) {
    check_same_folder(dir + "/converted", saved_hf);
  } else {
    FAIL_CHECK("checkpoint.last_save_in_hf wrote no ", saved_hf.string());
  }

  // PyTorch on the exported folder and the held-out tokens: titan_train's val_loss after step 2.
  const std::vector<std::map<std::string, double>> lines =
      read_metrics_jsonl(scratch_dir("hf_checkpoint") + "/first.jsonl");
  REQUIRE(lines.size() == 2);
  REQUIRE(lines[1].count("val_loss") == 1);
  const double val_loss = lines[1].at("val_loss");
  const double torch_loss = hf_reference_loss(dir + "/converted", dir + "/held_out.txt", S, B);
  MESSAGE("titan_train val_loss ", val_loss, ", PyTorch on the HF export ", torch_loss);
  CHECK(std::abs(val_loss - torch_loss) <= 1e-5 * std::abs(torch_loss));

  // A run started from the HF folder and one started from the checkpoint's weights train the
  // same step 1 bit for bit (the same loss, the same saved weights): the import is exact.
  const std::string second_args = "--training.steps 1 --training.seq_len 64 "
                                  "--checkpoint.enable true --checkpoint.interval 1 "
                                  "--checkpoint.last_save_in_hf true ";
  const TrainingRun from_hf = train_debug_model(
      "hf_checkpoint", "from_hf",
      second_args + "--job.dump_folder " + dir + "/from_hf --checkpoint.initial_load_path " + dir +
          "/converted --checkpoint.initial_load_in_hf true");
  const TrainingRun from_ckpt = train_debug_model(
      "hf_checkpoint", "from_ckpt",
      second_args + "--job.dump_folder " + dir + "/from_ckpt --checkpoint.initial_load_path " +
          step2.string() + " --checkpoint.initial_load_model_only true");
  REQUIRE(from_hf.losses.size() == 1);
  REQUIRE(from_ckpt.losses.size() == 1);
  CHECK(from_hf.losses[0] == from_ckpt.losses[0]);
  check_same_folder(dir + "/from_hf/checkpoint/hf-step-1", dir + "/from_ckpt/checkpoint/hf-step-1");

  // bf16: the export rounds every weight to bf16 (the exact bf16 round trip is a unit test,
  // test_hf_llama.cpp); PyTorch's loss on it stays near the f32 weights' loss.
  fs::remove_all(dir + "/bf16");
  REQUIRE(run_process(binary_path("titan_convert") + " --dtype bfloat16 --checkpoint " +
                      step2.string() + " --to-hf " + dir + "/bf16").exit_code == 0);
  const ProcessResult torch_bf16 = run_process(
      "/usr/bin/python3 test/checkpoint/hf_llama_reference.py " + dir + "/bf16 " + dir +
      "/held_out.txt --seq-len " + std::to_string(S) + " --batch " + std::to_string(B));
  REQUIRE(torch_bf16.exit_code == 0);
  const double bf16_loss = std::stod(torch_bf16.out.substr(torch_bf16.out.find("loss ") + 5));
  MESSAGE("PyTorch on the bf16 export ", bf16_loss);
  CHECK(std::abs(bf16_loss - torch_loss) <= 1e-2 * std::abs(torch_loss));
  CHECK(bf16_loss != torch_loss);  // the weights were rounded: not the f32 folder again

  // On a mesh, every rank reads only its rows of the HF tensors (FSDP shards of tp slices, q/k
  // rows permuted one by one): the first step's loss is the single rank's.
  const TrainingRun on_mesh = train_debug_model(
      "hf_checkpoint", "from_hf_mesh",
      "--training.steps 1 --training.seq_len 64 --training.local_batch_size 2 "
      "--parallelism.dp_shard 2 --parallelism.tp 2 --job.dump_folder " + dir +
          "/from_hf_mesh --checkpoint.initial_load_path " + dir +
          "/converted --checkpoint.initial_load_in_hf true",
      mpirun_launcher(4));
  REQUIRE(on_mesh.losses.size() == 1);
  CHECK(std::abs(on_mesh.losses[0] - from_hf.losses[0]) <= 1e-5 * std::abs(from_hf.losses[0]));
}

TEST_CASE("HF: titan_convert refuses bad arguments and bad checkpoints with exit 2 and one line") {
  const std::string dir = scratch_dir("hf_convert_bad");
  for (const std::string& args : std::vector<std::string>{"", "--checkpoint " + dir, "--checkpoint " + dir + " --to-hf " + dir + "/out --dtype fp16",
        "--checkpoint " + dir + "/absent --to-hf " + dir + "/out", "--bogus 1"}) {
    const ProcessResult r = run_process(binary_path("titan_convert") + " " + args);
    CHECK_MESSAGE(r.exit_code == 2, args, ": ", r.err);
    CHECK_MESSAGE(r.err_lines().size() == 1, args, ": ", r.err);
    CHECK_MESSAGE(r.err.starts_with("titan_convert: error: "), args, ": ", r.err);
    check_names_no_trainer_key("titan_convert", r.err + r.out);
  }
  CHECK_FALSE(fs::exists(dir + "/out"));
}

TEST_CASE("titan_convert: every refusal names its own flags and none of titan_train's keys") {
  // The check finds a key as a whole word only: what titan_convert said before it named its
  // own flags, and not a file's field of the same spelling.
  CHECK(trainer_keys_named("pick another step (checkpoint.load_step) or delete this folder") ==
        std::vector<std::string>{"checkpoint.load_step"});
  CHECK(trainer_keys_named("with --checkpoint.initial_load_in_hf true)") ==
        std::vector<std::string>{"checkpoint.initial_load_in_hf"});
  CHECK(trainer_keys_named("model.vocab: id 17; tensors.model.dim; model.dims").empty());
  const std::string dir = scratch_dir("convert_refusals");
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Steps 1 and 2 of a 0.3M-parameter model, saved every step.
  const std::string checkpoint = dir + "/job/checkpoint";
  const ProcessResult run = run_process(
      binary_path("titan_train") +
      " --config configs/debug_model.yaml --training.steps 2 --model.dim 64 --model.n_layers 1 "
      "--model.n_heads 4 --model.n_kv_heads 4 --model.ffn_dim 128 --training.seq_len 32 "
      "--checkpoint.enable true --checkpoint.interval 1 --job.dump_folder " + dir + "/job");
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const std::string out = " --to-hf " + dir + "/out";
  // A copy of step 2 in a checkpoint folder of its own, to break.
  auto copied = [&](const std::string& name) {
    const std::string step = dir + "/" + name + "/step-2";
    fs::create_directories(dir + "/" + name);
    fs::copy(checkpoint + "/step-2", step, fs::copy_options::recursive);
    return step;
  };

  // The command line.
  check_tool_refused("titan_convert", out, {"--checkpoint is required"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint, {"nothing to write; give --to-hf <folder>"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint + out + " --bogus 1",
                     {"--bogus", "(see --help)"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint + out + " --dtype fp16",
                     {"--dtype: fp16 not in {float32,bfloat16}"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint + out + " --parts 0",
                     {"--parts 0: give a positive number of files"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint + out + " --step x",
                     {"--step", "x", "(see --help)"});

  // Which checkpoint and which step.
  check_tool_refused("titan_convert", "--checkpoint " + dir + "/absent" + out,
                     {"absent' does not exist; name a step folder of a checkpoint"});
  fs::create_directories(dir + "/nothing");
  check_tool_refused("titan_convert", "--checkpoint " + dir + "/nothing" + out,
                     {"--checkpoint: '" + dir + "/nothing' holds no complete step-N folder"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint + " --step -1" + out,
                     {"--step -1: give the number of a saved step"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint + " --step 7" + out,
                     {"--step 7: '" + checkpoint + "' has no step-7 folder",
                      "its newest complete step is 2"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint + "/step-2 --step 2" + out,
                     {"--step 2: --checkpoint '" + checkpoint + "/step-2' is a step folder"});

  // Step folders that are not whole: each says to pick another with titan_convert's flags.
  const std::string pick = "pick another step (--step, or another step folder as --checkpoint)";
  std::string step = copied("no_metadata");
  fs::remove(step + "/metadata.json");
  check_tool_refused("titan_convert", "--checkpoint " + step + out,
                     {"metadata.json: missing; the step folder is incomplete", pick});
  step = copied("not_json");
  std::ofstream(step + "/metadata.json") << "{\"format\": ";
  check_tool_refused("titan_convert", "--checkpoint " + step + out, {"not JSON", pick});
  step = copied("file_missing");
  fs::remove(step + "/rank00000.safetensors");
  check_tool_refused("titan_convert", "--checkpoint " + step + out,
                     {"rank00000.safetensors: missing (", pick});
  step = copied("truncated");
  fs::resize_file(step + "/rank00000.safetensors", 1000);
  check_tool_refused("titan_convert", "--checkpoint " + step + out,
                     {"rank00000.safetensors: 1000 bytes", "(truncated)", pick});
  step = copied("corrupt");
  {
    std::fstream f(step + "/rank00000.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3000000);
    f.put('\x7f');
  }
  check_tool_refused("titan_convert", "--checkpoint " + step + out,
                     {"rank00000.safetensors: CRC32C", "the file is corrupt", pick});

  // A Hugging Face folder is no checkpoint; the export needs a folder of its own.
  REQUIRE(run_process(binary_path("titan_convert") + " --checkpoint " + checkpoint + " --to-hf " +
                      dir + "/hf").exit_code == 0);
  check_tool_refused("titan_convert", "--checkpoint " + dir + "/hf" + out,
                     {"has a config.json but no metadata.json",
                      "this folder is in Hugging Face's format already"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint + " --to-hf " + checkpoint,
                     {"so it is not an earlier Hugging Face export"});
  check_tool_refused("titan_convert", "--checkpoint " + checkpoint + " --to-hf /proc/titan_hf",
                     {"export into a folder you can write"});
  CHECK_FALSE(fs::exists(dir + "/out"));
}

}  // TEST_SUITE
