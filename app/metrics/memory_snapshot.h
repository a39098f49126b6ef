// profiling.enable_memory_snapshot: what held this rank's memory at its peak, by category.
//
// The allocator tags every allocation (core/memory_tag.h) and keeps the tags' bytes at the
// highest total since tracking began (Allocator::track_peak_breakdown). This class starts the
// tracking with the training loop, notes in which step the peak last grew, and at the end of
// the run writes that breakdown — whose total is exactly the peak the metrics lines report —
// as JSON, with a summary line in the log. On an out-of-memory error it writes the bytes held
// at that moment instead, before the job exits. Layout, as torchtitan's memory snapshots:
//
//   <job.dump_folder>/<save_memory_snapshot_folder>/iteration_<step>/rank<R>_memory_snapshot.json
//   <job.dump_folder>/<save_memory_snapshot_folder>/iteration_<step>_exit/…  (out of memory)
//
// JSON: {"rank", "step", "device", "kind": "peak"|"out_of_memory", "total_bytes",
//        "allocator_cache_bytes", "by_category": {"parameters": bytes, "activations.block.0":
//        bytes, …} (largest first), "error" (out of memory only)}.
#pragma once

#include <cstdint>
#include <string>

#include "core/allocator.h"
#include "core/device.h"

namespace titan::app {

class MemorySnapshot {
 public:
  // `folder` is the snapshot folder (dump folder joined with save_memory_snapshot_folder); it is
  // created and checked writable now, so that a bad folder fails before training: InputError.
  MemorySnapshot(std::string folder, int rank, Device device);

  // The peak is tracked from now on.
  void start();
  // Step `step` ended: notes it as the peak step if the peak grew during it.
  void end_step(int64_t step);
  // Writes the peak's breakdown and logs its summary (every rank writes its own file; the
  // logging rank logs). Returns the file written.
  std::string write_peak(bool logging_rank) const;
  // Writes the bytes held now, after an out-of-memory error in step `step`.
  std::string write_out_of_memory(int64_t step, const std::string& error) const;

 private:
  std::string write(const std::string& subfolder, int64_t step, const char* kind,
                    const MemoryBreakdown& breakdown, const std::string& error) const;

  std::string folder_;
  int rank_;
  Device device_;
  Allocator& memory_;
  int64_t peak_bytes_ = -1;
  int64_t peak_step_ = 0;
};

// "1.20 GiB = activations 640.0 MiB (block 5 the most, 120.0 MiB) + parameters 300.0 MiB + …":
// the categories, activation blocks summed into one, largest first.
std::string summarize_memory(const MemoryBreakdown& breakdown);

}  // namespace titan::app
