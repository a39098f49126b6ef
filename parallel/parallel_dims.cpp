#include "parallel/parallel_dims.h"

#include "core/check.h"

namespace titan::parallel {

ParallelDims ParallelDims::resolve(int64_t dp_replicate, int64_t dp_shard, int64_t tp,
                                   int64_t world_size) {
  auto positive = [](const char* key, int64_t value, const char* extra) {
    if (value < 1) {
      input_error("parallelism.", key, ": must be a positive degree", extra, ", got ", value);
    }
  };
  positive("dp_replicate", dp_replicate, "");
  positive("tp", tp, "");
  if (dp_shard == -1) {
    if (world_size % (dp_replicate * tp) != 0) {
      input_error("parallelism: dp_shard -1 takes the rest of ", world_size,
                  " ranks, but dp_replicate ", dp_replicate, " × tp ", tp, " = ", dp_replicate * tp,
                  " does not divide ", world_size,
                  "; choose dp_replicate and tp whose product divides the world size");
    }
    dp_shard = world_size / (dp_replicate * tp);
  }
  positive("dp_shard", dp_shard, " (or -1 for the rest of the world)");
  ParallelDims dims{dp_replicate, dp_shard, tp, world_size};
  if (dp_replicate * dp_shard * tp != world_size) {
    input_error("parallelism: ", dims.describe(), ", but the job has ", world_size,
                " ranks; choose degrees whose product is ", world_size,
                ", or set dp_shard: -1 to take the rest");
  }
  return dims;
}

std::string ParallelDims::describe() const {
  return detail::concat("dp_replicate ", dp_replicate, " × dp_shard ", dp_shard, " × tp ", tp,
                        " = ", dp_replicate * dp_shard * tp, " ranks");
}

}  // namespace titan::parallel
