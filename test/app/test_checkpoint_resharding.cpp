// Sharded checkpoints end to end (docs/checkpoint.md): a checkpoint saved on mesh
// (1,2,2) resumes on (1,2,2) bit for bit, and on (2,2,2), (1,1,1) and (1,4,1) within 1e-5 of
// the uninterrupted run; keep_latest_k prunes; a half-written step is skipped with a warning; a
// corrupt file is refused with exit 2 and one line naming it; and the asynchronous modes write
// the same bytes as a synchronous save. The global batch is 8 on every mesh; sequences are 64
// tokens and runs a few steps, so that 8 ranks on 2 cores stay quick.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/process.h"
#include "support/training_run.h"

using namespace titan::testing;
namespace fs = std::filesystem;

namespace {

constexpr int kReshardSteps = 4;
constexpr int kGlobalBatch = 8;

struct ReshardMesh {
  int dp_replicate, dp_shard, tp;
  int ranks() const { return dp_replicate * dp_shard * tp; }
  std::string flags() const {
    return " --parallelism.dp_replicate " + std::to_string(dp_replicate) +
           " --parallelism.dp_shard " + std::to_string(dp_shard) + " --parallelism.tp " +
           std::to_string(tp) + " --training.local_batch_size " +
           std::to_string(kGlobalBatch / (dp_replicate * dp_shard));
  }
  std::string name() const {
    std::ostringstream out;
    out << dp_replicate << "_" << dp_shard << "_" << tp;
    return out.str();
  }
};

std::string scratch() { return scratch_dir("checkpoint_resharding"); }

// kReshardSteps steps of the debug model on `mesh`, checkpointing every 2 steps into
// <dump>/checkpoint.
std::string run_args(const std::string& dump, const std::string& extra = "") {
  return "--training.steps " + std::to_string(kReshardSteps) +
         " --training.seq_len 64 --checkpoint.enable true --checkpoint.interval 2"
         " --checkpoint.keep_latest_k 0 --job.dump_folder " +
         dump + " " + extra;
}

std::vector<double> train(const std::string& name, const ReshardMesh& mesh, const std::string& dump,
                          const std::string& extra = "") {
  return train_debug_model("checkpoint_resharding", name, run_args(dump, extra) + mesh.flags(),
                           mesh.ranks() == 1 ? "" : mpirun_launcher(mesh.ranks()))
      .losses;
}

// A dump folder holding only step 2 of `saved`.
std::string copy_step_2(const std::string& saved, const std::string& name) {
  const std::string dump = scratch() + "/" + name;
  fs::remove_all(dump);
  fs::create_directories(dump + "/checkpoint");
  fs::copy(saved + "/checkpoint/step-2", dump + "/checkpoint/step-2", fs::copy_options::recursive);
  return dump;
}

const ReshardMesh kSaved{1, 2, 2};

// The uninterrupted run on (1,2,2), saved under straight_<tag>: each test case has its own,
// since ctest runs the cases as separate processes, possibly at the same time.
std::vector<double> straight_losses(const std::string& tag, std::string& dump) {
  dump = scratch() + "/straight_" + tag;
  fs::remove_all(dump);
  return train("straight_" + tag, kSaved, dump);
}

}  // namespace

TEST_SUITE("check ranks=4") {
  TEST_CASE("a checkpoint saved on mesh (1 2 2) resumes on (1 2 2) (2 2 2) (1 1 1) and (1 4 1)" *
            doctest::test_suite("check ranks=8")) {
    std::string saved;
    const std::vector<double> straight = straight_losses("resume", saved);
    REQUIRE(straight.size() == kReshardSteps);
    CHECK(fs::exists(saved + "/checkpoint/step-2/metadata.json"));
    CHECK(fs::exists(saved + "/checkpoint/step-4/metadata.json"));

    // The same mesh: bit for bit.
    const std::vector<double> same =
        train("resume_same", kSaved, copy_step_2(saved, "resume_same"));
    REQUIRE(same.size() == kReshardSteps - 2);
    for (int i = 0; i < kReshardSteps - 2; ++i) {
      CHECK_MESSAGE(same[i] == straight[2 + i],
                    "step " << 3 + i << ": " << same[i] << " vs " << straight[2 + i]);
    }
    // Other meshes: the same state, summed in another order.
    for (const ReshardMesh& mesh :
         {ReshardMesh{2, 2, 2}, ReshardMesh{1, 1, 1}, ReshardMesh{1, 4, 1}}) {
      const std::string name = "resume_" + mesh.name();
      const std::vector<double> resumed = train(name, mesh, copy_step_2(saved, name));
      REQUIRE_MESSAGE(resumed.size() == kReshardSteps - 2, name);
      for (int i = 0; i < kReshardSteps - 2; ++i) {
        const double rel = std::abs(resumed[i] - straight[2 + i]) / std::abs(straight[2 + i]);
        CHECK_MESSAGE(rel <= 1e-5, name << " step " << 3 + i << ": " << resumed[i] << " vs "
                                        << straight[2 + i] << " (relative " << rel << ")");
      }
    }
  }

  // On two ranks: the background writer is one per rank, and each rank's file is compared.
  TEST_CASE("async and async_with_pinned_mem write the same bytes as a synchronous save" *
            doctest::test_suite("check ranks=2")) {
    const ReshardMesh mesh{1, 2, 1};
    const std::string saved = scratch() + "/straight_async";
    fs::remove_all(saved);
    train("straight_async", mesh, saved);
    for (const char* mode : {"async", "async_with_pinned_mem"}) {
      const std::string dump = scratch() + "/" + mode;
      fs::remove_all(dump);
      train(mode, mesh, dump, std::string("--checkpoint.async_mode ") + mode);
      for (const char* step : {"step-2", "step-4"}) {
        const fs::path expected = fs::path(saved) / "checkpoint" / step;
        const fs::path got = fs::path(dump) / "checkpoint" / step;
        int files = 0;
        for (const fs::directory_entry& entry : fs::directory_iterator(expected)) {
          const fs::path other = got / entry.path().filename();
          CHECK_MESSAGE(files_equal(entry.path(), other),
                        mode << ": " << other.string());
          ++files;
        }
        CHECK(files == 3);  // 2 rank files and metadata.json
        CHECK(std::distance(fs::directory_iterator(got), fs::directory_iterator()) == files);
      }
    }
  }

  TEST_CASE("a corrupt checkpoint file is refused with exit 2 and one line naming it") {
    std::string saved;
    straight_losses("corrupt", saved);
    const std::string dump = copy_step_2(saved, "corrupt");
    const std::string file = dump + "/checkpoint/step-2/rank00001.safetensors";
    {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-3, std::ios::end);
      f.put('\x7f');
    }
    const ProcessResult r =
        run_process(mpirun_launcher(4) + binary_path("titan_train") +
                    " --config configs/debug_model.yaml " + run_args(dump) + kSaved.flags());
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.error_lines() == 1, r.err);
    CHECK_MESSAGE(r.err.find(file + ": CRC32C") != std::string::npos, r.err);
  }
}

TEST_SUITE("check") {
  TEST_CASE("keep_latest_k prunes to the newest complete steps") {
    const std::string dump = scratch() + "/prune";
    fs::remove_all(dump);
    train_debug_model("checkpoint_resharding", "prune",
                      "--training.steps 4 --training.seq_len 64 --checkpoint.enable true "
                      "--checkpoint.interval 1 --checkpoint.keep_latest_k 2 --job.dump_folder " +
                          dump);
    std::vector<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(dump + "/checkpoint")) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"step-3", "step-4"});
  }

  TEST_CASE("half-written steps are skipped with a warning and the newest complete one resumes") {
    const std::string dump = scratch() + "/half_written";
    fs::remove_all(dump);
    const std::string args =
        "--training.steps 4 --training.seq_len 64 --checkpoint.enable true "
        "--checkpoint.interval 2 --job.dump_folder " +
        dump;
    const std::vector<double> straight =
        train_debug_model("checkpoint_resharding", "half_straight", args).losses;
    REQUIRE(straight.size() == 4);
    // Step 4 killed before its rename, a step folder without metadata.json, and a step number
    // that overflows: all ignored; step 2 resumes.
    const std::string folder = dump + "/checkpoint";
    fs::rename(folder + "/step-4", folder + "/step-4.tmp");
    fs::create_directories(folder + "/step-3");
    fs::create_directories(folder + "/step-99999999999999999999");
    const TrainingRun resumed = train_debug_model("checkpoint_resharding", "half_resumed", args);
    REQUIRE(resumed.losses.size() == 2);
    CHECK(resumed.losses[0] == straight[2]);
    CHECK(resumed.losses[1] == straight[3]);
    const std::string log = resumed.process.out + resumed.process.err;
    CHECK_MESSAGE(log.find("step-4.tmp: a save that never completed") != std::string::npos, log);
    CHECK_MESSAGE(log.find("step-3: it has no metadata.json") != std::string::npos, log);
    CHECK_MESSAGE(log.find("its step number overflows") != std::string::npos, log);
  }
}
