// titan_train: the one binary. Started by mpirun/srun, or alone as one rank.
//
// Two phases, with two failure rules (docs/architecture.md#decision-12):
//   set-up   parse and check the command line and config; then create the mesh, open the
//            data, build the model. Every rank does this, and after each of the two steps all
//            ranks agree: if any rank failed, the lowest failing rank prints its one-line
//            message and every rank exits with the same code (2 for bad input). The mesh is
//            created only once every rank has a valid config, so a rank that failed early is
//            never missing from the collective that creates it.
//   training a rank that fails aborts the whole job with its message, so no rank waits forever
//            in a collective. A diverged loss exits with code 3.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "app/cli.h"  // defines: parse_command_line
#include "app/preemption.h"
#include "app/trainer.h"             // defines: Trainer, TrainingDiverged
#include "core/blas_core.h"         // defines: use_best_blas_core, blas_core_note
#include "core/cuda/device_query.h"  // defines: query_cuda_devices
#include "core/exit_code.h"          // defines: ExitCode, exit_status
#include "core/notice.h"             // defines: set_notice_sink
#include "parallel/process_setup.h"  // defines: start_mpi, run_setup_phases, fail_after_setup

namespace {

using titan::exit_status;
using titan::ExitCode;
using titan::app::CommandLine;

constexpr std::string_view kProgram = "titan_train";

void configure_logging(int world_rank) {
  spdlog::set_pattern(world_rank == 0
                          ? "[titan %H:%M:%S] %v"
                          : "[titan %H:%M:%S rank " + std::to_string(world_rank) + "] %v");
  spdlog::set_level(world_rank == 0 ? spdlog::level::info : spdlog::level::warn);
}

void print_devices() {
  titan::CudaQuery query = titan::query_cuda_devices();
  if (query.devices.empty()) {
    std::printf("no CUDA device: %s\n", query.why_none.c_str());
    return;
  }
  for (const titan::CudaDeviceInfo& d : query.devices) {
    std::printf("cuda:%d  %s  sm_%d%d  %.1f GiB  %d SMs\n", d.index, d.name.c_str(), d.major,
                d.minor, static_cast<double>(d.total_bytes) / (1024.0 * 1024.0 * 1024.0),
                d.multiprocessors);
  }
}

// The actions that print and exit (rank 0 prints).
void run_print_action(const CommandLine& cli, int world_rank) {
  if (world_rank != 0) return;
  if (cli.action == CommandLine::Action::ListDevices) {
    print_devices();
  } else {
    std::fputs(cli.text.c_str(), stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  titan::use_best_blas_core(argv);  // may re-execute this binary, before anything has started
  namespace parallel = titan::parallel;
  const std::unique_ptr<parallel::MpiRuntime> mpi = parallel::start_mpi(&argc, &argv, kProgram);
  if (!mpi) return exit_status(ExitCode::Failure);
  const int rank = mpi->world_rank();
  configure_logging(rank);
  titan::set_notice_sink([](const std::string& line) { spdlog::warn("{}", line); });
  if (const std::string note = titan::blas_core_note(); !note.empty()) spdlog::info("{}", note);
  int threads = 0;

  // Set-up in two phases (see Trainer): after each, every rank learns whether any failed.
  std::unique_ptr<titan::app::Trainer> trainer;
  const std::function<void()> phases[] = {
      [&] {
        threads = parallel::configure_gemm_threads(mpi->local_size());
        CommandLine cli = titan::app::parse_command_line(argc, argv);
        if (cli.action == CommandLine::Action::Plan) {
          cli.text = titan::app::plan::plan_text(cli.config, cli.plan, mpi->world_size());
        }
        if (cli.action != CommandLine::Action::Train) {
          run_print_action(cli, rank);
          return;
        }
        trainer = std::make_unique<titan::app::Trainer>(cli.config, *mpi);
        trainer->check_config();
      },
      [&] { trainer->setup(); },
  };
  // A print action (--help, --print-config, …) was all there was.
  if (const std::optional<int> status =
          parallel::run_setup_phases(phases, kProgram, rank, [&] { return trainer == nullptr; })) {
    return *status;
  }
  spdlog::info("{} rank{}, {} GEMM thread{} each", mpi->world_size(),
               mpi->world_size() == 1 ? "" : "s", threads, threads == 1 ? "" : "s");

  try {
    if (trainer->train() == titan::app::TrainingEnd::Preempted) {
      return exit_status(ExitCode::Preempted);
    }
  } catch (const titan::app::TrainingDiverged& e) {
    // The loss and the gradient norm are reduced over the job, so every rank sees the
    // divergence at the same step: one line from rank 0, every rank exits 3, no abort.
    if (rank == 0) std::fprintf(stderr, "titan_train: error: %s\n", e.what());
    return exit_status(ExitCode::Diverged);
  } catch (const titan::InputError& e) {
    return parallel::fail_after_setup(ExitCode::BadInput, e.what(), kProgram, rank,
                                      mpi->world_size());
  } catch (const std::exception& e) {
    return parallel::fail_after_setup(ExitCode::Failure, e.what(), kProgram, rank,
                                      mpi->world_size());
  }
  return exit_status(ExitCode::Ok);
}
