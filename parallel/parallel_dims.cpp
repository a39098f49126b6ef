#include "parallel/parallel_dims.h"

#include <string>

#include "core/check.h"

namespace titan::parallel {

namespace {

// a × b, or -1 when it overflows int64 (degrees are positive): a product of huge degrees must
// not wrap around to the world size.
int64_t product_or_overflow(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? -1 : out;
}

}  // namespace

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
    const int64_t others = product_or_overflow(dp_replicate, tp);
    if (others < 0 || world_size % others != 0) {
      input_error("parallelism: dp_shard -1 takes the rest of ", world_size,
                  " ranks, but dp_replicate ", dp_replicate, " × tp ", tp, " = ",
                  others < 0 ? std::string("more than 2^63") : std::to_string(others),
                  " does not divide ", world_size,
                  "; choose dp_replicate and tp whose product divides the world size");
    }
    dp_shard = world_size / others;
  }
  positive("dp_shard", dp_shard, " (or -1 for the rest of the world)");
  ParallelDims dims{dp_replicate, dp_shard, tp, world_size};
  const int64_t ranks = product_or_overflow(product_or_overflow(dp_replicate, dp_shard), tp);
  if (ranks != world_size) {
    input_error("parallelism: ",
                ranks < 0 ? detail::concat("dp_replicate ", dp_replicate, " × dp_shard ", dp_shard,
                                           " × tp ", tp, " = more than 2^63 ranks")
                          : dims.describe(),
                ", but the job has ", world_size, " ranks; choose degrees whose product is ",
                world_size, ", or set dp_shard: -1 to take the rest");
  }
  return dims;
}

std::string ParallelDims::describe() const {
  return detail::concat("dp_replicate ", dp_replicate, " × dp_shard ", dp_shard, " × tp ", tp,
                        " = ", dp_replicate * dp_shard * tp, " ranks");
}

}  // namespace titan::parallel
