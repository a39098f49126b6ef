// The bad-input census (docs/bad_input.md): the classes of bad input that no other test refused
// end to end. Each check runs a binary and expects what every refusal promises: exit code 2,
// exactly one stderr line "<binary>: error: …" naming what was wrong, the value and the fix, and
// nothing on stdout (or, for the few inputs found only once training has set up, no trained
// step). docs/bad_input.md names, for each row, the case that checks it; the unit test
// "unit: docs/bad_input.md names existing tests and holds at least 60 exit-2 rows" keeps them
// in step.
//
// Most checks take 0.2–0.5 s: titan_train refuses before it allocates the model. The checkpoint
// and Hugging Face cases train a 0.3M-parameter model for 2 steps once (about 1 s) and corrupt
// copies of what it saved.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/cuda/device_query.h"
#include "core/json_reader.h"
#include "data/token_file.h"
#include "support/process.h"
#include "support/refusal.h"
#include "support/tool_refusal.h"

using namespace titan;
using namespace titan::testing;

namespace {

namespace fs = std::filesystem;

const std::string kCensusDebug = "--config configs/debug_model.yaml --training.steps 2 ";

// titan_train on the debug config for 2 steps with `args`.
void check_train_refused(const std::string& args, const std::vector<std::string>& fragments,
                         Stdout out = Stdout::Empty, const std::string& env = "") {
  check_refused("titan_train", kCensusDebug + args, fragments, out, env);
}

// An empty folder of this test's files, under the build tree.
std::string census_dir(const std::string& name) {
  const std::string dir = scratch_dir("bad_input_census") + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// `text` with the first match of `pattern` replaced; the test stops if there is none.
std::string edited(const std::string& text, const std::string& pattern,
                   const std::string& replacement) {
  const std::regex re(pattern);
  REQUIRE_MESSAGE(std::regex_search(text, re), "no '" << pattern << "' to edit");
  return std::regex_replace(text, re, replacement, std::regex_constants::format_first_only);
}

void edit_file(const std::string& path, const std::string& pattern,
               const std::string& replacement) {
  write_text(path, edited(read_file(path), pattern, replacement));
}

// ---- token files ----

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

// A token file as docs/data.md lays it out, with every header field chosen by the caller.
std::string token_file(const std::string& magic, uint32_t version, uint32_t width, uint64_t count,
                       uint64_t vocab, const std::vector<uint32_t>& tokens) {
  std::string bytes = magic;
  put_le(bytes, version, 4);
  put_le(bytes, width, 4);
  put_le(bytes, count, 8);
  put_le(bytes, vocab, 8);
  bytes += std::string(32, '\0');
  for (uint32_t t : tokens) put_le(bytes, t, width == 4 ? 4 : 2);
  return bytes;
}

std::vector<uint32_t> ramp(size_t count, uint32_t modulo) {
  std::vector<uint32_t> tokens(count);
  for (size_t i = 0; i < count; ++i) tokens[i] = static_cast<uint32_t>(i % modulo);
  return tokens;
}

// ---- a saved checkpoint and its Hugging Face export, made once per test process ----

// A 0.3M-parameter model, so that saving and copying take milliseconds.
const std::string kCensusSmall =
    "--model.dim 64 --model.n_layers 1 --model.n_heads 4 --model.n_kv_heads 4 "
    "--model.ffn_dim 128 --training.seq_len 32 ";

// The step-2 folder of a 2-step run of the small model.
const std::string& saved_step() {
  static const std::string step = [] {
    // Per process: ctest -j runs cases of this file as processes at once.
    const std::string dump = census_dir("saved-" + std::to_string(getpid()));
    const ProcessResult r =
        run_process(binary_path("titan_train") + " " + kCensusDebug + kCensusSmall +
                    "--checkpoint.enable true --job.dump_folder " + dump);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return dump + "/checkpoint/step-2";
  }();
  return step;
}

// A job folder `name` holding a copy of the saved step-2 folder; returns the copy.
std::string copied_step(const std::string& name) {
  const std::string dump = census_dir(name);
  fs::create_directories(dump + "/checkpoint");
  fs::copy(saved_step(), dump + "/checkpoint/step-2", fs::copy_options::recursive);
  return dump + "/checkpoint/step-2";
}

// Resumes the job whose step folder is `step` (a copy from copied_step) with `args`.
void check_resume_refused(const std::string& step, const std::vector<std::string>& fragments,
                          Stdout out = Stdout::Empty, const std::string& args = "") {
  const std::string dump = fs::path(step).parent_path().parent_path().string();
  check_train_refused(kCensusSmall +
                          "--training.steps 4 --checkpoint.enable true --job.dump_folder " + dump +
                          " " + args,
                      fragments, out);
}

// The saved step as a Hugging Face folder (titan_convert).
const std::string& saved_hf() {
  static const std::string hf = [] {
    const std::string out = census_dir("saved_hf-" + std::to_string(getpid())) + "/hf";
    const ProcessResult r = run_process(binary_path("titan_convert") + " --checkpoint " +
                                        saved_step() + " --to-hf " + out);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return out;
  }();
  return hf;
}

std::string copied_hf(const std::string& name) {
  const std::string hf = census_dir(name) + "/hf";
  fs::copy(saved_hf(), hf, fs::copy_options::recursive);
  return hf;
}

void check_hf_refused(const std::string& hf, const std::vector<std::string>& fragments) {
  check_train_refused(kCensusSmall +
                          "--checkpoint.initial_load_in_hf true "
                          "--checkpoint.initial_load_path " +
                          hf,
                      fragments);
}

const std::string kShard = "/model-00001-of-00001.safetensors";

// Rewrites the JSON header of the safetensors file `path` with `pattern` replaced, padding it
// to 8 bytes again; the data after the header stays as it was.
void edit_safetensors_header(const std::string& path, const std::string& pattern,
                             const std::string& replacement) {
  const std::string bytes = read_file(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  REQUIRE(8 + length <= bytes.size());
  std::string header = edited(bytes.substr(8, length), pattern, replacement);
  header.erase(header.find_last_not_of(' ') + 1);
  header += std::string((8 - header.size() % 8) % 8, ' ');
  std::string out;
  put_le(out, header.size(), 8);
  write_text(path, out + header + bytes.substr(8 + length));
}

// Overwrites 4 bytes of `path` at `offset` with the float `bits` (NaN 0x7FC00000, +inf
// 0x7F800000).
void put_float_bits(const std::string& path, uint64_t offset, uint32_t bits) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  f.seekp(static_cast<std::streamoff>(offset));
  std::string bytes;
  put_le(bytes, bits, 4);
  f.write(bytes.data(), 4);
}

// Where element `index` of the f32 tensor `name` of the safetensors file `path` lies.
uint64_t safetensors_element_offset(const std::string& path, const std::string& name,
                                    uint64_t index) {
  const std::string bytes = read_file(path);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  JsonDocument header;
  REQUIRE(header.parse(std::string_view(bytes).substr(8, length)));
  const JsonObject entry = *header.root().get_object()->find(name)->get_object();
  const uint64_t begin = *entry.find("data_offsets")->get_array()->at(0).get_uint64();
  return 8 + length + begin + 4 * index;
}

// A NaN at element `index` of norm.weight in the copied step folder `step`, with metadata.json's
// CRC32C of the file made to match, as a run that diverged would have saved it.
void put_nan_with_valid_crc(const std::string& step, uint64_t index) {
  const std::string file = step + "/rank00000.safetensors";
  const std::string metadata = read_file(step + "/metadata.json");
  std::smatch found;
  REQUIRE(std::regex_search(
      metadata, found, std::regex(R"("norm\.weight": \{[^\n]*\n[^\n]*"byte_range": \[([0-9]+),)")));
  put_float_bits(file, std::stoull(found[1].str()) + 4 * index, 0x7FC00000u);
  edit_file(step + "/metadata.json", R"("crc32c": [0-9]+)",
            "\"crc32c\": " + std::to_string(titan::crc32c(read_file(file))));
}

// ---- tokenizer.json ----

// test/fixtures/tiny_tokenizer.json: a byte-level BPE tokenizer.json of 19 tokens and 6 merges
// (test/data/test_hf_tokenizer.cpp works out its ids by hand), which loads; each case below
// breaks one thing in it.

}  // namespace

TEST_SUITE("check") {
  TEST_CASE("census: the config file and the command line") {
    const std::string dir = census_dir("config");
    check_refused("titan_train",
                  "--config " + write_text(dir + "/section.yaml", "trainin:\n  steps: 5\n"),
                  {"unknown section 'trainin'", "did you mean 'training'"});
    check_refused("titan_train",
                  "--config " + write_text(dir + "/syntax.yaml", "training:\n  steps: [\n"),
                  {"--config: cannot parse", "fix the YAML syntax there"});
    check_refused("titan_train", "--config " + write_text(dir + "/list.yaml", "- a\n- b\n"),
                  {"must be a map of sections"});
    check_refused("titan_train",
                  "--config " + write_text(dir + "/section_list.yaml", "training: [1, 2]\n"),
                  {"section 'training' must be a map of keys"});
    check_refused("titan_train", "--config " + dir, {"is a folder, not a file"});
    // yaml-cpp 0.7's LoadAll looped forever, allocating, on these (app/yaml_document.h).
    check_refused("titan_train",
                  "--config " + write_text(dir + "/stray_comma.yaml", "[a :], b :]1\n"),
                  {"cannot parse", "at line 1: unexpected ',' after the end of a value"});
    check_refused("titan_train", "--config " + write_text(dir + "/comma.yaml", ",\n"),
                  {"unexpected ',' after the end of a value"});
    {
      const std::string big = dir + "/big.yaml";
      std::filesystem::resize_file(write_text(big, "#"), (16u << 20) + 1);
      check_refused("titan_train", "--config " + big,
                    {"is 16777217 bytes; a config is a small YAML file (at most 16777216 bytes)"});
    }
    check_refused("titan_train",
                  "--config " + write_text(dir + "/two.yaml",
                                           "training:\n  steps: 2\n---\nmodel:\n  dim: 3\n"),
                  {"holds a second YAML document (line 4)", "remove the '---'"});
    check_refused("titan_train",
                  "--config " + write_text(dir + "/twice.yaml",
                                           "training:\n  steps: 5\n  seed: 1\n  steps: 6\n"),
                  {"'training.steps' is given twice (lines 2 and 4)", "keep one"});
    check_refused("titan_train",
                  "--config " + write_text(dir + "/section_twice.yaml",
                                           "training:\n  steps: 5\ntraining:\n  seed: 1\n"),
                  {"'training' is given twice (lines 1 and 3)"});
    check_refused("titan_train",
                  "--config " + write_text(dir + "/null.yaml", "training:\n  steps: ~\n"),
                  {"training.steps: expected int, got null"});
    check_train_refused("foo", {"unknown argument 'foo'", "titan_train --help"});
    check_train_refused("--training.steps", {"--training.steps: 1 required INT missing"});
    check_train_refused("--optimizer.lr nan", {"optimizer.lr: expected a number, got 'nan'"});
    check_train_refused("--training.max_norm inf",
                        {"training.max_norm: expected a number, got 'inf'"});
    check_train_refused("--training.steps 9223372036854775808",
                        {"training.steps: expected an integer, got '9223372036854775808'"});
    check_train_refused("--checkpoint.enable maybe",
                        {"checkpoint.enable: expected true or false, got 'maybe'"});
  }

  TEST_CASE("census: model keys") {
    check_train_refused("--model.name gpt2", {"model.name: unknown model 'gpt2'"});
    check_train_refused("--model.flavor llama2",
                        {"model.flavor: unknown flavor 'llama2'", "use one of debugmodel"});
    check_train_refused("--model.norm_eps 0", {"model.norm_eps: must be positive, got 0"});
    check_train_refused("--model.norm_eps -1", {"model.norm_eps: must be positive, got -1"});
    check_train_refused("--model.rope_theta -5", {"model.rope_theta: must be positive, got -5"});
    check_train_refused("--model.attention_backend flash",
                        {"model.attention_backend: unknown attention backend 'flash'",
                         "use auto, cudnn, native or hopper"});
#if TITAN_CUDNN
    check_train_refused(
        "--model.attention_backend cudnn",
        {"model.attention_backend: cudnn runs attention on a GPU, but training.device is 'cpu'"});
    // Refused before a GPU is looked for: the shape alone decides (Dh = 320 / 16 = 20).
    check_train_refused(
        "--training.device cuda --model.attention_backend cudnn --model.dim 320",
        {"model.attention_backend: cudnn cannot run this model's attention (per rank H 16, Hkv 16, "
         "Dh 20",
         "cuDNN's fused attention takes head dims that are multiples of 8 up to 128"});
    // A one-token sequence: cuDNN's backward has no engine for S_q = S_kv = 1.
    check_train_refused(
        "--training.device cuda --model.attention_backend cudnn --training.seq_len 1",
        {"model.attention_backend: cudnn cannot run this model's attention (per rank H 16, Hkv 16, "
         "Dh 16, S 1)",
         "cuDNN's fused attention takes more than one query or key (S_q 1, S_kv 1"});
#else
    check_train_refused("--model.attention_backend cudnn",
                        {"model.attention_backend: cudnn, but this build has no cuDNN backend"});
#endif
#if TITAN_CUDA
    check_train_refused(
        "--model.attention_backend hopper",
        {"model.attention_backend: hopper runs attention on a GPU, but training.device is 'cpu'"});
    // Refused before a GPU is looked for: the shape alone decides (Dh = 320 / 16 = 20).
    check_train_refused("--training.device cuda --model.attention_backend hopper --model.dim 320",
                        {"model.attention_backend: hopper cannot run this model's attention (per "
                         "rank H 16, Hkv 16, "
                         "Dh 20",
                         "the Hopper kernel takes head dims 64 and 128"});
#else
    check_train_refused("--model.attention_backend hopper",
                        {"model.attention_backend: hopper, but this build has no CUDA backend"});
#endif
    check_train_refused(
        "--training.device cuda --model.attention_backend hopper --model.attention_mask "
        "block_causal",
        {"model.attention_backend: hopper with model.attention_mask block_causal: the Hopper "
         "kernel masks causally only"});
    check_train_refused(
        "--model.attention_mask document",
        {"model.attention_mask: unknown attention mask 'document'", "use causal or block_causal"});
    check_train_refused(
        "--training.device cuda --model.attention_backend cudnn --model.attention_mask "
        "block_causal",
        {"model.attention_backend: cudnn with model.attention_mask block_causal: cuDNN's fused "
         "attention here masks causally only"});
    // block_causal finds documents by the tokenizer's EOS: a tokenizer.json without one.
    const std::string dir = census_dir("attention_mask");
    std::string json = fixture_text("tiny_tokenizer.json");
    json.replace(json.find("\"</s>\""), 6, "\"<x/>\"");
    std::ofstream(dir + "/no_eos.json") << json;
    data::write_token_file(dir + "/tokens.bin", std::vector<int32_t>(200, 1), 22, 2);
    check_train_refused(
        "--model.attention_mask block_causal --model.vocab_size 32 "
        "--data.tokenizer_path " +
            dir + "/no_eos.json --data.path " + dir + "/tokens.bin",
        {"model.attention_mask: block_causal ends each document at the "
         "tokenizer's EOS, but Hugging Face byte-level BPE"});
  }

  TEST_CASE("census: optimizer and lr_scheduler keys") {
    check_train_refused("--optimizer.name SGD",
                        {"optimizer.name: unknown optimizer 'SGD'", "use AdamW or Muon"});
    check_train_refused("--optimizer.lr 0", {"optimizer.lr: must be positive, got 0"});
    check_train_refused("--optimizer.lr -1", {"optimizer.lr: must be positive, got -1"});
    check_train_refused("--optimizer.beta1 1", {"optimizer.beta1: must be in [0, 1), got 1"});
    check_train_refused("--optimizer.beta2 -0.1", {"optimizer.beta2: must be in [0, 1), got -0.1"});
    check_train_refused("--optimizer.eps 0", {"optimizer.eps: must be positive, got 0"});
    check_train_refused("--optimizer.weight_decay -1",
                        {"optimizer.weight_decay: must be 0 or positive, got -1"});
    check_train_refused("--optimizer.groups '[{match: nope, weight_decay: 0}]'",
                        {"optimizer.groups[0].match: 'nope' matches no parameter"});
    check_train_refused("--optimizer.groups '[{match: \"(\"}]'",
                        {"optimizer.groups[0].match: '(' is not a regex"});
    check_train_refused("--optimizer.groups '[{match: norm, lr_scale: 0}]'",
                        {"optimizer.groups[0].lr_scale: must be positive and finite, got 0"});
    check_train_refused("--optimizer.groups '[{match: norm, decay: 0}]'",
                        {"optimizer.groups[0]: unknown field 'decay'"});
    check_train_refused("--optimizer.state_dtype float16",
                        {"optimizer.state_dtype: unknown optimizer state dtype 'float16'"});
    check_train_refused("--optimizer.name Muon --optimizer.muon_scale spectral",
                        {"optimizer.muon_scale: unknown Muon update scale 'spectral'"});
    check_train_refused("--optimizer.name Muon --optimizer.muon_momentum 1",
                        {"optimizer.muon_momentum: must be in [0, 1), got 1"});
    check_train_refused("--optimizer.name Muon --optimizer.muon_ns_steps 0",
                        {"optimizer.muon_ns_steps: must be positive, got 0"});
    check_train_refused("--lr_scheduler.warmup_steps -1",
                        {"lr_scheduler.warmup_steps: must be 0 or positive, got -1"});
    check_train_refused("--lr_scheduler.decay_ratio 1.5",
                        {"lr_scheduler.decay_ratio: must be in [0, 1] or null, got 1.5"});
    check_train_refused("--lr_scheduler.decay_type step",
                        {"lr_scheduler.decay_type: unknown decay 'step'"});
    check_train_refused("--lr_scheduler.min_lr_factor 2",
                        {"lr_scheduler.min_lr_factor: must be in [0, 1], got 2"});
  }

  TEST_CASE("census: training and batch keys") {
    check_train_refused("--training.global_batch_size 0",
                        {"training.global_batch_size: must be positive or -1"});
    check_train_refused("--training.global_batch_size -2",
                        {"training.global_batch_size: must be positive or -1"});
    check_train_refused("--training.seed -1", {"training.seed: must be 0 or positive, got -1"});
    check_train_refused("--training.max_norm -1",
                        {"training.max_norm: must be 0 (no clipping) or positive, got -1"});
    check_train_refused("--training.device gpu",
                        {"training.device: unknown device 'gpu'", "use cpu, cuda or cuda:N"});
    check_train_refused("--training.device cuda:-1", {"training.device: unknown device 'cuda:-1'"});
    check_train_refused("--training.mixed_precision_param fp16",
                        {"training.mixed_precision_param: unknown precision 'fp16'"});
    check_train_refused("--training.device cuda --training.mixed_precision_param float32",
                        {"training.mixed_precision_param: 'float32' on CUDA"});
    check_train_refused("--validation.local_batch_size -3",
                        {"validation.local_batch_size: must be positive or -1"});
    check_train_refused("--validation.seq_len 0", {"validation.seq_len: must be positive or -1"});
  }

  TEST_CASE("census: mesh and parallelism keys") {
    check_train_refused("--parallelism.dp_replicate 3",
                        {"dp_shard -1 takes the rest of 1 ranks, but dp_replicate 3 × tp 1 = 3 "
                         "does not divide 1"});
    check_train_refused("--parallelism.dp_replicate 9223372036854775807 --parallelism.tp 2",
                        {"dp_shard -1 takes the rest of 1 ranks", "= more than 2^63"});
    // Context parallelism: the degree, the mesh it needs, the split of every sequence into
    // 2·cp chunks (training and held-out), the tokens tp must then shard, the comm mode.
    check_train_refused("--parallelism.context_parallel_degree 0",
                        {"parallelism.context_parallel_degree: must be a positive degree, got 0"});
    check_train_refused(
        "--parallelism.context_parallel_degree 2 --training.seq_len 64",
        {"dp_shard -1 takes the rest of 1 ranks, but pipeline_parallel_degree 1 × "
         "dp_replicate 1 × context_parallel_degree 2 × tp 1 = 2 does not divide 1"});
    check_train_refused(
        "--parallelism.context_parallel_degree 2 --parallelism.dp_shard 1 --training.seq_len 64",
        {"pipeline_parallel_degree 1 × dp_replicate 1 × dp_shard 1 × ",
         "context_parallel_degree 2 × tp 1 = 2 ranks, but the job has 1 ranks"});
    check_train_refused("--parallelism.context_parallel_degree 3 --training.seq_len 100",
                        {"training.seq_len: 100 tokens do not split into 2·cp = 6 equal chunks "
                         "(context parallel degree 3, head-tail split); use a multiple of 6"});
    check_train_refused(
        "--parallelism.context_parallel_degree 2 --training.seq_len 64 --validation.enable true "
        "--validation.dataset_path corpus/kjv.txt --validation.seq_len 30",
        {"validation.seq_len: 30 tokens do not split into 2·cp = 4 equal chunks"});
    check_train_refused(
        "--parallelism.context_parallel_degree 2 --parallelism.tp 4 --training.seq_len 4 "
        "--training.local_batch_size 1",
        {"training.local_batch_size: 1 × seq_len 4 / context_parallel_degree 2 = 2",
         "tokens per micro-batch on a cp rank do not split into tp 4",
         "make local_batch_size × seq_len a multiple of 8"});
    check_train_refused("--parallelism.context_parallel_comm alltoall",
                        {"parallelism.context_parallel_comm: ",
                         "unknown method 'alltoall'; use ring or allgather"});
  }

  TEST_CASE("census: pipeline keys") {
    // The pipeline is checked from the config alone, before the world: one process suffices.
    check_train_refused("--parallelism.pipeline_parallel_degree 16",
                        {"parallelism.pipeline_parallel_degree 16 × 1 stage per rank: 16 stages "
                         "for the 8 effective layers",
                         "leave a stage empty"});
    check_train_refused(
        "--parallelism.pipeline_parallel_degree 2 "
        "--parallelism.pipeline_parallel_layers_per_stage 3",
        {"parallelism.pipeline_parallel_layers_per_stage 3 gives 3 stages",
         "which does not divide over parallelism.pipeline_parallel_degree 2 ranks"});
    check_train_refused(
        "--parallelism.pipeline_parallel_degree 2 "
        "--parallelism.pipeline_parallel_microbatch_size 4",
        {"= 1 microbatch, fewer than the 2 pipeline ranks of 1F1B", "use at least 2 microbatches"});
    check_train_refused(
        "--parallelism.pipeline_parallel_degree 2 "
        "--parallelism.pipeline_parallel_microbatch_size 3",
        {"parallelism.pipeline_parallel_microbatch_size: training.local_batch_size 4 "
         "does not split into microbatches of 3 sequences"});
    check_train_refused(
        "--parallelism.pipeline_parallel_schedule 2F2B",
        {"parallelism.pipeline_parallel_schedule: unknown pipeline schedule '2F2B'",
         "use GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble or ZBVZeroBubble"});
    check_train_refused("--parallelism.pipeline_parallel_gradient_reduction bf16",
                        {"parallelism.pipeline_parallel_gradient_reduction: ",
                         "unknown gradient reduction 'bf16'; use microbatch or step"});
    check_train_refused(
        "--parallelism.pipeline_parallel_degree 2 "
        "--parallelism.pipeline_parallel_schedule ZBVZeroBubble "
        "--parallelism.pipeline_parallel_layers_per_stage 1",
        {"ZBVZeroBubble places exactly 2 stages on each rank (a V), but "
         "parallelism.pipeline_parallel_layers_per_stage 1 gives 4"});
    check_train_refused(
        "--parallelism.pipeline_parallel_degree 4 "
        "--parallelism.pipeline_parallel_schedule Interleaved1F1B "
        "--training.local_batch_size 9",
        {"parallelism.pipeline_parallel_schedule: Interleaved1F1B"});
    check_train_refused(
        "--parallelism.pipeline_parallel_degree 2",
        {"dp_shard -1 takes the rest of 1 ranks",
         "but pipeline_parallel_degree 2 × dp_replicate 1 × context_parallel_degree 1 × tp 1 = 2"});
  }

  TEST_CASE("census: float8 and activation checkpointing keys") {
    check_train_refused("--float8.recipe mxfp8", {"float8.recipe: unknown recipe 'mxfp8'"});
    check_train_refused("--activation_checkpoint.mode sometimes",
                        {"activation_checkpoint.mode: unknown mode 'sometimes'"});
    check_train_refused(
        "--activation_checkpoint.mode selective "
        "--activation_checkpoint.selective_ac_option 0",
        {"activation_checkpoint.selective_ac_option: expected a positive block "
         "frequency or 'op', got '0'"});
  }

  TEST_CASE("census: checkpoint keys and output folders") {
    check_train_refused("--checkpoint.interval 0",
                        {"checkpoint.interval: must be positive, got 0"});
    check_train_refused("--checkpoint.load_step -2",
                        {"checkpoint.load_step: must be -1 (latest) or a saved step, got -2"});
    // An empty folder name would put the outputs in the working directory.
    check_train_refused("--checkpoint.enable true --checkpoint.folder ''",
                        {"checkpoint.folder: is empty; name a folder"});
    check_train_refused("--checkpoint.enable true --job.dump_folder ''",
                        {"job.dump_folder: is empty; name a folder"});
    check_train_refused("--metrics.enable_tensorboard true --metrics.save_tb_folder ''",
                        {"metrics.save_tb_folder: is empty; name a folder"});
    check_train_refused("--metrics.jsonl /proc/titan/metrics.jsonl",
                        {"metrics.jsonl: cannot write '/proc/titan/metrics.jsonl'"});
    check_train_refused("--metrics.jsonl " + census_dir("jsonl_folder"),
                        {"metrics.jsonl: cannot write"});
    check_train_refused("--metrics.log_freq 0", {"metrics.log_freq: must be positive, got 0"});
  }

  TEST_CASE("census: data mixtures and validation sets and corpora not yet tokenized") {
    const std::string dir = census_dir("mixtures");
    auto sources = [](const std::string& list) {
      return "--data.path '' --data.sources '" + list + "'";
    };
    const std::string a = "{name: a, path: corpus/kjv.txt, weight: ";
    for (const std::string weight : {"-1", "0", ".nan", ".inf"}) {
      CAPTURE(weight);
      check_train_refused(sources("[" + a + weight + "}]"),
                          {"data.sources[0].weight: must be positive and finite", "source 'a'"});
    }
    check_train_refused(sources("[" + a + "1}, " + a + "2}]"),
                        {"data.sources[1].name: 'a' names two sources of data.sources"});
    check_train_refused(sources("[]"), {"data.sources: the list is empty"});
    check_train_refused("--data.path corpus/other.txt --data.sources '[" + a + "1}]'",
                        {"data.path: 'corpus/other.txt' is set beside data.sources"});
    check_train_refused(sources("[{name: a, path: corpus/kjv.txt}]"),
                        {"data.sources[0]: missing its weight"});
    check_train_refused(
        "--validation.enable true --validation.dataset_path corpus/kjv.txt "
        "--validation.sources '[{name: v, path: corpus/kjv.txt}]'",
        {"validation.dataset_path: 'corpus/kjv.txt' is set beside "
         "validation.sources"});
    check_train_refused(
        "--validation.enable true --validation.sources "
        "'[{name: v, path: corpus/kjv.txt}, {name: v, path: corpus/kjv.txt}]'",
        {"validation.sources[1].name: 'v' names two sources"});
    check_train_refused("--validation.enable true --validation.sources '[]'",
                        {"validation.sources: the list is empty"});
    // A corpus titan_tokenize reads is never trained on as its raw bytes.
    const std::string jsonl = write_text(dir + "/docs.jsonl", "{\"text\": \"a\"}\n");
    check_train_refused("--data.path " + jsonl,
                        {"data.path: '" + jsonl +
                             "' is JSON lines, which would be trained on as "
                             "raw bytes",
                         "titan_tokenize", dir + "/docs_tokens"});
    for (const std::string name : {"docs.jsonl.gz", "docs.jsonl.zst", "docs.parquet"}) {
      CAPTURE(name);
      const std::string path = write_text(dir + "/" + name, "not read");
      check_train_refused("--data.path " + path, {"would be trained on as raw bytes",
                                                  "tokenize it first with titan_tokenize"});
    }
    check_train_refused(sources("[" + a + "1}, {name: b, path: " + jsonl + ", weight: 1}]"),
                        {"data.sources[1].path: '" + jsonl + "' is JSON lines"});
    check_train_refused("--validation.enable true --validation.dataset_path " + jsonl,
                        {"validation.dataset_path: '" + jsonl + "' is JSON lines"});
  }

  TEST_CASE("census: data files and token files") {
    const std::string dir = census_dir("data");
    check_train_refused("--data.path ''", {"data.path: no data given"});
    check_train_refused("--data.path /dev/null", {"data.path: '/dev/null' is not a regular file"});
    check_train_refused("--data.format parquet", {"data.format: unknown format 'parquet'"});
    check_train_refused("--data.path " + dir + " --data.format text",
                        {"names .bin shards (a folder or a glob), but data.format is text"});

    const std::vector<uint32_t> tokens = ramp(2000, 200);
    auto path = [&](const std::string& name, const std::string& bytes) {
      return write_text(dir + "/" + name, bytes);
    };
    check_train_refused(
        "--data.path " + path("magic.bin", token_file("XXTOKENS", 1, 2, 2000, 258, tokens)),
        {"magic.bin' is not a titan token file (no TTTOKENS header)"});
    check_train_refused(
        "--data.path " + path("version.bin", token_file("TTTOKENS", 3, 2, 2000, 258, tokens)),
        {"is token file version 3; this titan_train reads versions 1 and 2"});
    check_train_refused(
        "--data.path " + path("width.bin", token_file("TTTOKENS", 1, 3, 2000, 258, tokens)),
        {"declares 3-byte tokens; the format holds 2 (uint16) or 4 (uint32)"});
    check_train_refused(
        "--data.path " + path("vocab0.bin", token_file("TTTOKENS", 1, 2, 2000, 0, tokens)),
        {"declares a vocabulary of 0 tokens"});
    check_train_refused("--data.path " + path("vocab_huge.bin", token_file("TTTOKENS", 1, 2, 2000,
                                                                           1ull << 40, tokens)),
                        {"declares a vocabulary of 1099511627776 tokens"});
    check_train_refused(
        "--data.path " + path("count.bin", token_file("TTTOKENS", 1, 2, 5, 258, tokens)),
        {"count.bin' is 4064 bytes but its header promises 5 tokens"});
    check_train_refused(
        "--data.path " + path("count_huge.bin", token_file("TTTOKENS", 1, 2, ~0ull, 258, tokens)),
        {"but its header promises 18446744073709551615 tokens"});
    check_train_refused("--data.path " + path("short.bin", "TTTOK"),
                        {"short.bin' is 5 bytes, shorter than a token file's 64-byte header"});
    // Found only when a window holding the id is read: set-up is done, no step is trained.
    check_train_refused("--training.seq_len 64 --data.path " +
                            path("outside.bin", token_file("TTTOKENS", 1, 2, 2000, 100, tokens)),
                        {"is outside the vocabulary its header declares (100)"}, Stdout::NoStep);
  }

  TEST_CASE("census: tokenizer.json files") {
    const std::string dir = census_dir("tokenizer");
    const std::string text = write_text(dir + "/text.txt", std::string(4000, 'a'));
    const std::string good = fixture_text("tiny_tokenizer.json");
    auto check_tokenizer = [&](const std::string& name, const std::string& json,
                               const std::vector<std::string>& fragments) {
      const std::string file = write_text(dir + "/" + name + ".json", json);
      std::vector<std::string> expected = fragments;
      expected.push_back("data.tokenizer_path: '" + file + "'");
      check_train_refused("--data.path " + text + " --data.tokenizer_path " + file, expected);
    };
    check_train_refused("--data.tokenizer_path " + dir + "/absent.json",
                        {"data.tokenizer_path: '", "absent.json': cannot open"});
    check_train_refused("--model.hf_assets_path " + dir,
                        {"model.hf_assets_path: '", "is a folder without a tokenizer.json"});
    check_tokenizer("not_json", "{\"model\": ", {": not JSON ("});
    check_tokenizer("unigram", edited(good, R"("type": "BPE")", R"("type": "Unigram")"),
                    {"model.type: 'Unigram' is not supported"});
    check_tokenizer("byte_fallback",
                    edited(good, R"("byte_fallback": false)", R"("byte_fallback": true)"),
                    {"model.byte_fallback: true"});
    check_tokenizer("merge_token", edited(good, R"("b c", "a b")", R"("q c", "a b")"),
                    {"its left token 'q' is not in model.vocab"});
    check_tokenizer("merge_spelling", edited(good, R"("b c", "a b")", R"("b c d", "a b")"),
                    {"'b c d' is not two tokens separated by one space"});
    check_tokenizer("id_range", edited(good, R"("x": 18)", R"("x": -3)"),
                    {"model.vocab: token 'x' has id -3, outside 0..16777215"});
    check_tokenizer("id_sparse", edited(good, R"("x": 18)", R"("x": 11111110)"),
                    {"ids must number the tokens nearly densely"});
    check_tokenizer("id_twice", edited(good, R"("x": 18)", R"("x": 17)"),
                    {"model.vocab: id 17 is given to both '-' and 'x'"});
    check_tokenizer("added_id", edited(good, R"("id": 21)", R"("id": 25)"),
                    {"has id 25, but Hugging Face's tokenizers gives it 21"});
    check_tokenizer("single_word",
                    edited(good, R"("content": "<s>x", "single_word": false)",
                           R"("content": "<s>x", "single_word": true)"),
                    {"added_tokens[2].single_word: true is not supported"});
    check_tokenizer("normalizer",
                    edited(good, R"("normalizer": null)", R"("normalizer": {"type": "NFC"})"),
                    {"normalizer: the normalizer 'NFC' is not supported"});
    check_tokenizer(
        "pre_tokenizer",
        edited(good, R"("pre_tokenizer": \{"type": "Sequence")",
               R"("pre_tokenizer": {"type": "Whitespace"}, "unused": {"type": "Sequence")"),
        {"the pre-tokenizer 'Whitespace' is not supported"});
    check_tokenizer("regex", edited(good, R"("Regex": "\(\?i)", R"("Regex": "((?i)"),
                    {"PCRE2 cannot compile the pattern"});
    check_tokenizer("regex_word", edited(good, R"("Regex": ")", R"("Regex": "\\w+|)"),
                    {"cannot match it as Hugging Face does"});
    check_tokenizer("decoder",
                    edited(good, R"("decoder": \{"type": "ByteLevel")",
                           R"("decoder": {"type": "WordPiece"}, "unused": {"type": "ByteLevel")"),
                    {"decoder: 'WordPiece' is not supported"});
    check_tokenizer("no_model", edited(good, R"("model": \{)", R"("modelx": {)"),
                    {"model: missing"});
    check_tokenizer("key_twice", edited(good, R"("x": 18)", R"("x": 18, "x": 22)"),
                    {": not JSON (the key \"x\" appears twice in model.vocab, at line "});
  }

  TEST_CASE("census: checkpoint folders and their files") {
    std::string step = copied_step("no_metadata");
    fs::remove(step + "/metadata.json");
    check_resume_refused(step, {"step-2/metadata.json: missing; the step folder is incomplete"},
                         Stdout::Empty, "--checkpoint.load_step 2");

    step = copied_step("not_json");
    write_text(step + "/metadata.json", "{\"format\": ");
    check_resume_refused(step, {"step-2/metadata.json: (whole file): not JSON"});

    step = copied_step("format");
    edit_file(step + "/metadata.json", "titan_train.sharded_checkpoint", "other");
    check_resume_refused(step, {"format: 'other', expected 'titan_train.sharded_checkpoint'"});
    step = copied_step("version");
    edit_file(step + "/metadata.json", R"("version": 1)", R"("version": 2)");
    check_resume_refused(step, {"version: 2: this titan_train reads version 1"});

    step = copied_step("field_missing");
    edit_file(step + "/metadata.json", R"("step": 2,)", "");
    check_resume_refused(step, {"(top level).step: missing"});
    step = copied_step("field_type");
    edit_file(step + "/metadata.json", R"("step": 2,)", R"("step": "2",)");
    check_resume_refused(step, {"(top level).step: expected an integer"});

    step = copied_step("negative");
    edit_file(step + "/metadata.json", R"("loader_samples_consumed": 8)",
              R"("loader_samples_consumed": -1)");
    check_resume_refused(step, {"loader_samples_consumed: -1 is out of range"});
    step = copied_step("overflow");
    edit_file(step + "/metadata.json", R"("optimizer_steps": 2)",
              R"("optimizer_steps": 9223372036854775808)");
    check_resume_refused(step, {"optimizer_steps: 9223372036854775808 overflows a 64-bit integer"});

    step = copied_step("renamed");
    edit_file(step + "/metadata.json", R"("step": 2,)", R"("step": 3,)");
    check_resume_refused(step, {"step: 3 but the folder is named step-2"});

    step = copied_step("piece_outside");
    edit_file(step + "/metadata.json", R"(("norm.weight": \{"dtype": "F32", "shape": )\[64\])",
              "$1[32]");
    check_resume_refused(step,
                         {"tensors.norm.weight.pieces[0]", "lies outside the tensor's shape [32]"});
    step = copied_step("byte_range");
    edit_file(step + "/metadata.json",
              R"(("norm.weight": \{[^\n]*\n[^\n]*"byte_range": )\[[0-9]+, [0-9]+)",
              "$1[0, 1000000000000");
    check_resume_refused(step,
                         {"byte_range: [0, 1000000000000) lies outside rank00000.safetensors"});
    step = copied_step("shared_bytes");
    // norm.weight's entry again under another name: two pieces on the same bytes.
    edit_file(step + "/metadata.json", R"((    "norm\.weight)(": \{[^\n]*\n[^\n]*\n))",
              "$1$2    \"norm.copy$2");
    check_resume_refused(step, {"overlap those of a piece of"});

    step = copied_step("dtype");
    edit_file(step + "/metadata.json", R"re(("norm.weight": \{"dtype": )"F32")re", R"($1"Q8")");
    check_resume_refused(step, {"tensors.norm.weight.dtype: unknown dtype 'Q8'"});
    step = copied_step("file_name");
    edit_file(step + "/metadata.json", R"("name": "rank00000.safetensors")",
              R"("name": "../rank00000.safetensors")");
    check_resume_refused(
        step, {"'../rank00000.safetensors' is not a plain file name in the step folder"});

    step = copied_step("file_missing");
    fs::remove(step + "/rank00000.safetensors");
    check_resume_refused(step,
                         {"rank00000.safetensors: missing (", "the checkpoint is incomplete"});
    step = copied_step("file_folder");
    fs::remove(step + "/rank00000.safetensors");
    fs::create_directories(step + "/rank00000.safetensors");
    check_resume_refused(step, {"rank00000.safetensors: not a regular file"});
    step = copied_step("truncated");
    fs::resize_file(step + "/rank00000.safetensors", 1000);
    check_resume_refused(step, {"rank00000.safetensors: 1000 bytes", "(truncated)"});

    // The checksum and the tensor list are read once the model is built to receive them.
    step = copied_step("corrupt");
    {
      std::fstream f(step + "/rank00000.safetensors",
                     std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(3000000);
      f.put('\x7f');
    }
    check_resume_refused(step, {"rank00000.safetensors: CRC32C", "the file is corrupt"},
                         Stdout::NoStep);
    // A key given twice: which of the two counts would be an accident of the parser.
    step = copied_step("key_twice");
    edit_file(step + "/metadata.json", R"("step": 2,)", R"("step": 2, "step": 3,)");
    check_resume_refused(step, {"metadata.json: (whole file): not JSON (the key \"step\" appears "
                                "twice in the top-level object, at line 4 column 3 (byte "});
    // A weight that is NaN behind a valid checksum (a run that diverged saved it): refused at
    // load, before the first step.
    step = copied_step("nan_weight");
    put_nan_with_valid_crc(step, 5);
    check_resume_refused(step,
                         {"rank00000.safetensors: norm.weight[64] holds NaN at [5]: the run had "
                          "diverged when it saved this step"},
                         Stdout::NoStep);
    step = copied_step("tensor_missing");
    edit_file(step + "/metadata.json", R"("norm.weight": \{)", R"("norm.weightx": {)");
    check_resume_refused(step,
                         {"no tensor norm.weight [64]; the checkpoint was saved for another model"},
                         Stdout::NoStep);

    // A Hugging Face folder given as a titan_train step folder.
    check_train_refused(
        kCensusSmall + "--checkpoint.initial_load_path " + saved_hf(),
        {"has a config.json but no metadata.json", "checkpoint.initial_load_in_hf true"});
  }

  TEST_CASE("census: Hugging Face folders") {
    std::string hf = copied_hf("no_config");
    fs::remove(hf + "/config.json");
    check_hf_refused(hf, {"has no config.json"});
    hf = copied_hf("config_not_json");
    write_text(hf + "/config.json", "{");
    check_hf_refused(hf, {"config.json': not valid JSON"});
    hf = copied_hf("config_differs");
    edit_file(hf + "/config.json", R"("rms_norm_eps": 1e-05)", R"("rms_norm_eps": 1e-06)");
    check_hf_refused(hf, {"does not match the model (1 difference: rms_norm_eps is 1e-06 but the "
                          "model's norm_eps is 1e-05)"});
    hf = copied_hf("config_missing");
    edit_file(hf + "/config.json", R"(  "hidden_size": 64,\n)", "");
    check_hf_refused(hf, {"hidden_size: missing"});
    hf = copied_hf("config_type");
    edit_file(hf + "/config.json", R"("hidden_size": 64)", R"("hidden_size": "64")");
    check_hf_refused(hf, {"hidden_size: expected a positive integer"});
    hf = copied_hf("model_type");
    edit_file(hf + "/config.json", R"("model_type": "llama")", R"("model_type": "mistral")");
    check_hf_refused(hf, {"model_type: is not"});
    hf = copied_hf("rope_type");
    edit_file(hf + "/config.json", R"("rope_type": "llama3")", R"("rope_type": "yarn")");
    check_hf_refused(hf, {"rope_scaling.rope_type: \"yarn\" is a RoPE titan_train does not "
                          "implement"});
    // transformers 5's layout: rope_parameters.
    hf = copied_hf("rope_parameters_type");
    edit_file(hf + "/config.json", R"(  "rope_theta": 500000.0,\n  "rope_scaling": \{)",
              R"(  "rope_parameters": {"rope_theta": 500000.0, )");
    edit_file(hf + "/config.json", R"("rope_type": "llama3")", R"("rope_type": "longrope")");
    check_hf_refused(hf, {"rope_parameters.rope_type: \"longrope\" is a RoPE titan_train does "
                          "not implement: it implements \"default\" and \"llama3\""});
    hf = copied_hf("layouts_disagree");
    edit_file(hf + "/config.json", R"(  "rope_theta": 500000.0,\n)",
              "  \"rope_theta\": 500000.0,\n  \"rope_parameters\": {\"rope_theta\": 10000.0, "
              "\"rope_type\": \"default\"},\n");
    check_hf_refused(hf, {"rope_theta is 500000.0 but rope_parameters.rope_theta is 10000.0: the "
                          "file holds RoPE in transformers 4's layout and in 5's, and they "
                          "disagree"});
    hf = copied_hf("dtype_disagree");
    edit_file(hf + "/config.json", R"("torch_dtype": "float32",)",
              R"("torch_dtype": "float32", "dtype": "bfloat16",)");
    check_hf_refused(hf, {"dtype is \"bfloat16\" but torch_dtype is \"float32\": the two "
                          "spellings (transformers 5's and 4's) disagree"});
    // A key given twice, in config.json, the index and a shard's header.
    hf = copied_hf("config_key_twice");
    edit_file(hf + "/config.json", R"("hidden_size": 64,)",
              R"("hidden_size": 64, "hidden_size": 32,)");
    check_hf_refused(hf, {"config.json': not valid JSON (the key \"hidden_size\" appears twice "
                          "in the top-level object, at line 5 column 3 (byte "});
    hf = copied_hf("index_key_twice");
    edit_file(hf + "/model.safetensors.index.json",
              R"(("model.norm.weight": "model-00001-of-00001.safetensors"))", "$1, $1");
    check_hf_refused(hf, {"model.safetensors.index.json': not valid JSON (the key "
                          "\"model.norm.weight\" appears twice in weight_map, at line "});
    hf = copied_hf("header_key_twice");
    edit_safetensors_header(hf + kShard, R"(("__metadata__":\{"format":"pt")\})",
                            R"($1,"format":"np"})");
    check_hf_refused(hf, {"the header is not valid JSON (the key \"format\" appears twice in "
                          "__metadata__, at line 1 column "});
    // A weight that is not finite.
    hf = copied_hf("inf_weight");
    put_float_bits(
        hf + kShard,
        safetensors_element_offset(hf + kShard, "model.layers.0.mlp.up_proj.weight", 3 * 64 + 17),
        0xFF800000u);
    check_train_refused(kCensusSmall +
                            "--checkpoint.initial_load_in_hf true "
                            "--checkpoint.initial_load_path " +
                            hf,
                        {"model-00001-of-00001.safetensors': "
                         "model.layers.0.mlp.up_proj.weight[128, 64] holds -inf at [3, 17]; a "
                         "model with a weight that is not finite computes nothing but NaN"},
                        Stdout::NoStep);
    check_tool_refused("titan_generate",
                       "--model " + hf + " --prompt 'In the beginning' < /dev/null",
                       {"model.layers.0.mlp.up_proj.weight[128, 64] holds -inf at [3, 17]"});

    hf = copied_hf("no_weights");
    fs::remove(hf + "/model.safetensors.index.json");
    fs::remove(hf + kShard);
    check_hf_refused(hf, {"has neither model.safetensors.index.json nor model.safetensors"});
    hf = copied_hf("index_not_json");
    write_text(hf + "/model.safetensors.index.json", "[");
    check_hf_refused(hf, {"model.safetensors.index.json': not valid JSON"});
    hf = copied_hf("shard_name");
    edit_file(hf + "/model.safetensors.index.json",
              R"("model.norm.weight": "model-00001-of-00001.safetensors")",
              R"("model.norm.weight": "../x.safetensors")");
    check_hf_refused(hf, {"which is not a plain file name in the folder"});
    hf = copied_hf("shard_missing");
    fs::remove(hf + kShard);
    check_hf_refused(hf, {"which is missing from the folder"});
    hf = copied_hf("tensor_missing");
    edit_file(hf + "/model.safetensors.index.json",
              R"(    "lm_head.weight": "model-00001-of-00001.safetensors",\n)", "");
    check_hf_refused(hf, {"lacks tensors the model needs: lm_head.weight"});

    hf = copied_hf("truncated");
    fs::resize_file(hf + kShard, 100000);
    check_hf_refused(hf, {"past its end", "truncated file?"});
    hf = copied_hf("not_safetensors");
    write_text(hf + kShard, std::string(5000, '\xab'));
    check_hf_refused(hf, {"runs past the end of the file", "not a safetensors file"});
    hf = copied_hf("dtype");
    edit_safetensors_header(hf + kShard, R"re(("model.norm.weight":\{"dtype":)"F32")re",
                            R"($1"I32")");
    check_hf_refused(hf, {"model.norm.weight is i32", "loads float32 and bfloat16 weights"});
    hf = copied_hf("shape");
    edit_safetensors_header(hf + kShard, R"(("model.norm.weight":\{"dtype":"F32","shape":)\[64\])",
                            "$1[32,2]");
    check_hf_refused(hf, {"model.norm.weight is [32, 2] but the model expects [64]",
                          "config.json and the weights disagree"});
  }

  TEST_CASE("census: titan_convert arguments and checkpoints") {
    const std::string dir = census_dir("convert");
    const std::string from = "--checkpoint " + saved_step() + " ";
    const std::string a_file = write_text(dir + "/a_file", "x");
    check_refused("titan_convert", "--to-hf " + dir + "/out", {"--checkpoint is required"});
    check_refused("titan_convert", from + "--to-hf " + dir + "/out --dtype fp16",
                  {"--dtype: fp16 not in {float32,bfloat16}"});
    check_refused("titan_convert", from + "--to-hf " + dir + "/out extra", {"not expected: extra"});
    check_refused("titan_convert", from + "--to-hf " + dir + "/out --parts 0",
                  {"--parts 0: give a positive number of files"});
    check_refused("titan_convert", "--checkpoint " + dir + "/absent --to-hf " + dir + "/out",
                  {"absent' does not exist; name a step folder of a checkpoint"});
    check_refused("titan_convert", "--checkpoint " + a_file + " --to-hf " + dir + "/out",
                  {"a_file' is a file; name a step folder"});
    // The export replaces its folder: never a file, the checkpoint, or a folder of other things.
    check_refused("titan_convert", from + "--to-hf " + a_file,
                  {"--to-hf: '" + a_file + "' is a file"});
    CHECK(read_file(a_file) == "x");
    check_refused("titan_convert", from + "--to-hf ''", {"--to-hf: is empty"});
    check_refused("titan_convert", from + "--to-hf " + saved_step(),
                  {"holds 'metadata.json', so it is not an earlier Hugging Face export"});
    CHECK(fs::exists(saved_step() + "/metadata.json"));
    check_refused("titan_convert", from + "--to-hf /proc/titan_hf",
                  {"cannot create '/proc/titan_hf.tmp'", "export into a folder you can write"});
    const std::string corrupt = copied_step("convert_corrupt");
    {
      std::fstream f(corrupt + "/rank00000.safetensors",
                     std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(3000000);
      f.put('\x7f');
    }
    check_refused("titan_convert", "--checkpoint " + corrupt + " --to-hf " + dir + "/out",
                  {"rank00000.safetensors: CRC32C", "the file is corrupt"});
    CHECK_FALSE(fs::exists(dir + "/out"));
  }

  TEST_CASE("census: titan_generate arguments and prompts") {
    const std::string dir = census_dir("generate");
    const std::string model = "--model " + saved_step() + " ";
    const std::string prompt = "--prompt 'In the beginning' ";
    auto refused = [](const std::string& args, const std::vector<std::string>& fragments) {
      check_tool_refused("titan_generate", args + " < /dev/null", fragments);
    };
    // What --model names.
    refused("--model " + dir + "/absent " + prompt,
            {"absent' does not exist; name a step folder (", "or a Hugging Face Llama folder"});
    fs::create_directories(dir + "/neither");
    write_text(dir + "/neither/notes.txt", "x");
    refused("--model " + dir + "/neither " + prompt,
            {"holds neither metadata.json (a titan_train step folder) nor config.json"});
    // A tokenizer with more tokens than the model has rows: a model of 200 tokens trained on a
    // token file, and the byte tokenizer's 258.
    const std::string tokens =
        write_text(dir + "/tokens.bin", token_file("TTTOKENS", 1, 2, 600, 200, ramp(600, 200)));
    const ProcessResult small_vocab = run_process(
        binary_path("titan_train") + " " + kCensusDebug + kCensusSmall +
        "--model.vocab_size 200 --data.path " + tokens +
        " --training.steps 1 --checkpoint.enable true --job.dump_folder " + dir + "/v200");
    REQUIRE_MESSAGE(small_vocab.exit_code == 0, small_vocab.err);
    refused("--model " + dir + "/v200/checkpoint/step-1 " + prompt,
            {"--tokenizer: byte tokenizer has 258 tokens but the model's vocabulary",
             "has 200; give the tokenizer the model was trained with"});
    // Prompts: longer than the sequence limit (the model's, and --max-seq-len), none at all, a
    // bad JSON line.
    write_text(dir + "/long.txt", std::string(131072, 'a') + "\n");
    refused(model + "--prompts " + dir + "/long.txt",
            {"prompt 1 is 131073 tokens",
             "the model's sequence limit is 131072 positions (its max_position_embeddings)"});
    refused(model + prompt + "--max-seq-len 8",
            {"prompt 1 is 17 tokens", "which leaves no room for a new token",
             "or raise --max-seq-len"});
    write_text(dir + "/empty.txt", "\n\n");
    refused(model + "--prompts " + dir + "/empty.txt",
            {"holds no prompt (no line that is not empty)"});
    write_text(dir + "/prompts.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\n");
    refused(model + "--prompts " + dir + "/prompts.jsonl",
            {"prompts.jsonl' line 2: invalid JSON", "--field names another"});
    // Sampling and generation flags.
    refused(model + prompt + "--top-p 1.5", {"--top-p 1.5 is outside (0, 1]"});
    refused(model + prompt + "--top-p 0", {"--top-p 0 is outside (0, 1]"});
    refused(model + prompt + "--temperature -0.5",
            {"--temperature -0.5: give 0 for greedy decoding"});
    refused(model + prompt + "--top-k -1", {"--top-k -1: give 0 (every token) or a positive k"});
    refused(model + prompt + "--max-new-tokens 0", {"--max-new-tokens 0: give 1 or more tokens"});
    // Sizes are 1 or more: 0 is refused, never taken as the default.
    refused(model + prompt + "--batch-size 0",
            {"--batch-size 0: give a positive number of prompts per batch, or leave the flag out "
             "for the default"});
    refused(model + prompt + "--max-seq-len 0",
            {"--max-seq-len 0: give at least 2 positions",
             "or leave the flag out for the model's max_position_embeddings"});
    refused(model + prompt + "--stop ''", {"--stop: is empty"});
    refused(model + prompt + "--dtype fp16", {"--dtype: unknown dtype 'fp16'"});
    refused(model + prompt + "--temprature", {"not expected: --temprature", "(see --help)"});
    refused(model + prompt + "--jsonl /proc/titan.jsonl",
            {"--jsonl: cannot write '/proc/titan.jsonl'"});
    refused(model + prompt + "--cuda-graph on",
            {"--cuda-graph on with --device cpu: a CUDA graph replays GPU kernels",
             "use --device cuda, or leave --cuda-graph off"});
    refused(model + prompt + "--cuda-graph yes",
            {"--cuda-graph: unknown value 'yes'; use on or off"});
    if (query_cuda_devices().devices.empty()) {
      refused(model + prompt + "--device cuda",
              {"--device: 'cuda' asked for a GPU but none is usable"});
    }
    // --eval.
    write_text(dir + "/short.txt", "In the beginning\n");
    refused(model + "--eval " + dir + "/short.txt --eval-seq-len 8",
            {"fewer than one batch of 4 sequences"});
    refused(model + "--eval " + dir + "/short.txt " + prompt,
            {"with prompts: --eval computes a loss and generates nothing"});
    refused(
        model + "--eval " + dir + "/short.txt --eval-attention-mask document",
        {"--eval-attention-mask: unknown attention mask 'document'", "use causal or block_causal"});
    // --tasks: a line that is not JSON, a label past the choices, --limit 0, --task-scores
    // alone; each before the weights are read.
    write_text(dir + "/tasks.jsonl",
               "{\"context\": \"a\", \"choices\": [\" b\"], \"label\": 0}\n{\"context\": \"a\"\n");
    refused(model + "--tasks " + dir + "/tasks.jsonl",
            {"--tasks '", "tasks.jsonl' line 2: not JSON", "each line must be one JSON object"});
    write_text(dir + "/label.jsonl",
               "{\"goal\": \"a\", \"sol1\": \"b\", \"sol2\": \"c\", \"label\": 5}\n");
    refused(model + "--tasks " + dir + "/label.jsonl",
            {"label.jsonl' line 1: field \"label\" 5 is out of range: the item has 2 choices",
             "a piqa item holds goal, sol1, sol2, label"});
    refused(model + "--tasks " + dir + "/label.jsonl --limit 0",
            {"--limit 0: give a positive number of items per task"});
    refused(model + prompt + "--task-scores " + dir + "/scores.jsonl",
            {"without --tasks: it writes the scores of task items"});
  }

  TEST_CASE("census: titan_tokenize flags") {
    const std::string dir = census_dir("tokenize");
    const std::string good = write_text(dir + "/good.txt", "a line\n") + " " + dir + "/out";
    check_refused("titan_tokenize", "--threads 100000 " + good,
                  {"--threads 100000 is more than 1024"});
    check_refused("titan_tokenize", "--batch-bytes -1 " + good,
                  {"--batch-bytes -1; give a positive byte count"});
    check_refused("titan_tokenize", "--progress-seconds nan " + good,
                  {"--progress-seconds nan is not a number of seconds"});
    check_refused("titan_tokenize", "--field '' " + good, {"--field is empty"});
  }

  TEST_CASE("census: environment variables") {
    check_train_refused("", {"TITAN_DEVICE_MEMORY_LIMIT_MB: 'abc' is not a positive number of MiB"},
                        Stdout::Empty, "TITAN_DEVICE_MEMORY_LIMIT_MB=abc ");
    check_train_refused("", {"TITAN_DEVICE_MEMORY_LIMIT_MB: '0' is not a positive number of MiB"},
                        Stdout::Empty, "TITAN_DEVICE_MEMORY_LIMIT_MB=0 ");
    check_train_refused("",
                        {"TITAN_DEVICE_MEMORY_LIMIT_MB: '99999999999999999999' is not a positive "
                         "number of MiB"},
                        Stdout::Empty, "TITAN_DEVICE_MEMORY_LIMIT_MB=99999999999999999999 ");
    check_train_refused("", {"TITAN_FAULT_INJECT: 'abc'"}, Stdout::Empty,
                        "TITAN_FAULT_INJECT=abc ");
    // A rank past int (it wrapped through sscanf's %d and the fault never came), an unknown kind.
    check_train_refused("", {"rank '99999999999' is not a world rank or *"}, Stdout::Empty,
                        "TITAN_FAULT_INJECT=99999999999:3 ");
    check_train_refused("", {"TITAN_FAULT_INJECT: '1:3:boom': unknown kind 'boom'"}, Stdout::Empty,
                        "TITAN_FAULT_INJECT=1:3:boom ");
    // OpenBLAS reads "abc" as 0 and takes every core; the log said "0 GEMM threads".
    check_train_refused("", {"OPENBLAS_NUM_THREADS: 'abc' is not a positive number of threads"},
                        Stdout::Empty, "OPENBLAS_NUM_THREADS=abc ");
    check_train_refused("", {"OPENBLAS_NUM_THREADS: '0' is not a positive number of threads"},
                        Stdout::Empty, "OPENBLAS_NUM_THREADS=0 ");
  }

  TEST_CASE("census: plan flags") {
    // titan_train --plan: a device not in the table, a world the configured mesh cannot factor,
    // a world that is no number of ranks.
    check_train_refused("--plan --plan-device a100",
                        {"--plan-device: unknown device 'a100'; use one of h100, h200, b200, cpu"});
    check_train_refused("--plan --plan-world 3 --parallelism.tp 2",
                        {"--plan-world 3: parallelism: dp_shard -1 takes the rest of 3 ranks"});
    check_train_refused("--plan-world 0",
                        {"--plan-world: must be a positive number of ranks, got 0"});
    // The plan refuses what the trainer would: a tp that does not divide the heads.
    check_train_refused("--plan --plan-world 32 --parallelism.tp 32",
                        {"parallelism.tp: 32 does not divide the model's n_heads (16)"});
  }

  TEST_CASE("census: memory and overflow checks before allocation") {
    // Tokens per micro-batch past int64 (a segmentation fault, then exit 1 after set-up, before).
    check_train_refused("--training.local_batch_size 4611686018427387904 --training.seq_len 4",
                        {"× seq_len 4 × dp 1 overflow 64 bits"});
    // Activations of terabytes, found before the model is allocated, with what to change.
    check_train_refused("--training.local_batch_size 4096 --training.seq_len 8192",
                        {"GiB of activations (activation_checkpoint.mode none)",
                         "set activation_checkpoint.mode full"});
    // Layers whose weights outgrow the machine: refused before the plan describes every layer
    // (std::bad_alloc and exit 1, before).
    check_train_refused("--model.n_layers 100000000",
                        {"model.n_layers: 100000000 layers of 8.52e+05 parameters each",
                         "use fewer layers"});
    // Dims whose parameter count wraps past int64 (exit 1 from vector::reserve or a negative
    // dimension, before).
    for (const char* dim :
         {"--model.n_layers 9223372036854775807", "--model.vocab_size 9223372036854775807",
          "--model.ffn_dim 9223372036854775807"}) {
      check_train_refused(dim, {"give more than 2^63 parameters"});
    }
    check_train_refused(
        "--training.skip_nonfinite_steps -1",
        {"training.skip_nonfinite_steps: must be 0 (stop at the first NaN/Inf step)"});
    check_train_refused(
        "--validation.enable true --validation.dataset_path corpus/kjv.txt "
        "--validation.steps 9223372036854775807",
        {"validation.steps: 9223372036854775807 batches of 4 sequences"});
  }
}

TEST_SUITE("fast ranks=2") {
  TEST_CASE("census mpi: a validation batch whose tokens tp does not split") {
    const ProcessResult r = run_process(
        mpirun_launcher(2) + binary_path("titan_train") + " " + kCensusDebug +
        "--parallelism.tp 2 --validation.enable true --validation.dataset_path corpus/kjv.txt "
        "--validation.local_batch_size 1 --validation.seq_len 63");
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.error_lines() == 1);
    CHECK(r.err.find("validation.local_batch_size: 1 × seq_len 63 = 63 tokens per validation batch "
                     "do not split into tp 2 sequence shards") != std::string::npos);
    CHECK(r.out.empty());
  }
}
