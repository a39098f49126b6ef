#include "parallel/process_setup.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/gemm.h"
#include "core/thread_pool.h"
#include "parallel/rank_agreement.h"

namespace titan::parallel {

std::unique_ptr<MpiRuntime> start_mpi(int* argc, char*** argv, std::string_view program) {
  try {
    return std::make_unique<MpiRuntime>(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%.*s: error: cannot start MPI: %s\n", static_cast<int>(program.size()),
                 program.data(), e.what());
    return nullptr;
  }
}

int configure_gemm_threads(int ranks_on_node) {
  // The CPU ops outside GEMMs run on core/thread_pool.h's threads, as many as OpenBLAS's: its
  // workers block between jobs, where OpenMP's regions between OpenBLAS calls had spun against
  // OpenBLAS's own threads.
  if (const char* user = std::getenv("OPENBLAS_NUM_THREADS")) {
    const std::string text = user;
    int threads = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), threads);
    if (error != std::errc() || end != text.data() + text.size() || threads < 1) {
      input_error("OPENBLAS_NUM_THREADS: '", text,
                  "' is not a positive number of threads; unset it (each rank then uses its share "
                  "of the node's cores) or write e.g. 2");
    }
    set_cpu_threads(threads);  // OpenBLAS read the variable itself
    return threads;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int node_cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int bound_cpus =
      sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : node_cpus;
  const int threads =
      bound_cpus < node_cpus ? bound_cpus : std::max(1, node_cpus / std::max(1, ranks_on_node));
  set_cpu_gemm_threads(threads);
  return threads;
}

GpuPlacement choose_gpu(Device setting, int local_rank, int local_size, std::string_view key) {
  TT_CHECK(setting.is_cuda(), "choose_gpu: '", setting, "' is not a CUDA setting");
  const std::string flag = key.starts_with("--") ? std::string(key) : "--" + std::string(key);
  const CudaQuery query = query_cuda_devices();
  if (query.devices.empty()) {
    input_error(key, ": '", setting, "' asked for a GPU but none is usable (", query.why_none,
                "); use ", flag, " cpu");
  }
  const int count = static_cast<int>(query.devices.size());
  if (setting.index_chosen()) {
    if (setting.index >= count) {
      input_error(key, ": '", setting, "' but this process sees ", count, " CUDA device(s) (0..",
                  count - 1, "); use cuda (one per rank) or cuda:0..", count - 1);
    }
    return {query.devices[static_cast<size_t>(setting.index)], local_size};
  }
  const int index = local_rank % count;
  const int sharers = local_size / count + (index < local_size % count ? 1 : 0);
  return {query.devices[static_cast<size_t>(index)], sharers};
}

std::optional<int> run_setup_phases(std::span<const std::function<void()>> phases,
                                    std::string_view program, int world_rank,
                                    const std::function<bool()>& finished) {
  for (const std::function<void()>& phase : phases) {
    const RankResult result = attempt(phase);
    const AgreedStatus agreed = agree_on_status(result.status, result.message);
    if (agreed.status != exit_status(ExitCode::Ok)) {
      if (agreed.rank == world_rank) {
        std::fprintf(stderr, "%.*s: error: %s\n", static_cast<int>(program.size()), program.data(),
                     agreed.message.c_str());
      }
      return agreed.status;
    }
    if (finished()) return exit_status(ExitCode::Ok);
  }
  return std::nullopt;
}

int fail_after_setup(ExitCode code, std::string_view message, std::string_view program,
                     int world_rank, int world_size) {
  if (world_size == 1) {
    std::fprintf(stderr, "%.*s: error: %.*s\n", static_cast<int>(program.size()), program.data(),
                 static_cast<int>(message.size()), message.data());
    return exit_status(code);
  }
  abort_job(exit_status(code), std::string(program) + ": rank " + std::to_string(world_rank) +
                                   ": error: " + std::string(message));
}

}  // namespace titan::parallel
