// Threads for the CPU work that is not a GEMM: the tiled attention, the element-wise ops, the
// optimizer step and the gradient norm.
//
// One pool a process, as many threads as a rank's GEMMs get (set_cpu_gemm_threads sets both:
// cores / ranks on the node), the calling thread one of them. Work is cut into chunks of a fixed
// size chosen by the caller, never by the thread count, and a reduction combines its chunks'
// partial results in chunk order: so every result is the same, bit for bit, for any number of
// threads. The workers block on a condition variable between jobs (they do not spin), so that
// they take no core from OpenBLAS's threads while those work, and a job small enough to run in
// one chunk never wakes them.
//
// parallel_for called from inside a job runs inline on its thread.
#pragma once

#include <cstdint>
#include <functional>

namespace titan {

// Threads the pool runs jobs on, the caller included (1: everything inline). At least 1.
void set_cpu_threads(int threads);
int cpu_threads();

// f(begin, end) over [0, n) in chunks of `grain` (the last may be shorter), each chunk on one
// thread, in no particular order; returns when every chunk is done. An exception thrown by f is
// rethrown here (the first one, after the others have finished).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// parallel_for over `rows` rows of `row_elements` each, in chunks of whole rows of about 32K
// elements: enough work a chunk to be worth a thread, and the same chunks on every machine.
inline constexpr int64_t kElementsPerChunk = int64_t{1} << 15;
inline int64_t row_grain(int64_t row_elements) {
  return row_elements <= 0 ? 1 : (kElementsPerChunk + row_elements - 1) / row_elements;
}
inline void parallel_for_rows(int64_t rows, int64_t row_elements,
                              const std::function<void(int64_t, int64_t)>& f) {
  parallel_for(rows, row_grain(row_elements), f);
}

// The number of chunks parallel_for(n, grain, …) makes: for per-chunk partial results.
inline int64_t chunk_count(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

}  // namespace titan
