// LoRA (lora.rank, lora.alpha, lora.targets) end to end: a LoRA run started from a base
// model's checkpoint trains its adapters and nothing else — every base weight ends bit-identical,
// with no optimizer state — and tracks one rank on FSDP × tp, a pipeline and context
// parallelism; exported merged (titan_convert --merge-lora) or as PEFT adapters (--to-peft) over
// the base model's Hugging Face folder, PyTorch computes its validation loss; bad settings and
// mismatched checkpoints are refused with one line.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "data/token_file.h"
#include "support/hf_reference.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/tensor_testing.h"
#include "support/training_run.h"

using namespace titan;
using namespace titan::testing;
namespace fs = std::filesystem;

// Named, so that a unity build's other test files, with their own anonymous helpers, do not clash.
namespace lora_training_test {

constexpr const char* kScratch = "lora_training";
// Rank 4 on the attention's and the feed-forward's input linears, the fused ones included.
constexpr const char* kLora =
    " --lora.rank 4 --lora.alpha 32 --lora.targets '[wqkv, wo, w13]' --optimizer.lr 0.01"
    " --lr_scheduler.warmup_steps 1";
constexpr int kSteps = 6;

std::string dump_for(const std::string& name) {
  const std::string dump = scratch_dir(kScratch) + "/" + name;
  fs::remove_all(dump);
  return dump;
}

// A base model trained one step and saved (and exported to HF, as checkpoint.last_save_in_hf
// does): the model every LoRA run here starts from.
std::string base_checkpoint(const std::string& name) {
  const std::string dump = dump_for(name);
  train_debug_model(kScratch, name,
                    "--training.steps 1 --training.seq_len 64 --training.local_batch_size 8"
                    " --checkpoint.enable true --checkpoint.interval 1"
                    " --checkpoint.last_save_in_hf true --job.dump_folder " +
                        dump);
  return dump + "/checkpoint";
}

// kSteps LoRA steps of 8 sequences of 64 tokens from `base` (a step folder), saved at the end.
TrainingRun lora_run(const std::string& name, const std::string& base, int ranks,
                     const std::string& flags) {
  const TrainingRun run = train_debug_model(
      kScratch, name,
      "--training.steps " + std::to_string(kSteps) +
          " --training.seq_len 64 --training.global_batch_size 8 --checkpoint.enable true"
          " --checkpoint.interval " + std::to_string(kSteps) +
          " --checkpoint.initial_load_path " + base +
          " --checkpoint.initial_load_model_only true --job.dump_folder " + dump_for(name) + kLora +
          " " + flags,
      ranks == 1 ? "" : mpirun_launcher(ranks));
  REQUIRE_MESSAGE(run.losses.size() == static_cast<size_t>(kSteps),
                  name << ": " << run.losses.size() << " steps logged");
  return run;
}

// Tensor `name` of a step folder, whole, as f32.
Tensor read_whole(const checkpoint::CheckpointReader& reader, const std::string& name) {
  const Shape shape = reader.metadata().tensors.at(name).shape;
  const int64_t rows = shape[0], cols = shape.ndim() == 2 ? shape[1] : 1;
  Tensor t = Tensor::empty({rows, cols}, DType::F32);
  reader.read_region(name, 0, rows, 0, cols, t);
  return t;
}

bool is_adapter(const std::string& name) { return name.find(".lora_") != std::string::npos; }

// The LoRA run's checkpoint against the base's: the base weights bit-identical and without
// optimizer state, every adapter factor with both moments, every B grown from zero.
void check_only_adapters_trained(const std::string& base_step, const std::string& lora_step) {
  const checkpoint::CheckpointReader base(base_step), lora(lora_step);
  int base_weights = 0, adapters = 0;
  for (const auto& [name, stored] : base.metadata().tensors) {
    if (name.find(".exp_avg") != std::string::npos) continue;
    CAPTURE(name);
    ++base_weights;
    const Tensor before = read_whole(base, name), after = read_whole(lora, name);
    CHECK(bitwise_equal(before, after));
    CHECK_FALSE(lora.contains(name + ".exp_avg"));
    CHECK_FALSE(lora.contains(name + ".exp_avg_sq"));
  }
  for (const auto& [name, stored] : lora.metadata().tensors) {
    if (!is_adapter(name) || name.find(".exp_avg") != std::string::npos) continue;
    CAPTURE(name);
    ++adapters;
    CHECK(lora.contains(name + ".exp_avg"));
    CHECK(lora.contains(name + ".exp_avg_sq"));
    if (name.find(".lora_b.") != std::string::npos) {
      const Tensor b = read_whole(lora, name);
      double largest = 0;
      for (int64_t i = 0; i < b.numel(); ++i) largest = std::max(largest, std::abs(double(b.data<float>()[i])));
      CHECK(largest > 0);
    }
  }
  // debugmodel: 6 blocks × 6 weights, the embedding, the final norm and the output; A and B of
  // wqkv, wo and w13 in each block.
  CHECK(base_weights == 6 * 6 + 3);
  CHECK(adapters == 6 * 3 * 2);
}

TEST_SUITE("check ranks=4") {
  TEST_CASE("LoRA: only the adapters train and mesh (1 2 2) and async tp 2 and pp 2 and cp 2 track one rank") {
    const std::string base = base_checkpoint("base") + "/step-1";
    const TrainingRun reference = lora_run("one_rank", base, 1, "--training.local_batch_size 8");
    CHECK(reference.losses.back() < reference.losses.front());
    check_only_adapters_trained(base, scratch_dir(kScratch) + "/one_rank/checkpoint/step-6");

    // FSDP shards the frozen weights for the forward and reduces the adapters' gradients alone;
    // tp slices B's rows with a column-parallel W's, A's columns with a row-parallel W's.
    const TrainingRun mesh = lora_run("mesh_1_2_2", base, 4,
                                      "--parallelism.dp_shard 2 --parallelism.tp 2"
                                      " --training.local_batch_size 4");
    check_losses_track("LoRA mesh (1,2,2)", mesh.losses, reference.losses, 1e-4);
    check_only_adapters_trained(base, scratch_dir(kScratch) + "/mesh_1_2_2/checkpoint/step-6");
    const TrainingRun async_tp = lora_run("async_tp_2", base, 2,
                                          "--parallelism.dp_shard 1 --parallelism.tp 2"
                                          " --parallelism.enable_async_tensor_parallel true"
                                          " --training.local_batch_size 8");
    check_losses_track("LoRA async tp 2", async_tp.losses, reference.losses, 1e-4);
    // The zero-bubble V splits every backward: a frozen linear has no weight GEMM to defer.
    const TrainingRun pp = lora_run("pp_2_zbv", base, 2,
                                    "--parallelism.dp_shard 1 --parallelism.pipeline_parallel_degree 2"
                                    " --parallelism.pipeline_parallel_schedule ZBVZeroBubble"
                                    " --training.local_batch_size 8");
    check_losses_track("LoRA pp 2 ZBVZeroBubble", pp.losses, reference.losses, 1e-4);
    const TrainingRun cp = lora_run("cp_2", base, 2,
                                    "--parallelism.dp_shard 1 --parallelism.context_parallel_degree 2"
                                    " --training.local_batch_size 8");
    check_losses_track("LoRA cp 2", cp.losses, reference.losses, 1e-4);
  }
}

TEST_SUITE("check") {
  TEST_CASE("LoRA under FP8 tensorwise: the base stays frozen and the loss follows high precision within 1%") {
    // W's output and grad-input GEMMs run in FP8; the adapters' small GEMMs and their gradients
    // stay in high precision, and W's frozen master copy is never written.
    const std::string base = base_checkpoint("fp8_base") + "/step-1";
    const TrainingRun high = lora_run("fp8_reference", base, 1, "--training.local_batch_size 8");
    const TrainingRun fp8 = lora_run("fp8_tensorwise", base, 1,
                                     "--training.local_batch_size 8 --float8.enabled true");
    check_losses_track("LoRA FP8 tensorwise", fp8.losses, high.losses, 1e-2);
    CHECK(fp8.losses.back() < fp8.losses.front());
    check_only_adapters_trained(base, scratch_dir(kScratch) + "/fp8_tensorwise/checkpoint/step-6");
  }
}

TEST_SUITE("check torch") {
  TEST_CASE("LoRA: PyTorch computes the validation loss of the merged export and of the PEFT adapters") {
    const std::string dir = dump_for("export");
    fs::create_directories(dir);
    const int S = 32, B = 2;
    std::vector<int32_t> tokens;
    {
      std::ifstream in(source_path("corpus/kjv.txt"), std::ios::binary);
      in.seekg(100000);
      for (int i = 0; i < B * S + 1; ++i) tokens.push_back(in.get());
    }
    titan::data::write_token_file(dir + "/held_out.bin", tokens, 256, 2);
    {
      std::ofstream txt(dir + "/held_out.txt");
      for (int32_t t : tokens) txt << t << ' ';
    }
    const std::string base = base_checkpoint("export_base");
    lora_run("export_lora", base + "/step-1", 1,
             "--training.local_batch_size 8 --validation.enable true --validation.freq " +
                 std::to_string(kSteps) +
                 " --validation.steps 1 --validation.seq_len 32 --validation.local_batch_size 2"
                 " --validation.dataset_path " + dir + "/held_out.bin");
    const std::vector<std::map<std::string, double>> lines =
        read_metrics_jsonl(scratch_dir(kScratch) + "/export_lora.jsonl");
    REQUIRE(lines.size() == static_cast<size_t>(kSteps));
    REQUIRE(lines.back().count("val_loss") == 1);
    const double val_loss = lines.back().at("val_loss");

    const std::string lora_checkpoint = scratch_dir(kScratch) + "/export_lora/checkpoint";
    const std::string convert = binary_path("titan_convert") + " --checkpoint " + lora_checkpoint;
    const ProcessResult merged = run_process(convert + " --merge-lora --to-hf " + dir + "/merged");
    REQUIRE_MESSAGE(merged.exit_code == 0, merged.err);
    const ProcessResult peft = run_process(convert + " --to-peft " + dir + "/peft");
    REQUIRE_MESSAGE(peft.exit_code == 0, peft.err);

    // The merged folder is a plain Llama: no adapter tensors in it.
    std::string headers;
    for (const auto& entry : fs::directory_iterator(dir + "/merged")) {
      if (entry.path().extension() == ".safetensors") headers += read_file(entry.path().string());
    }
    CHECK(headers.find("lora") == std::string::npos);
    // PEFT's own names and settings.
    const std::string config = read_file(dir + "/peft/adapter_config.json");
    CHECK(config.find("\"peft_type\": \"LORA\"") != std::string::npos);
    CHECK(config.find("\"r\": 4") != std::string::npos);
    CHECK(config.find("\"lora_alpha\": 32") != std::string::npos);
    CHECK(config.find("\"gate_proj\"") != std::string::npos);
    CHECK(config.find("\"down_proj\"") == std::string::npos);
    const std::string adapters = read_file(dir + "/peft/adapter_model.safetensors");
    CHECK(adapters.find("base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight") !=
          std::string::npos);
    CHECK(adapters.find("base_model.model.model.layers.5.mlp.up_proj.lora_A.weight") !=
          std::string::npos);

    const double torch_merged = hf_reference_loss(dir + "/merged", dir + "/held_out.txt", S, B);
    const double torch_peft =
        hf_reference_loss(base + "/hf-step-1", dir + "/held_out.txt", S, B, dir + "/peft");
    const double torch_base = hf_reference_loss(base + "/hf-step-1", dir + "/held_out.txt", S, B);
    MESSAGE("LoRA: titan_train val_loss ", val_loss, ", PyTorch on the merged export ", torch_merged,
            ", on the base with the PEFT adapters ", torch_peft, ", on the base alone ", torch_base);
    CHECK(std::abs(val_loss - torch_merged) <= 1e-5 * std::abs(torch_merged));
    CHECK(std::abs(val_loss - torch_peft) <= 1e-5 * std::abs(torch_peft));
    // The adapters changed the model.
    CHECK(std::abs(val_loss - torch_base) > 1e-3);
  }
}

TEST_SUITE("check") {
  TEST_CASE("LoRA: bad settings and a base checkpoint to resume and adapters of another rank are refused") {
    check_train_rejected("--lora.rank 4 --lora.targets '[wqkv, lm_head]'",
                         {"lora.targets", "'lm_head'", "wqkv, wo, w13, w2"});
    check_train_rejected("--lora.rank 4 --lora.dropout 0.1", {"lora.dropout", "0.1", "set it to 0"});
    check_train_rejected("--lora.rank -1", {"lora.rank", "-1"});

    const std::string base = base_checkpoint("refusals_base");
    // Resuming the base run's folder with LoRA on: its optimizer has no adapters' state.
    const ProcessResult resume = run_process(
        binary_path("titan_train") + " --config " + source_path("configs/debug_model.yaml") +
        " --training.steps 2 --checkpoint.enable true --job.dump_folder " +
        scratch_dir(kScratch) + "/refusals_base --lora.rank 4");
    CHECK(resume.exit_code == 2);
    CHECK_MESSAGE(resume.err.find("holds a model without LoRA adapters") != std::string::npos,
                  resume.err);
    CHECK_MESSAGE(resume.err.find("--checkpoint.initial_load_model_only true") != std::string::npos,
                  resume.err);

    // A LoRA checkpoint, then a run of another rank from it.
    const std::string dump = dump_for("refusals_lora");
    train_debug_model(kScratch, "refusals_lora",
                      "--training.steps 1 --training.seq_len 64 --checkpoint.enable true"
                      " --checkpoint.interval 1 --checkpoint.initial_load_path " + base +
                          "/step-1 --job.dump_folder " + dump + " --lora.rank 4");
    check_train_rejected("--lora.rank 8 --checkpoint.initial_load_path " + dump + "/checkpoint/step-1",
                         {"LoRA adapters rank 4 on wqkv,wo (this run: rank 8 on wqkv,wo)",
                          "lora.* settings"});

    // titan_convert: a LoRA checkpoint is no plain HF folder; a base one has no adapters.
    const std::string convert = binary_path("titan_convert") + " --checkpoint ";
    for (const auto& [args, fragment] : std::vector<std::pair<std::string, std::string>>{
             {dump + "/checkpoint --to-hf " + dump + "/hf", "add --merge-lora"},
             {base + " --merge-lora --to-hf " + dump + "/hf", "holds no LoRA adapters"},
             {base + " --to-peft " + dump + "/peft", "holds no LoRA adapters"}}) {
      const ProcessResult r = run_process(convert + args);
      CHECK_MESSAGE(r.exit_code == 2, args, ": ", r.err);
      CHECK_MESSAGE(r.err_lines().size() == 1, args, ": ", r.err);
      CHECK_MESSAGE(r.err.find(fragment) != std::string::npos, args, ": ", r.err);
    }
    CHECK_FALSE(fs::exists(dump + "/hf"));
    CHECK_FALSE(fs::exists(dump + "/peft"));
  }
}

}  // namespace lora_training_test
