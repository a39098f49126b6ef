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
#include <sched.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "app/cli.h"                 // defines: parse_command_line
#include "app/preemption.h"
#include "app/trainer.h"             // defines: Trainer, TrainingDiverged
#include "core/cuda/device_query.h"  // defines: query_cuda_devices
#include "core/exit_code.h"          // defines: ExitCode, exit_status
#include "core/gemm.h"               // defines: set_cpu_gemm_threads
#include "parallel/mpi_runtime.h"    // defines: MpiRuntime, abort_job
#include "parallel/rank_agreement.h"  // defines: attempt, agree_on_status

namespace {

using titan::exit_status;
using titan::ExitCode;
using titan::app::CommandLine;

void configure_logging(int world_rank) {
  spdlog::set_pattern(world_rank == 0
                          ? "[titan %H:%M:%S] %v"
                          : "[titan %H:%M:%S rank " + std::to_string(world_rank) + "] %v");
  spdlog::set_level(world_rank == 0 ? spdlog::level::info : spdlog::level::warn);
}

// Ranks on one node share its cores: give each rank's GEMMs its share, unless the user chose.
// A rank that mpirun/srun bound to cores gets exactly those; an unbound rank gets the node's
// cores divided by the ranks on it. (The CPU ops outside GEMMs are single-threaded: OpenMP
// regions between OpenBLAS calls made the two thread pools spin against each other.)
// The user's OPENBLAS_NUM_THREADS must be a thread count: OpenBLAS reads "abc" as 0 and
// quietly uses every core.
int configure_threads(int ranks_on_node) {
  if (const char* user = std::getenv("OPENBLAS_NUM_THREADS")) {
    const std::string text = user;
    int threads = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), threads);
    if (error != std::errc() || end != text.data() + text.size() || threads < 1) {
      titan::input_error("OPENBLAS_NUM_THREADS: '", text,
                         "' is not a positive number of threads; unset it (each rank then uses "
                         "its share of the node's cores) or write e.g. 2");
    }
    return threads;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int node_cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int bound_cpus =
      sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : node_cpus;
  const int threads = bound_cpus < node_cpus ? bound_cpus : std::max(1, node_cpus / ranks_on_node);
  titan::set_cpu_gemm_threads(threads);
  return threads;
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

// A failure during training: a lone rank prints and returns the code (main then finalizes
// MPI, so mpirun reports a plain non-zero exit); one of many aborts the whole job.
int fail_training(ExitCode code, const std::string& message, int world_rank, int world_size) {
  if (world_size == 1) {
    std::fprintf(stderr, "titan_train: error: %s\n", message.c_str());
    return exit_status(code);
  }
  titan::parallel::abort_job(
      exit_status(code), "titan_train: rank " + std::to_string(world_rank) + ": error: " + message);
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<titan::parallel::MpiRuntime> mpi;
  try {
    mpi = std::make_unique<titan::parallel::MpiRuntime>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan_train: error: cannot start MPI: %s\n", e.what());
    return exit_status(ExitCode::Failure);
  }
  const int rank = mpi->world_rank();
  configure_logging(rank);
  int threads = 0;

  // Set-up in two phases (see Trainer): after each, every rank learns whether any failed.
  std::unique_ptr<titan::app::Trainer> trainer;
  const std::function<void()> phases[] = {
      [&] {
        threads = configure_threads(mpi->local_size());
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
  for (const std::function<void()>& phase : phases) {
    const titan::parallel::Outcome outcome = titan::parallel::attempt(phase);
    const titan::parallel::AgreedStatus agreed =
        titan::parallel::agree_on_status(outcome.status, outcome.message);
    if (agreed.status != exit_status(ExitCode::Ok)) {
      if (rank == agreed.rank)
        std::fprintf(stderr, "titan_train: error: %s\n", agreed.message.c_str());
      return agreed.status;
    }
    // A print action (--help, --print-config, …) was all there was.
    if (!trainer) return exit_status(ExitCode::Ok);
  }
  spdlog::info("{} rank{}, {} GEMM thread{} each", mpi->world_size(),
               mpi->world_size() == 1 ? "" : "s", threads, threads == 1 ? "" : "s");

  try {
    if (trainer->train() == titan::app::Trainer::Outcome::Preempted) {
      return exit_status(ExitCode::Preempted);
    }
  } catch (const titan::app::TrainingDiverged& e) {
    // The loss and the gradient norm are reduced over the job, so every rank sees the
    // divergence at the same step: one line from rank 0, every rank exits 3, no abort.
    if (rank == 0) std::fprintf(stderr, "titan_train: error: %s\n", e.what());
    return exit_status(ExitCode::Diverged);
  } catch (const titan::InputError& e) {
    return fail_training(ExitCode::BadInput, e.what(), rank, mpi->world_size());
  } catch (const std::exception& e) {
    return fail_training(ExitCode::Failure, e.what(), rank, mpi->world_size());
  }
  return exit_status(ExitCode::Ok);
}
