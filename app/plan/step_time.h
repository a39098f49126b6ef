// A step's time, estimated from the device's peak rates and the efficiencies this project
// measured on an H100 (docs/performance.md), every assumption returned beside its source.
//
//   linears       each linear's three GEMMs (and the forwards activation checkpointing
//                 recomputes) at the bf16 GEMMs' measured share of the bf16 peak; an FP8 linear
//                 at the measured speed-up of the whole FP8 linear (quantization included) over
//                 bf16, per recipe
//   attention     FlashAttention's causal FLOP count at the measured forward and backward rates
//   element-wise  the bytes the norms, RoPE, SwiGLU, residual adds, the loss, FSDP's packing and
//                 the optimizer read and write, at the measured copy rate
//   communication the bytes each rank sends on each mesh dim, at the link's rate (NVLink inside
//                 a node, the network across), hidden behind compute where the code overlaps it
//                 (FSDP's prefetch and reduce-scatter, async TP) and exposed where it does not
//                 (synchronous TP, the DDP and HSDP all-reduces after backward)
#pragma once

#include <string>
#include <vector>

#include "app/plan/devices.h"
#include "app/plan/plan_job.h"
#include "parallel/device_mesh.h"

namespace titan::app::plan {

struct Assumption {
  std::string what;    // "bf16 GEMMs at 75.2% of the bf16 peak"
  std::string source;  // "titan_bench on an H100, docs/performance.md"
};

struct MeshDimBytes {
  parallel::MeshDims dims;  // the group it is sent over: dp_shard (× cp), dp_replicate, cp, tp, pp
  double bytes = 0;         // sent per step by one rank
  double seconds = 0;       // at the link's rate
  bool intra_node = true;
};

struct StepTime {
  double model_flops = 0;     // per rank and step, torchtitan's count (MFU's numerator)
  double hardware_flops = 0;  // per rank and step, recomputation and causal attention as run
  double linear_s = 0, attention_s = 0, elementwise_s = 0, optimizer_s = 0;
  std::vector<MeshDimBytes> comm;
  double comm_exposed_s = 0;
  double pipeline_bubble = 0;  // share of the step idle in pipeline bubbles (0 without pp)
  double step_s = 0;
  double tokens_per_s = 0;  // the job's
  double tokens_per_s_per_device = 0;
  double mfu = 0;  // against the device's bf16 peak, as the trainer reports it
  std::vector<Assumption> assumptions;
};

StepTime estimate_step_time(const PlanJob& job, const DeviceSpec& device);

// The speed-up of a whole FP8 linear over bf16 for `recipe`, from the measured table of Llama
// 3 8B's block linears at T 8192 (docs/performance.md), weighted by their bf16 time.
double float8_linear_speedup(fp8::RecipeKind recipe);

}  // namespace titan::app::plan
