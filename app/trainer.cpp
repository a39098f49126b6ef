#include "app/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <utility>

#include "app/attention_setup.h"
#include "app/config_yaml.h"
#include "app/layer_options.h"
#include "app/metrics/metric_sinks.h"
#include "app/metrics/metrics_processor.h"
#include "app/metrics/tensorboard/tensorboard_sink.h"
#include "app/output_folder.h"
#include "app/pipeline_cost_report.h"
#include "app/run_report.h"
#include "core/allocator.h"
#include "core/cuda/backend.h"
#include "core/gemm.h"
#include "core/memory_tag.h"
#include "core/profiler.h"
#include "core/unverified_gpu_paths.h"
#include "model/optim/adamw_optimizer.h"
#include "model/optim/muon_optimizer.h"
#include "parallel/whole_matrix_exchange.h"

namespace titan::app {

namespace {

// What the model computes in (and FSDP gathers): torchtitan's FSDP2 default on CUDA, bf16 over
// fp32 master weights; on the CPU bfloat16 keeps f32 storage and rounds the GEMM operands
// (training.mixed_precision_param, bf16_gemm_operands).
DType compute_dtype_on(const Device& device) { return device.is_cuda() ? DType::BF16 : DType::F32; }

// Packed conversations (titan_tokenize --chat) are read in the windows they were packed for.
void check_packed_window(const data::TokenSource& source, const std::string& path_key,
                         int64_t seq_len, const char* seq_len_key) {
  const int64_t window = source.packed_window();
  if (window == 0 || window == seq_len) return;
  input_error(path_key, ": ", source.describe(), " holds conversations packed into windows of ",
              window, " tokens, and ", seq_len_key, " is ", seq_len, "; set ", seq_len_key, " ",
              window, ", or pack them again with titan_tokenize --chat --seq-len ", seq_len);
}

}  // namespace

Trainer::Trainer(JobConfig config, const parallel::MpiRuntime& mpi)
    : config_(std::move(config)), mpi_(mpi), faults_(injected_faults()) {}

Trainer::~Trainer() = default;

void Trainer::check_config() {
  args_ = model_args(config_);
  model::validate_model_args(args_, "model");
  // The pipeline depends on the config alone, not on the world: refused first, so that a plan
  // can be checked on one process.
  pipeline_plan_ = check_pipeline(config_, args_);
  dims_ = parallel_dims(config_, mpi_.world_size());
  check_attention_backend(config_, args_, dims_.tp, dims_.cp);  // pure: before a GPU is chosen
  // Before the first device work, so that every op reads the one answer.
  allow_unverified_gpu_paths(parse_unverified_gpu_paths(
      config_.experimental.unverified_gpu_paths, "experimental.unverified_gpu_paths"));
  rank_ = set_up_rank(config_, mpi_.local_rank(), mpi_.local_size());
  if (rank_.device.is_cuda() && !config_.experimental.unverified_gpu_paths.empty()) {
    spdlog::warn("CUDA paths not yet run on a GPU, taken as asked: {} "
                 "(experimental.unverified_gpu_paths; docs/status.md)",
                 allowed_unverified_gpu_paths_text());
  }
  check_model_fits_mesh(config_, args_, dims_);
  assign_param_groups();
  const AttentionRun attention =
      pick_attention_backend(config_, args_, dims_.tp, dims_.cp, rank_.device);
  if (!attention.line.empty()) spdlog::info("{}", attention.line);
  attention_backend_ = attention.backend;
  ac_policy_ = activation_checkpoint_policy(config_);
  batch_ = resolve_batch(config_, dims_);
}

void Trainer::assign_param_groups() {
  const JobConfig::Optimizer& o = config_.optimizer;
  if (o.groups.empty()) return;
  // Declared without storage (model/parameter.h): the names and shapes of the whole model, as
  // the checkpoint has them, judged before anything is allocated.
  model::Transformer declared(args_, DType::F32);
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (const model::Parameter* p : declared.parameters()) {
    names.push_back(p->name);
    sizes.push_back(p->shape.numel());
  }
  const std::vector<model::ParamHyper> hypers =
      model::assign_param_groups(o.groups, names, o.weight_decay, "optimizer.groups");
  for (size_t i = 0; i < names.size(); ++i) param_hypers_[names[i]] = hypers[i];
  if (mpi_.world_rank() == 0) {
    for (const std::string& line :
         model::describe_param_groups(o.groups, hypers, sizes, o.weight_decay, "optimizer.groups")) {
      spdlog::info("{}", line);
    }
  }
}

void Trainer::setup() {
  TT_CHECK(batch_.global_batch > 0, "Trainer::setup before check_config");
  // Collective: every rank got here, since main agreed that check_config passed everywhere.
  parallel::CommOptions comm = comm_options(config_);
  comm.backend_key = "parallelism.comm_backend";
  mesh_ = parallel::DeviceMesh::root(dims_, mpi_.world_rank(), comm);
  // From here on nothing in set-up communicates, so a rank that fails alone (a data file its
  // node cannot read) still meets the others at main's next agreement.
  check_memory(config_, args_, dims_, capacity_of(rank_, mpi_.local_size()));
  open_data();
  open_validation_data();
  checkpoints_ = std::make_unique<CheckpointManager>(config_, args_, mpi_.world_rank());
  if (!config_.eval.tasks.empty()) {
    task_evaluation_ = std::make_unique<TaskEvaluation>(
        config_, *tokenizer_, args_, mpi_.world_rank() == 0,
        checkpoints_->resumes_own_checkpoint());
  }
  open_outputs();
  // Every input is checked: now the large allocations.
  build_model_and_optimizer();
  log_report(run_start_report(config_, start_facts()));
  start_step_ = checkpoints_->resume(*parts_.front(), *optimizer_, *loader_, *mesh_);
  for (const std::string& note : loader_->take_notes()) {
    if (mpi_.world_rank() == 0) spdlog::warn("data: {}", note);
  }
  // A skipped step takes no optimizer step: the steps a checkpoint's run skipped are the ones
  // its optimizer did not take.
  skipped_before_ = std::max<int64_t>(0, (start_step_ - 1) - optimizer_->steps_taken());
}

void Trainer::open_data() {
  const JobConfig& c = config_;
  const TokenizerChoice tokenizer = tokenizer_choice(c);
  tokenizer_ = data::load_tokenizer(tokenizer.spec, tokenizer.key);
  std::vector<data::MixtureSource> sources;
  for (const NamedSourceSpec& named : training_sources(c)) {
    std::shared_ptr<const data::TokenSource> tokens =
        data::open_token_source(named.spec, tokenizer_.get());
    check_packed_window(*tokens, named.spec.path_key, c.training.seq_len, "training.seq_len");
    if (tokens->vocab_bound() > args_.vocab_size) {
      input_error("model.vocab_size: ", args_.vocab_size,
                  " is smaller than the data's vocabulary (",
                  named.name.empty() ? "" : named.spec.path_key + " ", tokens->describe(),
                  " uses ids below ", tokens->vocab_bound(),
                  "); raise model.vocab_size to at least ", tokens->vocab_bound());
    }
    loss_mask_ = loss_mask_ || tokens->packed_window() > 0;
    sources.push_back({named.name, std::move(tokens), named.weight, named.spec.path_key});
  }
  document_eos_ = check_document_eos(c, *tokenizer_, tokenizer.key);
  // The tp and cp ranks of one dp rank read the same tokens (each cp rank then keeps its
  // chunks: local_tokens): the loader only knows the dp rank.
  const parallel::DeviceMesh dp = (*mesh_)[parallel::kDp];
  loader_ = std::make_unique<data::MixtureLoader>(std::move(sources), c.training.seq_len,
                                                  static_cast<uint64_t>(c.training.seed), dp.rank(),
                                                  dp.size(), "training.seq_len");
}

Trainer::ValidationSet Trainer::open_validation_set(const NamedSourceSpec& named) {
  const JobConfig::Validation& v = config_.validation;
  const std::string& key = named.spec.path_key;
  ValidationSet set;
  set.name = named.name;
  set.source = data::open_token_source(named.spec, tokenizer_.get());
  check_packed_window(*set.source, key, batch_.validation_seq_len, "validation.seq_len");
  loss_mask_ = loss_mask_ || set.source->packed_window() > 0;
  if (set.source->vocab_bound() > args_.vocab_size) {
    input_error("model.vocab_size: ", args_.vocab_size,
                " is smaller than the held-out data's vocabulary (", key, " ",
                set.source->describe(), " uses ids below ", set.source->vocab_bound(),
                "); raise model.vocab_size to at least ", set.source->vocab_bound());
  }
  const parallel::DeviceMesh dp = (*mesh_)[parallel::kDp];
  // FixedOrderLoader keeps the key's pointer: validation_keys_ holds the text for the run.
  validation_keys_.push_back(std::make_unique<std::string>(key));
  set.loader = std::make_unique<data::FixedOrderLoader>(
      set.source, batch_.validation_seq_len, dp.rank(), dp.size(), validation_keys_.back()->c_str(),
      "validation.seq_len");
  if (v.steps != -1) {
    int64_t sequences = 0, tokens = 0;
    if (__builtin_mul_overflow(v.steps, batch_.validation_local_batch * dp.size(), &sequences) ||
        __builtin_mul_overflow(sequences, batch_.validation_seq_len, &tokens)) {
      input_error("validation.steps: ", v.steps, " batches of ", batch_.validation_local_batch,
                  " sequences × dp ", dp.size(), " × seq_len ", batch_.validation_seq_len,
                  " tokens overflow 64 bits; use -1 (every whole batch of the held-out data) "
                  "or a count of batches that one validation can run");
    }
    set.batches = v.steps;
    return set;
  }
  // Whole global batches only, so that every mesh with this global batch reads the same windows.
  const int64_t global = batch_.validation_local_batch * dp.size();
  set.batches = set.loader->windows() / global;
  if (set.batches == 0) {
    input_error(key, ": ", set.source->describe(), " holds ", set.loader->windows(), " windows of ",
                batch_.validation_seq_len + 1, " tokens, fewer than one validation batch of ",
                global, " sequences (validation.local_batch_size ", batch_.validation_local_batch,
                " × dp ", dp.size(),
                "); use more held-out data, or lower validation.local_batch_size or "
                "validation.seq_len");
  }
  return set;
}

void Trainer::open_validation_data() {
  if (!config_.validation.enable) return;
  for (const NamedSourceSpec& named : validation_sets(config_)) {
    validation_.push_back(open_validation_set(named));
  }
}

void Trainer::open_outputs() {
  const JobConfig& c = config_;
  const int rank = mpi_.world_rank();
  const std::filesystem::path dump(c.job.dump_folder);
  if (rank == 0) {
    sinks_.push_back(std::make_unique<ConsoleSink>(c.training.steps));
    // A resumed run appends to the metrics of the run it continues.
    if (!c.metrics.jsonl.empty()) {
      sinks_.push_back(std::make_unique<JsonlSink>(
          c.metrics.jsonl, /*append=*/checkpoints_->resumes_own_checkpoint()));
    }
  }
  if (c.metrics.enable_tensorboard && (rank == 0 || c.metrics.save_for_all_ranks)) {
    // One folder per job, not per start (torchtitan adds a time stamp): a resumed run's
    // event files join the same TensorBoard run, so its curves continue.
    std::filesystem::path folder = dump / c.metrics.save_tb_folder;
    if (c.metrics.save_for_all_ranks) folder /= fmt::format("rank_{}", rank);
    sinks_.push_back(std::make_unique<TensorBoardSink>(folder.string()));
  }
  const JobConfig::Profiling& p = c.profiling;
  if (p.enable_profiling) {
    step_profiler_ = std::make_unique<StepProfiler>(
        (dump / p.save_traces_folder).string(),
        ProfileSchedule{p.profile_freq, p.profiler_warmup, p.profiler_active, c.training.steps},
        rank, rank_.device.is_cuda());
  }
  if (p.enable_memory_snapshot) {
    memory_snapshot_ = std::make_unique<MemorySnapshot>(
        (dump / p.save_memory_snapshot_folder).string(), rank, rank_.device);
  }
}

void Trainer::build_model_and_optimizer() {
  const JobConfig& c = config_;
  std::optional<MemoryTagScope> tag(std::in_place, MemoryCategory::Parameters);
  std::vector<int64_t> stages;  // this rank's pipeline stages, in its local order
  if (pipeline_plan_) {
    stages = pipeline_plan_->stages_of(mesh_->coordinate(parallel::MeshDim::Pp));
    for (int64_t s : stages) {
      parts_.push_back(std::make_unique<model::Transformer>(
          args_, DType::F32, model_part(pipeline_plan_->stages[static_cast<size_t>(s)])));
    }
  } else {
    parts_.push_back(std::make_unique<model::Transformer>(args_, DType::F32));
  }
  std::vector<model::Transformer*> parts;
  for (auto& part : parts_) {
    part->set_activation_checkpoint(ac_policy_);
    part->run_attention_on(attention_backend_);
    parts.push_back(part.get());
  }
  parallel_ = parallel::parallelize(parts, *mesh_, parallelize_options(c, rank_.device));
  for (const std::string& line : parallel_.steps) spdlog::debug("parallelize {}", line);
  parallel_.data_parallel->init_weights(static_cast<uint64_t>(c.training.seed));
  tag.emplace(MemoryCategory::OptimizerState);
  const std::vector<model::Parameter*> stepped = parallel_.data_parallel->optimizer_params();
  std::vector<model::ParamHyper> hypers;
  if (!param_hypers_.empty()) {
    for (const model::Parameter* p : stepped) hypers.push_back(param_hypers_.at(p->name));
  }
  if (c.optimizer.name == "Muon") {
    std::shared_ptr<model::WholeMatrices> whole;
    if (mesh_->slice({parallel::MeshDim::DpShard, parallel::MeshDim::Cp, parallel::MeshDim::Tp})
            .size() > 1) {
      whole = std::make_shared<parallel::WholeMatrixExchange>(*mesh_);
    } else {
      whole = std::make_shared<model::LocalMatrices>();
    }
    optimizer_ = std::make_unique<model::Muon>(stepped, muon_config(c), adamw_config(c),
                                               std::move(hypers), std::move(whole));
  } else {
    optimizer_ = std::make_unique<model::AdamW>(stepped, adamw_config(c), std::move(hypers));
  }
  scheduler_ = std::make_unique<model::LrScheduler>(lr_scheduler(c));
  if (args_.tie_word_embeddings && pipeline_plan_) {
    // The pp ranks of the first and the last stage, whose copies of the tied weight meet.
    const int64_t last = static_cast<int64_t>(pipeline_plan_->stages.size()) - 1;
    int64_t embedding_pp = 0, head_pp = 0;
    for (int64_t r = 0; r < dims_.pp; ++r) {
      for (int64_t s : pipeline_plan_->stages_of(r)) {
        if (s == 0) embedding_pp = r;
        if (s == last) head_pp = r;
      }
    }
    tied_weights_ = std::make_unique<parallel::TiedWeights>(stepped, *mesh_, true, embedding_pp,
                                                            head_pp);
  }
  if (pipeline_plan_) {
    std::vector<parallel::PipelineStage> held;
    for (size_t i = 0; i < stages.size(); ++i) held.push_back({stages[i], parts_[i].get()});
    parallel::PipelineShape shape;
    shape.microbatch_size = pipeline_plan_->microbatch_size;
    // The executor is given a cp rank's S/cp tokens of each sequence (local_tokens), which the
    // tp ranks then shard: the rows per rank are b·(S/cp)/tp.
    shape.sequence_shards = dims_.tp;
    shape.dim = args_.dim;
    shape.dtype = compute_dtype_on(rank_.device);
    shape.device = rank_.device;
    pipeline_ = std::make_unique<parallel::PipelineExecutor>(pipeline_plan_->schedule,
                                                             std::move(held), *mesh_, shape);
  }
}

RunStartFacts Trainer::start_facts() const {
  RunStartFacts f;
  f.args = args_;
  f.dims = dims_;
  f.data_parallel = parallel_.data_parallel->describe();
  f.activation_checkpoint = ac_policy_.describe();
  f.pipeline = pipeline_plan_ ? &*pipeline_plan_ : nullptr;
  f.float8 = parallel_.float8;
  for (const auto& part : parts_) f.linear_count += part->linears().size();
  f.tp_table = parallel_.tp_table;
  f.memory = parallel_.data_parallel->memory();
  f.optimizer_state_bytes = optimizer_->state_bytes();
  const data::MixtureLoader& mixture = *loader_;
  for (int64_t k = 0; k < mixture.sources(); ++k) {
    if (k > 0) f.data += "; ";
    if (!mixture.name(k).empty()) {
      f.data += fmt::format("{} (weight {:g}) ", mixture.name(k), config_.data.sources[k].weight);
    }
    f.data += mixture.tokens(k).describe();
    f.windows_per_epoch += mixture.windows_per_epoch(k);
  }
  for (const ValidationSet& set : validation_) {
    if (!f.validation_data.empty()) f.validation_data += "; ";
    if (!set.name.empty()) f.validation_data += set.name + " ";
    f.validation_data += set.source->describe();
    // The report's counts are the first set's; each set's own are in its validation lines.
    if (&set == &validation_.front()) {
      f.validation_batches = set.batches;
      f.validation_windows = set.loader->windows();
    }
  }
  f.batch = batch_;
  f.warmup_steps = scheduler_->warmup_steps();
  f.decay_steps = scheduler_->decay_steps();
  return f;
}

std::unique_ptr<TrainStep> Trainer::make_step() {
  StepParts parts;
  for (auto& part : parts_) parts.parts.push_back(part.get());
  parts.pipeline = pipeline_.get();
  parts.pipeline_microbatch = pipeline_plan_ ? pipeline_plan_->microbatch_size : 0;
  parts.data_parallel = parallel_.data_parallel.get();
  parts.optimizer = optimizer_.get();
  parts.tied_weights = tied_weights_.get();
  parts.scheduler = scheduler_.get();
  parts.loader = loader_.get();
  parts.mesh = &*mesh_;
  parts.tp_waits = parallel_.tp_waits;
  parts.cp_waits = parallel_.cp_waits;
  StepShape shape;
  shape.local_batch = config_.training.local_batch_size;
  shape.seq_len = config_.training.seq_len;
  shape.global_batch = batch_.global_batch;
  shape.accumulation = batch_.accumulation;
  shape.first_step = start_step_;
  shape.skipped_before = skipped_before_;
  shape.faults = faults_;
  shape.document_eos = document_eos_;
  shape.loss_mask = loss_mask_;
  return std::make_unique<TrainStep>(config_, std::move(parts), std::move(shape));
}

TrainingEnd Trainer::train() {
  const JobConfig& c = config_;
  using clock = std::chrono::steady_clock;
  const bool cuda = rank_.device.is_cuda();
  Allocator& memory = allocator_for(rank_.device);  // the peak reported is this rank's device's
  RunFacts facts;
  facts.tokens_per_step = static_cast<double>(batch_.global_batch * c.training.seq_len);
  // torchtitan's model FLOPs per token, against the GPU's bf16 dense peak (none on the CPU).
  facts.flops_per_token = model::training_flops_per_token(args_, c.training.seq_len);
  facts.peak_tflops = cuda ? peak_bf16_tflops(rank_.gpu.info.name) : 0.0;
  facts.world_size = dims_.world_size;
  facts.device_bytes = cuda ? rank_.gpu.info.total_bytes : 0;
  facts.first_step = start_step_;
  facts.last_step = c.training.steps;
  facts.log_freq = c.metrics.log_freq;
  if (document_eos_) {
    const ReportLine line = count_document_attention(facts, args_, loader_->tokens(0),
                                                     c.training.seq_len, *document_eos_);
    if (mpi_.world_rank() == 0) log_report({line});
  }
  auto max_over_ranks = [this](double value) {
    if (dims_.world_size == 1) return value;
    Tensor t = Tensor::from_vector<double>({value}, {1});
    mesh_->comm().all_reduce(t, parallel::ReduceOp::Max);
    return t.data<double>()[0];
  };
  MetricsProcessor metrics(facts, memory, max_over_ranks, std::move(sinks_),
                           mpi_.world_rank() == 0);
  if (pipeline_) {
    metrics.set_pipeline([this](double value) { return max_per_pp_coordinate(*mesh_, value); });
  }
  metrics.write_config(to_yaml(config_));
  // A mixture's tokens per source: windows × seq_len, as the tokens figure counts them; and
  // with a loss mask the step's trained tokens, the count its loss is the mean over.
  if (!config_.data.sources.empty() || loss_mask_) {
    metrics.set_trailing_scalars([this] {
      std::vector<Scalar> scalars;
      if (loss_mask_) scalars.push_back({"trained_tokens", static_cast<double>(trained_tokens_)});
      for (int64_t k = 0; k < loader_->sources() && !config_.data.sources.empty(); ++k) {
        scalars.push_back(
            {"source_tokens/" + loader_->name(k), static_cast<double>(loader_->source_samples(k)) *
                                                      static_cast<double>(loader_->seq_len())});
      }
      return scalars;
    });
  }

  // The weights are initialised or loaded; anything derived from them across ranks (FSDP's
  // precomputed float8 scales) is computed now, not during set-up, which must stay free of
  // collectives once the mesh exists (a rank failing alone there must not strand the others).
  parallel_.data_parallel->on_weights_updated();
  reset_gemm_stats();
  std::unique_ptr<TrainStep> step_runner = make_step();
  // Set-up's waits are no step's; on CUDA they are read once the stream has run them.
  if (cuda) cuda_backend::synchronize();
  step_runner->take_waits();
  const auto train_start = clock::now();
  metrics.start();
  if (memory_snapshot_) memory_snapshot_->start();
  // torchtitan's cadence: step 1 and every validation.freq-th step.
  auto validates = [&](int64_t s) {
    return !validation_.empty() && (s == 1 || s % c.validation.freq == 0);
  };
  auto evaluates = [&](int64_t s) { return task_evaluation_ && task_evaluation_->due(s); };
  int64_t step = start_step_;
  try {
    for (; step <= c.training.steps; ++step) {
      if (step_profiler_) step_profiler_->begin_step(step);
      StepResult result;
      {
        TT_PROFILE_SPAN("step " + std::to_string(step), "step");
        result = step_runner->run(step);
        // The optimizer step is still queued on the GPU: finish it inside the timed window.
        if ((metrics.reports(step) || validates(step) || evaluates(step)) && cuda) {
          cuda_backend::synchronize();
        }
        // On CUDA a step's tp and cp waits are read off events on the stream once they have run:
        // those still queued count in the next step, and a reported step has run them all.
        const StepWaits waits = step_runner->take_waits();
        if (dims_.tp > 1) metrics.add_tp_wait(waits.tp_seconds);
        if (dims_.cp > 1) metrics.add_cp_wait(waits.cp_seconds);
        if (pipeline_)
          metrics.add_pipeline_time(waits.pipeline_seconds, waits.pipeline_wait_seconds);
      }
      if (validates(step)) {
        const auto start = clock::now();
        std::vector<std::pair<std::string, double>> losses;
        for (const ValidationSet& set : validation_) {
          const auto set_start = clock::now();
          const double val_loss = step_runner->validation_loss(
              *set.loader, set.batches, batch_.validation_local_batch, batch_.validation_seq_len);
          losses.emplace_back(set.name.empty() ? "val_loss" : "val_loss/" + set.name, val_loss);
          spdlog::info(
              "validation{}{}: step {}, loss {:.4f} over {} batch{} ({} tokens) in {:.2f} s",
              set.name.empty() ? "" : " ", set.name, step, val_loss, set.batches,
              set.batches == 1 ? "" : "es",
              set.batches * batch_.validation_local_batch * dims_.dp() * batch_.validation_seq_len,
              std::chrono::duration<double>(clock::now() - set_start).count());
        }
        const double seconds = std::chrono::duration<double>(clock::now() - start).count();
        metrics.set_validation_losses(step, std::move(losses), seconds);
      }
      if (evaluates(step)) {
        const auto start = clock::now();
        std::vector<Scalar> scores =
            task_evaluation_->run(*step_runner, step, mpi_.world_rank() == 0);
        metrics.set_task_scores(step, std::move(scores),
                                std::chrono::duration<double>(clock::now() - start).count());
      }
      if (mpi_.world_rank() == 0) {
        for (const std::string& note : loader_->take_notes()) spdlog::info("data: {}", note);
      } else {
        loader_->take_notes();
      }
      if (!result.applied) metrics.note_skipped_step(step, step_runner->skipped_steps());
      trained_tokens_ = result.trained_tokens;
      metrics.end_step(step, result.loss, result.grad_norm, scheduler_->lr(step - 1));
      if (memory_snapshot_) memory_snapshot_->end_step(step);
      const bool preempted = checkpoints_->end_step(step, result.applied, *parts_.front(),
                                                    *optimizer_, *loader_, *mesh_);
      if (step_profiler_) step_profiler_->end_step(step);
      if (fault_due(faults_, mpi_.world_rank(), step, FaultKind::StopAfter)) raise(SIGSTOP);
      if (preempted) {
        metrics.flush();
        return TrainingEnd::Preempted;
      }
    }
    checkpoints_->finish(*mesh_);
  } catch (const OutOfMemory& e) {
    // What held the memory, before the job ends: the reason to have asked for snapshots.
    if (memory_snapshot_) memory_snapshot_->write_out_of_memory(step, e.what());
    // The allocator says what failed; what to change is this program's to say.
    if (cuda) {
      throw OutOfMemory(
          detail::concat(e.what(),
                         "; lower training.local_batch_size or seq_len, or enable activation "
                         "checkpointing"));
    }
    throw;
  }
  metrics.flush();
  finish_run(*step_runner, std::chrono::duration<double>(clock::now() - train_start).count());
  return TrainingEnd::Completed;
}

void Trainer::finish_run(const TrainStep& step, double seconds) {
  const JobConfig& c = config_;
  if (pipeline_) report_pipeline_costs(step.pipeline_runs(), pipeline_plan_->schedule, *mesh_);
  if (start_step_ > c.training.steps) {
    spdlog::info("nothing to train: the checkpoint is at step {} of {}", start_step_ - 1,
                 c.training.steps);
    return;
  }
  if (memory_snapshot_) memory_snapshot_->write_peak(mpi_.world_rank() == 0);
  if (tied_weights_) {
    const std::string copies = tied_weights_->compare_copies();
    // The first rank of the pp group holding the embedding says it, once for the job.
    if (!copies.empty() && mesh_->coordinate(parallel::MeshDim::Pp) == 0 &&
        mesh_->slice({parallel::kDpCp, parallel::MeshDim::Tp}).rank() == 0) {
      spdlog::info("{}", copies);
    }
  }
  RunEndFacts facts;
  facts.trained_steps = c.training.steps - start_step_ + 1;
  facts.seconds = seconds;
  facts.cuda = rank_.device.is_cuda();
  facts.gemm = gemm_stats();
  facts.params = parallel_.data_parallel->memory();
  facts.optimizer_state_bytes = optimizer_->state_bytes();
  log_report(run_end_report(facts));
}

}  // namespace titan::app
