// Tied embeddings (model.tie_word_embeddings, the Llama 3.2 flavors) end to end: the tied debug
// model on every mesh tracks one rank as the untied one does, and a pipeline's two copies of
// the weight end its run bit-identical; exported, the folder is a tied Hugging Face Llama (no
// lm_head) whose PyTorch loss is titan_train's; a tied checkpoint or folder refuses an untied
// model and the reverse; the Llama 3.2 flavors' plans.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "support/hf_reference.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan::testing;
namespace fs = std::filesystem;

// Named, so that a unity build's other test files, with their own anonymous helpers, do not clash.
namespace tied_embeddings_test {

constexpr const char* kScratch = "tied_embeddings";
constexpr const char* kTied = " --model.tie_word_embeddings true";
constexpr int kSteps = 20;

std::string dump_for(const std::string& name) {
  const std::string dump = scratch_dir(kScratch) + "/" + name;
  fs::remove_all(dump);
  return dump;
}

// 20 steps of 8 sequences of 64 tokens of the tied debug model.
TrainingRun tied_run(const std::string& name, int ranks, const std::string& flags) {
  const TrainingRun run = train_debug_model(
      kScratch, name,
      "--training.steps " + std::to_string(kSteps) +
          " --training.seq_len 64 --training.global_batch_size 8 --job.dump_folder " +
          dump_for(name) + kTied + " " + flags,
      ranks == 1 ? "" : mpirun_launcher(ranks));
  REQUIRE_MESSAGE(run.losses.size() == static_cast<size_t>(kSteps),
                  name << ": " << run.losses.size() << " steps logged");
  return run;
}

void check_tracks(const std::string& name, const std::vector<double>& got,
                  const std::vector<double>& reference) {
  check_losses_track(name + " tied", got, reference, 1e-3);
}

// A pipeline run's log says its two copies ended bit-identical.
void check_copies_identical(const std::string& name, const TrainingRun& run) {
  const std::string out = run.process.out + run.process.err;
  CHECK_MESSAGE(out.find("tok_embeddings.weight and the last stage's copy are bit-identical") !=
                    std::string::npos,
                name << ": no line saying the copies are bit-identical");
  CHECK(out.find("DIFFERENT") == std::string::npos);
}


TEST_SUITE("check ranks=4") {
  TEST_CASE("tied embeddings: mesh (1 2 2) and tp 2 and pp 2 and cp 2 track one rank") {
    const std::vector<double> reference = tied_run("one_rank", 1, "--training.local_batch_size 8").losses;
    CHECK(reference.back() < reference.front());
    // FSDP keeps the tied weight gathered from the embedding to the head's backward and reduces
    // both gradients at once; tp's vocab-parallel embedding and column-parallel output share
    // the rows.
    check_tracks("mesh (1,2,2)",
                 tied_run("mesh_1_2_2", 4,
                          "--parallelism.dp_shard 2 --parallelism.tp 2 --training.local_batch_size 4")
                     .losses,
                 reference);
    check_tracks("tp 2",
                 tied_run("tp_2", 2, "--parallelism.dp_shard 1 --parallelism.tp 2"
                                     " --training.local_batch_size 8")
                     .losses,
                 reference);
    // The first and last stages on two pp ranks (1F1B), and on one (ZBV's V).
    for (const char* schedule : {"1F1B", "ZBVZeroBubble"}) {
      const TrainingRun pp = tied_run(std::string("pp_2_") + schedule, 2,
                                      "--parallelism.dp_shard 1"
                                      " --parallelism.pipeline_parallel_degree 2"
                                      " --parallelism.pipeline_parallel_schedule " +
                                          std::string(schedule) + " --training.local_batch_size 8");
      check_tracks(std::string("pp 2 ") + schedule, pp.losses, reference);
      check_copies_identical(schedule, pp);
    }
    // Each stage's copy sharded by FSDP: the shards' gradients are what the stages swap.
    const TrainingRun pp_fsdp = tied_run("pp_2_fsdp_2", 4,
                                         "--parallelism.dp_shard 2"
                                         " --parallelism.pipeline_parallel_degree 2"
                                         " --training.local_batch_size 4");
    check_tracks("pp 2 x dp_shard 2", pp_fsdp.losses, reference);
    check_copies_identical("pp 2 x dp_shard 2", pp_fsdp);
    check_tracks("cp 2",
                 tied_run("cp_2", 2, "--parallelism.dp_shard 1 --parallelism.context_parallel_degree 2"
                                     " --training.local_batch_size 8")
                     .losses,
                 reference);
  }
}

TEST_SUITE("check ranks=2") {
  TEST_CASE("tied embeddings: a pipeline's checkpoint resumes on one rank and one rank's on a pipeline") {
    const std::string pp = " --parallelism.dp_shard 1 --parallelism.pipeline_parallel_degree 2";
    auto run = [](const std::string& name, int ranks, const std::string& dump,
                  const std::string& flags) {
      return train_debug_model(kScratch, name,
                               "--training.steps 4 --training.seq_len 64"
                               " --training.local_batch_size 8 --checkpoint.enable true"
                               " --checkpoint.interval 2 --checkpoint.keep_latest_k 0"
                               " --job.dump_folder " +
                                   dump + kTied + flags,
                               ranks == 1 ? "" : mpirun_launcher(ranks))
          .losses;
    };
    // Saved by the two stages (the weight once, by the first), resumed by one part that holds
    // both ends; then the other way round.
    for (const bool from_pipeline : {true, false}) {
      const std::string saved = dump_for(from_pipeline ? "saved_pp" : "saved_one");
      const std::vector<double> straight =
          run(from_pipeline ? "saved_pp" : "saved_one", from_pipeline ? 2 : 1, saved,
              from_pipeline ? pp : "");
      REQUIRE(straight.size() == 4);
      const std::string resumed = dump_for(from_pipeline ? "resumed_one" : "resumed_pp");
      fs::create_directories(resumed + "/checkpoint");
      fs::copy(saved + "/checkpoint/step-2", resumed + "/checkpoint/step-2",
               fs::copy_options::recursive);
      const std::vector<double> after =
          run(from_pipeline ? "resumed_one" : "resumed_pp", from_pipeline ? 1 : 2, resumed,
              from_pipeline ? "" : pp);
      REQUIRE(after.size() == 2);
      for (size_t i = 0; i < 2; ++i) {
        CHECK_MESSAGE(std::abs(after[i] - straight[i + 2]) <= 1e-5 * std::abs(straight[i + 2]),
                      (from_pipeline ? "pp to one rank" : "one rank to pp") << " step " << i + 3
                                                                            << ": " << after[i]
                                                                            << " vs "
                                                                            << straight[i + 2]);
      }
    }
  }
}

TEST_SUITE("check torch") {
  TEST_CASE("tied embeddings: the export has no lm_head and PyTorch computes titan_train's loss") {
    const std::string dir = dump_for("export");
    fs::create_directories(dir);
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
    const TrainingRun run = train_debug_model(
        kScratch, "export_run",
        "--training.steps 2 --training.seq_len 64 --checkpoint.enable true"
        " --checkpoint.interval 2 --checkpoint.last_save_in_hf true --validation.enable true"
        " --validation.freq 2 --validation.steps 1 --validation.seq_len 32"
        " --validation.local_batch_size 2 --validation.dataset_path " +
            dir + "/held_out.bin --job.dump_folder " + dir + "/run" + kTied);
    const std::string hf = dir + "/run/checkpoint/hf-step-2";
    const std::string config = read_file(hf + "/config.json");
    CHECK(config.find("\"tie_word_embeddings\": true") != std::string::npos);
    std::string headers;
    for (const auto& entry : fs::directory_iterator(hf)) {
      if (entry.path().extension() == ".safetensors") headers += read_file(entry.path().string());
    }
    CHECK(headers.find("model.embed_tokens.weight") != std::string::npos);
    CHECK(headers.find("lm_head") == std::string::npos);
    const std::vector<std::map<std::string, double>> lines =
        read_metrics_jsonl(scratch_dir(kScratch) + "/export_run.jsonl");
    REQUIRE(lines.size() == 2);
    REQUIRE(lines[1].count("val_loss") == 1);
    const double val_loss = lines[1].at("val_loss");
    const double torch_loss = hf_reference_loss(hf, dir + "/held_out.txt", S, B);
    MESSAGE("tied: titan_train val_loss ", val_loss, ", PyTorch on the HF export ", torch_loss);
    CHECK(std::abs(val_loss - torch_loss) <= 1e-5 * std::abs(torch_loss));

    // The folder starts a tied run, and refuses an untied one.
    const TrainingRun from_hf = train_debug_model(
        kScratch, "from_hf",
        "--training.steps 2 --training.seq_len 64 --checkpoint.initial_load_path " + hf +
            " --checkpoint.initial_load_in_hf true --job.dump_folder " + dir + "/from_hf" + kTied);
    CHECK(from_hf.losses.size() == 2);
    check_train_rejected("--checkpoint.initial_load_path " + hf +
                             " --checkpoint.initial_load_in_hf true",
                         {"tie_word_embeddings is true but the model's tie_word_embeddings is false"});
    // Its sharded checkpoint: the same both ways.
    check_train_rejected("--checkpoint.initial_load_path " + dir + "/run/checkpoint/step-2",
                         {"was saved for another model: tie_word_embeddings true (this run: false)"});
  }
}

TEST_SUITE("check") {
  TEST_CASE("tied embeddings: an untied checkpoint refuses a tied model and FP8 keeps the output in bf16") {
    const std::string dump = dump_for("untied_saved");
    train_debug_model(kScratch, "untied_saved",
                      "--training.steps 2 --training.seq_len 64 --checkpoint.enable true"
                      " --checkpoint.interval 2 --job.dump_folder " +
                          dump);
    check_train_rejected("--checkpoint.initial_load_path " + dump + "/checkpoint/step-2" + kTied,
                         {"was saved for another model: tie_word_embeddings false (this run: true)"});
    check_train_rejected(std::string("--float8.enabled true --float8.filter_fqns '[]'") + kTied,
                         {"float8.filter_fqns: leaves out 'output', but the model's embeddings are tied"});
  }
}

TEST_SUITE("fast") {
  TEST_CASE("tied embeddings: the Llama 3.2 1B and 3B plans on one H100") {
    // Parameters 1.24B and 3.21B (Hugging Face's counts for the two), each held once.
    for (const auto& [flavor, params_gib] :
         std::vector<std::pair<std::string, double>>{{"llama3_2_1b", 1.2355e9 * 4 / 1073741824.0},
                                                     {"llama3_2_3b", 3.2128e9 * 4 / 1073741824.0}}) {
      const ProcessResult plan = run_process(binary_path("titan_train") + " --model.flavor " +
                                             flavor +
                                             " --plan-device h100 --training.seq_len 4096"
                                             " --training.local_batch_size 1");
      REQUIRE_MESSAGE(plan.exit_code == 0, plan.err);
      MESSAGE(plan.out);
      const std::string key = "  gradients";
      const size_t at = plan.out.find(key);
      REQUIRE(at != std::string::npos);
      const double gradients = std::stod(plan.out.substr(at + key.size()));
      CHECK(gradients == doctest::Approx(params_gib).epsilon(2e-3));
      CHECK(plan.out.find("verdict: fits") != std::string::npos);
    }
  }
}

}  // namespace tied_embeddings_test
