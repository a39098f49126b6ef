#include "parallel/parallel_dims.h"

#include <string>

#include "core/check.h"

namespace titan::parallel {

namespace {

// a × b, or -1 when it overflows int64 (degrees are positive): a product of huge degrees must
// not wrap around to the world size.
int64_t product_or_overflow(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? -1 : out;
}

// Every configured degree, for a refusal, by its key: "dp_replicate 1 × dp_shard 2 × tp 2" for
// the three-dim mesh, "pipeline_parallel_degree 2 × dp_replicate 1 × dp_shard 2 ×
// context_parallel_degree 1 × tp 2" once pp or cp is above 1. `with_dp_shard` false leaves
// dp_shard out (dp_shard -1 takes the rest of the others).
std::string every_factor(const MeshDegrees& d, bool with_dp_shard = true) {
  const std::string dp_shard =
      with_dp_shard ? detail::concat(" × dp_shard ", d.dp_shard) : std::string();
  if (d.pp == 1 && d.cp == 1) {
    return detail::concat("dp_replicate ", d.dp_replicate, dp_shard, " × tp ", d.tp);
  }
  return detail::concat("pipeline_parallel_degree ", d.pp, " × dp_replicate ", d.dp_replicate,
                        dp_shard, " × context_parallel_degree ", d.cp, " × tp ", d.tp);
}

}  // namespace

ParallelDims ParallelDims::resolve(const MeshDegrees& degrees, int64_t world_size) {
  auto positive = [](const char* key, int64_t value, const char* extra) {
    if (value < 1) {
      input_error("parallelism.", key, ": must be a positive degree", extra, ", got ", value);
    }
  };
  positive("pipeline_parallel_degree", degrees.pp, "");
  positive("dp_replicate", degrees.dp_replicate, "");
  positive("context_parallel_degree", degrees.cp, "");
  positive("tp", degrees.tp, "");
  int64_t dp_shard = degrees.dp_shard;
  if (dp_shard == -1) {
    const int64_t others = product_or_overflow(
        product_or_overflow(product_or_overflow(degrees.pp, degrees.dp_replicate), degrees.cp),
        degrees.tp);
    if (others < 0 || world_size % others != 0) {
      input_error("parallelism: dp_shard -1 takes the rest of ", world_size, " ranks, but ",
                  every_factor(degrees, /*with_dp_shard=*/false), " = ",
                  others < 0 ? std::string("more than 2^63") : std::to_string(others),
                  " does not divide ", world_size,
                  "; choose degrees whose product divides the world size");
    }
    dp_shard = world_size / others;
  }
  positive("dp_shard", dp_shard, " (or -1 for the rest of the world)");
  ParallelDims dims{degrees.pp, degrees.dp_replicate, dp_shard, degrees.cp, degrees.tp, world_size};
  const int64_t ranks = product_or_overflow(
      product_or_overflow(
          product_or_overflow(product_or_overflow(dims.pp, dims.dp_replicate), dims.dp_shard),
          dims.cp),
      dims.tp);
  if (ranks != world_size) {
    MeshDegrees resolved = degrees;
    resolved.dp_shard = dp_shard;
    input_error("parallelism: ", every_factor(resolved), " = ",
                ranks < 0 ? std::string("more than 2^63") : std::to_string(ranks),
                " ranks, but the job has ", world_size, " ranks; choose degrees whose product is ",
                world_size, ", or set dp_shard: -1 to take the rest");
  }
  return dims;
}

ParallelDims ParallelDims::resolve(int64_t dp_replicate, int64_t dp_shard, int64_t tp,
                                   int64_t world_size) {
  MeshDegrees degrees;
  degrees.dp_replicate = dp_replicate;
  degrees.dp_shard = dp_shard;
  degrees.tp = tp;
  return resolve(degrees, world_size);
}

std::string ParallelDims::describe() const {
  std::string text;
  if (pp > 1) text += detail::concat("pp ", pp, " × ");
  text += detail::concat("dp_replicate ", dp_replicate, " × dp_shard ", dp_shard, " × ");
  if (cp > 1) text += detail::concat("cp ", cp, " × ");
  text += detail::concat("tp ", tp, " = ", pp * dp_replicate * dp_shard * cp * tp, " ranks");
  return text;
}

}  // namespace titan::parallel
