#include "app/plan/mesh_search.h"

#include <algorithm>
#include <optional>

#include "core/check.h"

namespace titan::app::plan {

std::vector<MeshCandidate> search_meshes(const JobConfig& config, int64_t world,
                                         const DeviceSpec& device) {
  std::vector<MeshCandidate> candidates;
  // The pipeline degree is the config's: the search splits the rest of the world.
  const int64_t pp = config.parallelism.pipeline_parallel_degree;
  if (pp < 1 || world % pp != 0) {
    input_error("--plan-world ", world, ": parallelism.pipeline_parallel_degree ", pp,
                " does not divide it; search a world that is a multiple of ", pp);
  }
  const int64_t rest = world / pp;
  const int64_t max_tp = device.cuda ? std::min<int64_t>(rest, device.devices_per_node) : rest;
  // cp: the degrees that split a sequence into 2·cp equal chunks.
  const int64_t seq_len = config.training.seq_len;
  // The data's documents are the same on every mesh: sampled once (block_causal).
  std::optional<PlanJob> documents;
  for (int64_t tp = 1; tp <= max_tp; ++tp) {
    if (rest % tp != 0) continue;
    for (int64_t cp = 1; cp <= rest / tp; ++cp) {
      if ((rest / tp) % cp != 0 || (cp > 1 && seq_len % (2 * cp) != 0)) continue;
      for (int64_t dp_replicate = 1; dp_replicate <= rest / tp / cp; ++dp_replicate) {
        if ((rest / tp / cp) % dp_replicate != 0) continue;
        MeshCandidate c;
        c.mesh.pp = pp;
        c.mesh.tp = tp;
        c.mesh.cp = cp;
        c.mesh.dp_replicate = dp_replicate;
        c.mesh.dp_shard = rest / tp / cp / dp_replicate;
        try {
          PlanJob job = plan_job(config, c.mesh);
          if (!documents) documents = with_document_keys(job);
          job.attention_keys = documents->attention_keys;
          job.attention_keys_source = documents->attention_keys_source;
          c.memory = plan_memory(job, device.cuda);
          c.time = estimate_step_time(job, device);
          c.plannable = true;
          c.fits = c.memory.total() <= device.memory_bytes;
        } catch (const InputError& e) {
          c.why_not = e.what();
        }
        candidates.push_back(std::move(c));
      }
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const MeshCandidate& a, const MeshCandidate& b) {
                     if (a.fits != b.fits) return a.fits;
                     if (a.plannable != b.plannable) return a.plannable;
                     return a.time.tokens_per_s > b.time.tokens_per_s;
                   });
  return candidates;
}

}  // namespace titan::app::plan
