#include "app/plan/plan_command.h"

#include "app/layer_options.h"
#include "app/plan/devices.h"
#include "app/plan/memory_plan.h"
#include "app/plan/mesh_search.h"
#include "app/plan/pipeline_options.h"
#include "app/plan/plan_report.h"
#include "app/plan/step_time.h"
#include "core/check.h"

namespace titan::app::plan {

std::string plan_text(const JobConfig& config, const PlanRequest& request, int64_t launch_world) {
  const int64_t world = request.world > 0 ? request.world : launch_world;
  const std::string name = !request.device.empty()
                               ? request.device
                               : (config.training.device.is_cuda() ? "h100" : "cpu");
  const DeviceSpec device = device_spec(name, "--plan-device");
  if (request.search)
    return format_search(config, world, device, search_meshes(config, world, device));
  parallel::ParallelDims dims;
  try {
    dims = parallel_dims(config, world);
  } catch (const InputError& e) {
    input_error("--plan-world ", world, ": ", e.what());
  }
  const PlanJob job = with_document_keys(plan_job(config, PlanMesh::of(dims)));
  const MemoryPlan memory = plan_memory(job, device.cuda);
  std::string text = format_plan(job, device, memory, estimate_step_time(job, device));
  if (job.mesh.pp > 1) {
    text += "\n" + format_pipeline_options(job, device, pipeline_options(job, device));
  }
  return text;
}

}  // namespace titan::app::plan
