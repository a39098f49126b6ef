// titan_train --plan-search: every mesh of a world size, planned, the ones that fit ranked by
// estimated tokens/s. The config's batch stays as written: a mesh whose data-parallel degree
// does not divide training.global_batch_size is not a candidate, and with global_batch_size -1
// each mesh trains local_batch_size × its dp sequences a step (tokens/s compares them fairly).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/plan/devices.h"
#include "app/plan/memory_plan.h"
#include "app/plan/plan_job.h"
#include "app/plan/step_time.h"

namespace titan::app::plan {

struct MeshCandidate {
  PlanMesh mesh;
  bool plannable = false;  // the model and batch fit the mesh's degrees
  std::string why_not;     // when not: the refusal, one line
  MemoryPlan memory;
  StepTime time;
  bool fits = false;
};

// Every factorisation dp_replicate × dp_shard × cp × tp of world / pp (pp the config's; tp at
// most a node; cp splitting training.seq_len into 2·cp equal chunks), fitting ones first by
// tokens/s, then the rest; a mesh the model or the batch cannot take is listed with the reason.
std::vector<MeshCandidate> search_meshes(const JobConfig& config, int64_t world,
                                         const DeviceSpec& device);

}  // namespace titan::app::plan
