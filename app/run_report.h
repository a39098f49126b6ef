// What titan_train says at the start of a run (the model, the mesh, the pipeline, FP8, cp, tp,
// memory per rank, the data, validation, the batch) and at its end (the time, the GEMMs' share,
// FSDP's memory): the lines as values, built from facts, so that a test reads them without a
// job and the trainer only logs them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/metrics/metrics_processor.h"
#include "app/pipeline_plan.h"
#include "app/trainer_checks.h"
#include "core/gemm.h"
#include "data/token_source.h"
#include "fp8/float8_linear.h"
#include "model/config.h"
#include "parallel/data_parallel.h"
#include "parallel/parallel_dims.h"

namespace titan::app {

struct ReportLine {
  bool warning = false;  // spdlog::warn, else info
  std::string text;
};

// Everything the start-up lines say, gathered once set-up is done.
struct RunStartFacts {
  model::ModelArgs args;
  parallel::ParallelDims dims;
  std::string data_parallel;               // DataParallel::describe()
  std::string activation_checkpoint;       // ActivationCheckpointPolicy::describe()
  const PipelinePlan* pipeline = nullptr;  // pp > 1
  fp8::Float8Conversion float8;            // which linears FP8 converted
  size_t linear_count = 0;                 // of this rank's parts
  std::vector<std::string> tp_table;       // tp > 1: tensor parallelism's table
  parallel::ParamMemory memory;            // this rank's parameters and gradients
  int64_t optimizer_state_bytes = 0;
  std::string data;  // the token source's description
  int64_t windows_per_epoch = 0;
  std::string validation_data;  // empty without validation
  int64_t validation_batches = 0;
  int64_t validation_windows = 0;  // in the held-out data
  BatchPlan batch;
  int64_t warmup_steps = 0, decay_steps = 0;  // the schedule's, resolved
};
std::vector<ReportLine> run_start_report(const JobConfig& config, const RunStartFacts& facts);

// What the closing lines say.
struct RunEndFacts {
  int64_t trained_steps = 0;
  double seconds = 0;
  bool cuda = false;  // GEMMs are queued, not timed, on a GPU: their share is not said
  GemmStats gemm;     // the CPU's
  parallel::ParamMemory params;
  int64_t optimizer_state_bytes = 0;
};
std::vector<ReportLine> run_end_report(const RunEndFacts& facts);

// block_causal: tflops and MFU count attention over the keys the data's documents give a token
// (Σ n²/S over windows sampled from `source`, data/documents.h), not the window's S. Sets
// facts' attention_keys and flops_per_token, and returns the line that says so once.
ReportLine count_document_attention(RunFacts& facts, const model::ModelArgs& args,
                                    const data::TokenSource& source, int64_t seq_len,
                                    int32_t eos_id);

void log_report(const std::vector<ReportLine>& lines);

}  // namespace titan::app
