// A writer whose fsync fails fails, naming the path (core/file_io.h's fsync_path, the one
// helper every writer uses): the Hugging Face export and the sharded checkpoint's save, each
// made to meet a failed fsync by TITAN_FAULT_FSYNC, throw InputError naming the folder, and
// leave no finished output behind; without the fault the same writes succeed.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "checkpoint/checkpointer.h"
#include "checkpoint/hf_llama.h"
#include "core/check.h"
#include "core/file_io.h"
#include "model/optim/adamw_optimizer.h"
#include "model/transformer.h"
#include "parallel/mpi_runtime.h"
#include "parallel/parallelize.h"
#include "support/process.h"
#include "support/small_model.h"

namespace titan::checkpoint {
namespace {

namespace fs = std::filesystem;

// TITAN_FAULT_FSYNC set for one scope.
class FsyncFault {
 public:
  explicit FsyncFault(const std::string& text) { setenv("TITAN_FAULT_FSYNC", text.c_str(), 1); }
  ~FsyncFault() { unsetenv("TITAN_FAULT_FSYNC"); }
  FsyncFault(const FsyncFault&) = delete;
  FsyncFault& operator=(const FsyncFault&) = delete;
};

model::ModelArgs durable_test_args() {
  return testing::small_model_args(
      {.dim = 32, .n_layers = 1, .n_heads = 2, .n_kv_heads = 2, .ffn_dim = 64, .vocab_size = 50});
}

TEST_SUITE("fast") {
  TEST_CASE("durable writes: fsync_path refuses a path it cannot open or flush and names it") {
    const std::string dir = testing::scratch_dir("fsync_path");
    fsync_path(dir, "test", "nothing to fix");
    CHECK_THROWS_WITH_AS(fsync_path(dir + "/missing", "test", "make it"),
                         ("test: cannot open '" + dir +
                          "/missing': No such file or directory; "
                          "make it")
                             .c_str(),
                         InputError);
    const FsyncFault fault("fsync_path");
    CHECK_THROWS_WITH_AS(fsync_path(dir, "test", "use a healthy disk"),
                         ("test: cannot fsync '" + dir +
                          "': Input/output error; use a healthy "
                          "disk")
                             .c_str(),
                         InputError);
  }

  TEST_CASE("durable writes: a failed fsync fails the HF export and names the folder") {
    const model::ModelArgs args = durable_test_args();
    model::Transformer model(args, DType::F32);
    for (model::Parameter* p : model.parameters()) {
      model::allocate_parameter(*p);
      model::init_parameter(*p, 5);
    }
    const ParamRowReader read = [&](const std::string& param, int64_t row_begin, int64_t rows,
                                    const Tensor& dst) {
      for (const model::Parameter* p : model.parameters()) {
        if (p->name == param) {
          dst.copy_from(p->value.rows(row_begin, row_begin + rows).contiguous().view(dst.shape()));
        }
      }
    };
    const std::string out = testing::scratch_dir("fsync_hf") + "/hf";
    fs::remove_all(out);  // a scratch folder outlives its run
    fs::remove_all(out + ".tmp");
    {
      const FsyncFault fault("hf.tmp");
      CHECK_THROWS_WITH_AS(export_hf_part(args, read, out, DType::F32, 0, 1),
                           doctest::Contains(("HF export: cannot fsync '" + out +
                                              ".tmp': Input/output error; export to a folder")
                                                 .c_str()),
                           InputError);
    }
    CHECK_FALSE(fs::exists(out));
    export_hf_part(args, read, out, DType::F32, 0, 1);
    {
      // The finish flushes the folder with its index and config before renaming it into place.
      const FsyncFault fault("hf.tmp");
      CHECK_THROWS_WITH_AS(
          finish_hf_export(args, out, DType::F32, 1),
          doctest::Contains(
              ("HF export: cannot fsync '" + out + ".tmp': Input/output error").c_str()),
          InputError);
    }
    CHECK_FALSE(fs::exists(out));
    finish_hf_export(args, out, DType::F32, 1);
    CHECK(fs::exists(fs::path(out) / "config.json"));
  }

  TEST_CASE(
      "durable writes: a failed fsync fails the checkpoint's save and names the step folder") {
    static int argc = 0;
    static char** argv = nullptr;
    static parallel::MpiRuntime mpi(&argc, &argv);
    const parallel::DeviceMesh mesh =
        parallel::DeviceMesh::root(parallel::ParallelDims::resolve(1, 1, 1, 1), mpi.world_rank());
    model::Transformer model(durable_test_args(), DType::F32);
    const parallel::ParallelModel parallel = parallel::parallelize(model, mesh, {});
    parallel.data_parallel->init_weights(3);
    model::AdamW optimizer(parallel.data_parallel->optimizer_params(), model::AdamWConfig{});
    const std::string folder = testing::scratch_dir("fsync_checkpoint");
    fs::remove_all(folder);  // a scratch folder outlives its run
    fs::create_directories(folder);
    Checkpointer checkpointer({folder});
    {
      const FsyncFault fault("step-1.tmp");
      CHECK_THROWS_WITH_AS(checkpointer.save({1, {}}, model, optimizer, mesh),
                           ("checkpoint: cannot fsync '" + folder +
                            "/step-1.tmp': Input/output error; point job.dump_folder / "
                            "checkpoint.folder at a writable place with free space")
                               .c_str(),
                           InputError);
    }
    CHECK_FALSE(checkpointer.latest_step(false).has_value());
    Checkpointer again({folder});
    again.save({2, {}}, model, optimizer, mesh);
    CHECK(again.latest_step(false) == 2);
  }
}

}  // namespace
}  // namespace titan::checkpoint
