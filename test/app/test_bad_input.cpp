// Bad input, end to end: titan_train exits with code 2 and prints exactly one line naming
// what was wrong, the value seen and the fix — before it allocates the model (the 405B cases
// would take terabytes otherwise) and without a stack trace.
#include <doctest/doctest.h>

#include <fstream>

#include "support/process.h"

using titan::testing::ProcessResult;

namespace {

ProcessResult run_titan(const std::string& args) {
  return titan::testing::run_process(titan::testing::binary_path("titan_train") + " " + args);
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string path = titan::testing::scratch_dir("bad_input") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// Exit code 2, one line on stderr holding every expected fragment, nothing on stdout.
void check_rejected(const std::string& args, const std::vector<std::string>& fragments) {
  CAPTURE(args);
  ProcessResult r = run_titan(args);
  CAPTURE(r.err);
  CHECK(r.exit_code == 2);
  const std::vector<std::string> lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  const std::string& line = lines[0];
  CHECK(line.starts_with("titan_train: error: "));
  for (const std::string& fragment : fragments)
    CHECK_MESSAGE(line.find(fragment) != std::string::npos, fragment);
  CHECK(r.out.empty());
}

const std::string kDebug = "--config configs/debug_model.yaml --training.steps 2 ";

}  // namespace

TEST_SUITE("check") {
  TEST_CASE("bad input: an unknown key on the command line or in the file") {
    check_rejected(kDebug + "--training.stepz 5",
                   {"unknown flag '--training.stepz'", "did you mean '--training.steps'"});
    std::string yaml = write_file("unknown.yaml", "training:\n  steps: 5\n  lr: 0.1\n");
    check_rejected("--config " + yaml, {"unknown key 'training.lr'", "titan_train --help"});
  }

  TEST_CASE("bad input: a value of the wrong type") {
    check_rejected(kDebug + "--training.seq_len long",
                   {"training.seq_len", "expected an integer", "'long'"});
    std::string yaml = write_file("type.yaml", "optimizer:\n  lr: [1, 2]\n");
    check_rejected("--config " + yaml, {"optimizer.lr", "expected float", "got a list", "line 2"});
  }

  TEST_CASE("bad input: a missing data file or config file") {
    check_rejected(kDebug + "--data.path /nonexistent/corpus.txt",
                   {"data.path", "'/nonexistent/corpus.txt' does not exist", "scripts/setup.sh"});
    check_rejected("--config configs/nope.yaml",
                   {"--config", "'configs/nope.yaml' does not exist"});
  }

  TEST_CASE("bad input: non-positive sizes") {
    check_rejected(kDebug + "--training.local_batch_size 0",
                   {"training.local_batch_size: must be positive, got 0"});
    check_rejected(kDebug + "--training.seq_len -5",
                   {"training.seq_len: must be positive, got -5"});
    check_rejected(kDebug + "--training.steps 0", {"training.steps: must be positive, got 0"});
    check_rejected(kDebug + "--model.dim -1",
                   {"model.dim: must be 0 (the flavor's value) or positive, got -1"});
  }

  TEST_CASE("bad input: heads that do not divide dim are caught before a 405B model is allocated") {
    check_rejected(kDebug + "--model.n_heads 7",
                   {"model.n_heads: 7 heads do not divide model.dim 256"});
    check_rejected(kDebug + "--model.flavor llama3_405b --model.n_heads 100",
                   {"model.n_heads: 100 heads do not divide model.dim 16384"});
    check_rejected(kDebug + "--model.n_kv_heads 5",
                   {"model.n_kv_heads: 5 kv heads do not divide model.n_heads 16"});
  }

  TEST_CASE("bad input: a model too large for this machine is refused before allocation") {
    check_rejected(kDebug + "--model.flavor llama3_405b",
                   {"model.flavor: llama3_405b needs", "GiB"});
  }

  TEST_CASE("bad input: a sequence longer than the data") {
    std::string tiny =
        write_file("tiny.txt", "In the beginning God created the heaven and the earth.\n");
    check_rejected(
        kDebug + "--data.path " + tiny + " --training.seq_len 256",
        {"training.seq_len: 256 needs at least 257 tokens", "tiny.txt", "lower training.seq_len"});
    // At the largest seq_len the micro-batch's token count overflows: refused before the data
    // is opened (the data's check would not wrap around either).
    check_rejected(kDebug + "--training.seq_len 9223372036854775807",
                   {"training.local_batch_size: 4 sequences × seq_len 9223372036854775807 × dp 1 "
                    "overflow 64 bits"});
  }

  TEST_CASE("bad input: a vocabulary too small for the data's tokenizer") {
    check_rejected(kDebug + "--model.vocab_size 100",
                   {"model.vocab_size: 100 is smaller", "at least 258"});
  }

  TEST_CASE("bad input: a global batch that is not a multiple of the micro-batch") {
    check_rejected(kDebug + "--training.local_batch_size 3 --training.global_batch_size 8",
                   {"training.global_batch_size: 8 is not a multiple of local_batch_size 3"});
  }

  TEST_CASE("bad input: a mesh whose product is not the world size names every factor") {
    check_rejected(
        kDebug + "--parallelism.dp_replicate 2 --parallelism.dp_shard 1 --parallelism.tp 2",
        {"dp_replicate 2 × dp_shard 1 × tp 2 = 4 ranks, but the job has 1 ranks"});
    check_rejected(kDebug + "--parallelism.tp 0",
                   {"parallelism.tp: must be a positive degree, got 0"});
    // A product past int64 must not wrap around to the world size: 7 × 7905747460161236407
    // is 3 · 2^64 + 1.
    check_rejected(kDebug + "--parallelism.dp_replicate 7 "
                            "--parallelism.dp_shard 7905747460161236407 --parallelism.tp 1",
                   {"dp_replicate 7 × dp_shard 7905747460161236407 × tp 1 = more than 2^63 ranks",
                    "but the job has 1 ranks"});
  }

  TEST_CASE("bad input: features this build does not have or cannot combine are refused") {
    check_rejected(kDebug + "--training.device cuda",
                   {"training.device: 'cuda'", "--training.device cpu"});
    check_rejected(kDebug + "--float8.enabled true "
                            "--float8.precompute_float8_dynamic_scale_for_fsdp true",
                   {"float8.precompute_float8_dynamic_scale_for_fsdp",
                    "set float8.enable_fsdp_float8_all_gather: true as well"});
  }

  TEST_CASE("bad input: a communication backend the device cannot use or a bad timeout") {
    check_rejected(kDebug + "--parallelism.comm_backend nccl",
                   {"parallelism.comm_backend: nccl moves CUDA tensors", "training.device is 'cpu'",
                    "use comm_backend mpi"});
    check_rejected(kDebug + "--parallelism.comm_backend gloo",
                   {"parallelism.comm_backend: unknown backend 'gloo'", "use auto, nccl or mpi"});
    check_rejected(kDebug + "--parallelism.comm_timeout_s 0",
                   {"parallelism.comm_timeout_s: must be a positive number of seconds, got 0",
                    "e.g. 600"});
    check_rejected(kDebug + "--parallelism.comm_timeout_s -1.5",
                   {"parallelism.comm_timeout_s: must be a positive number of seconds, got -1.5"});
    check_rejected(kDebug + "--parallelism.comm_timeout_s inf",
                   {"parallelism.comm_timeout_s: expected a number, got 'inf'"});
  }

  TEST_CASE("bad input: resuming from a checkpoint step that does not exist") {
    std::string dump = titan::testing::scratch_dir("bad_input_checkpoint");
    check_rejected(
        kDebug + "--checkpoint.enable true --checkpoint.load_step 7 --job.dump_folder " + dump,
        {"checkpoint.load_step: no checkpoint for step 7"});
  }

  TEST_CASE("bad input: the checkpoint keys") {
    check_rejected(kDebug + "--checkpoint.async_mode background",
                   {"checkpoint.async_mode: unknown mode 'background'",
                    "use disabled, async or async_with_pinned_mem"});
    check_rejected(kDebug + "--checkpoint.keep_latest_k -1",
                   {"checkpoint.keep_latest_k: must be 0 (keep all) or positive, got -1"});
    check_rejected(kDebug + "--checkpoint.export_dtype float16",
                   {"checkpoint.export_dtype: unknown dtype 'float16'", "float32 or bfloat16"});
    check_rejected(kDebug + "--checkpoint.initial_load_in_hf true",
                   {"checkpoint.initial_load_in_hf: is true but checkpoint.initial_load_path is "
                    "empty"});
    check_rejected(kDebug + "--checkpoint.initial_load_in_hf true "
                            "--checkpoint.initial_load_path /nonexistent "
                            "--checkpoint.initial_load_model_only false",
                   {"checkpoint.initial_load_model_only: is false", "set it true"});
    check_rejected(kDebug + "--checkpoint.initial_load_path /nonexistent/step-4",
                   {"checkpoint.initial_load_path: no folder '/nonexistent/step-4'"});
    // Found before training, not at the first save.
    check_rejected(kDebug + "--checkpoint.enable true --job.dump_folder /proc/titan",
                   {"checkpoint.folder", "/proc/titan/checkpoint"});
  }

  TEST_CASE("bad input: resuming a checkpoint of another model") {
    const std::string dump = titan::testing::scratch_dir("bad_input_other_model");
    const std::string save = kDebug + "--training.seq_len 64 --checkpoint.enable true "
                                      "--job.dump_folder " + dump;
    REQUIRE(run_titan(save).exit_code == 0);
    check_rejected(save + " --model.n_layers 3",
                   {"checkpoint.folder: ", "/step-2/metadata.json was saved for another model: ",
                    "n_layers 6 (this run: 3)", "train with the same model.* settings"});
    check_rejected(kDebug + "--model.dim 128 "
                            "--checkpoint.initial_load_path " + dump + "/checkpoint/step-2",
                   {"checkpoint.initial_load_path: ", "dim 256 (this run: 128)"});
  }

}  // TEST_SUITE
