#include "app/plan/plan_job.h"

#include <cmath>
#include <memory>

#include "app/layer_options.h"
#include "core/check.h"
#include "data/documents.h"
#include "data/tokenizer.h"
#include "parallel/device_mesh.h"
#include "parallel/parallelize.h"

namespace titan::app::plan {

std::string PlanMesh::describe() const {
  std::string text;
  auto add = [&text](parallel::MeshDim dim, int64_t degree, bool always) {
    if (degree == 1 && !always) return;
    text += (text.empty() ? "" : " × ") + std::string(parallel::mesh_dim_name(dim)) + " " +
            std::to_string(degree);
  };
  add(parallel::MeshDim::Pp, pp, false);
  add(parallel::MeshDim::DpReplicate, dp_replicate, true);
  add(parallel::MeshDim::DpShard, dp_shard, true);
  add(parallel::MeshDim::Cp, cp, false);
  add(parallel::MeshDim::Tp, tp, true);
  return text;
}

parallel::ParallelDims PlanMesh::dims() const {
  parallel::ParallelDims d;
  d.pp = pp;
  d.dp_replicate = dp_replicate;
  d.dp_shard = dp_shard;
  d.cp = cp;
  d.tp = tp;
  d.world_size = world();
  return d;
}

PlanMesh PlanMesh::of(const parallel::ParallelDims& dims) {
  PlanMesh mesh;
  mesh.pp = dims.pp;
  mesh.dp_replicate = dims.dp_replicate;
  mesh.dp_shard = dims.dp_shard;
  mesh.cp = dims.cp;
  mesh.tp = dims.tp;
  return mesh;
}

PlanJob plan_job(const JobConfig& config, const PlanMesh& mesh) {
  PlanJob job;
  job.config = config;
  job.mesh = mesh;
  job.args = model_args(config);
  model::validate_model_args(job.args, "model");
  parallel::check_tensor_parallel_fit(job.args, mesh.tp, "parallelism.tp");
  job.ac = activation_checkpoint_policy(config);
  // resolve_batch's rule (trainer_checks.h).
  const JobConfig::Training& t = config.training;
  const int64_t micro_batch = t.local_batch_size * mesh.dp();  // cp ranks share sequences
  job.global_batch = t.global_batch_size == -1 ? micro_batch : t.global_batch_size;
  if (job.global_batch % micro_batch != 0) {
    input_error("training.global_batch_size: ", job.global_batch,
                " is not a multiple of local_batch_size ", t.local_batch_size, " × dp ", mesh.dp(),
                " = ", micro_batch, "; use a multiple of ", micro_batch,
                " (or -1 for no gradient accumulation)");
  }
  job.accumulation = job.global_batch / micro_batch;
  job.attention_keys = static_cast<double>(t.seq_len);
  job.attention_keys_source = "causal: every key of the window";
  return job;
}

PlanJob with_document_keys(PlanJob job) {
  const JobConfig& c = job.config;
  if (c.model.attention_mask != model::AttentionMaskKind::BlockCausal) return job;
  try {
    const TokenizerChoice choice = tokenizer_choice(c);
    const std::unique_ptr<data::Tokenizer> tokenizer =
        data::load_tokenizer(choice.spec, choice.key);
    const std::unique_ptr<data::TokenSource> source =
        data::open_token_source(training_sources(c).front().spec, tokenizer.get());
    if (!tokenizer->eos_id()) return job;
    const data::DocumentContext d =
        data::sample_document_context(*source, c.training.seq_len, *tokenizer->eos_id());
    if (d.windows == 0) return job;
    job.attention_keys = d.keys_per_token;
    job.attention_keys_source = detail::concat(
        "block_causal: Σ n²/S over the documents of ", d.windows, " windows of data.path, ",
        std::round(d.mean_documents * 10) / 10, " documents a window");
  } catch (const InputError&) {
    job.attention_keys_source = "block_causal, counted as causal: data.path could not be read";
  }
  return job;
}

}  // namespace titan::app::plan
