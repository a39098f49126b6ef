// What titan_train --plan prints: the plan of one rank — its memory by the memory snapshot's
// categories against the device, the verdict and what would shrink the largest part, then the
// step's FLOPs, bytes per mesh dim, time and MFU with every assumption beside its source — or,
// with --plan-search, the table of meshes.
#pragma once

#include <string>
#include <vector>

#include "app/plan/devices.h"
#include "app/plan/memory_plan.h"
#include "app/plan/mesh_search.h"
#include "app/plan/plan_job.h"
#include "app/plan/step_time.h"

namespace titan::app::plan {

std::string format_plan(const PlanJob& job, const DeviceSpec& device, const MemoryPlan& memory,
                        const StepTime& time);

std::string format_search(const JobConfig& config, int64_t world, const DeviceSpec& device,
                          const std::vector<MeshCandidate>& candidates);

// "1.23 GiB", "456.7 MiB", "12.0 KiB", "0 B".
std::string format_bytes(double bytes);

}  // namespace titan::app::plan
