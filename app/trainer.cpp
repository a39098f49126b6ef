#include "app/trainer.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "app/attention_setup.h"
#include "app/config_yaml.h"
#include "app/layer_options.h"
#include "app/metrics/metric_sinks.h"
#include "app/metrics/metrics_processor.h"
#include "app/metrics/tensorboard/tensorboard_sink.h"
#include "app/output_folder.h"
#include "app/plan/memory_plan.h"
#include "core/allocator.h"
#include "core/byte_units.h"
#include "core/cuda/backend.h"
#include "core/cuda/device_query.h"
#include "core/gemm.h"
#include "core/memory_tag.h"
#include "core/profiler.h"
#include "data/documents.h"
#include "model/optim/grad_clip.h"
#include "parallel/comm/mpi_watchdog.h"
#include "parallel/context_parallel.h"
#include "parallel/grad_norm.h"
#include "parallel/parallelize.h"
#include "parallel/tensor_parallel.h"

namespace titan::app {

namespace {

// What the model computes in (and FSDP gathers): torchtitan's FSDP2 default on CUDA, bf16 over
// fp32 master weights; on the CPU bfloat16 keeps f32 storage and rounds the GEMM operands
// (training.mixed_precision_param, bf16_gemm_operands).
DType compute_dtype_on(const Device& device) { return device.is_cuda() ? DType::BF16 : DType::F32; }

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

// The GPU of this rank. "cuda" means one GPU per rank, the node-local rank's (among the devices
// CUDA_VISIBLE_DEVICES leaves visible, as the CUDA runtime numbers them); "cuda:N" pins every
// rank to device N. Ranks may share a GPU only with the MPI backend: the NCCL world refuses two
// ranks on one device when it is made, naming parallelism.comm_backend (nccl_communicator.cpp).
GpuPlacement choose_cuda_device(Device setting, int local_rank, int local_size) {
  const CudaQuery query = query_cuda_devices();
  if (query.devices.empty()) {
    input_error("training.device: '", setting, "' asked for a GPU but none is usable (",
                query.why_none, "); use --training.device cpu");
  }
  const int count = static_cast<int>(query.devices.size());
  if (setting.index_chosen()) {
    if (setting.index >= count) {
      input_error("training.device: '", setting, "' but this process sees ", count,
                  " CUDA device(s) (0..", count - 1, "); use cuda (one per rank) or cuda:0..",
                  count - 1);
    }
    return {query.devices[setting.index], local_size};
  }
  const int index = local_rank % count;
  const int sharers = local_size / count + (index < local_size % count ? 1 : 0);
  return {query.devices[index], sharers};
}

}  // namespace

Trainer::Trainer(JobConfig config, const parallel::MpiRuntime& mpi)
    : config_(std::move(config)), mpi_(mpi), faults_(injected_faults()) {}

Trainer::~Trainer() = default;

void Trainer::check_config() {
  // Set-up's own agreements between ranks are watched with the job's timeout too.
  parallel::set_comm_timeout(config_.parallelism.comm_timeout_s);
  args_ = model_args(config_);
  model::validate_model_args(args_, "model");
  // The pipeline depends on the config alone, not on the world: refused first, so that a plan
  // can be checked on one process.
  check_pipeline();
  check_mesh_and_device();
  check_model_fits_mesh();
  ac_policy_ = activation_checkpoint_policy(config_);
  resolve_batch();
}

void Trainer::check_pipeline() {
  const JobConfig& c = config_;
  if (c.parallelism.pipeline_parallel_degree == 1) return;
  pipeline_plan_ = plan_pipeline(c, args_);
  const int64_t micro = pipeline_plan_->microbatch_size, tp = c.parallelism.tp;
  const int64_t cp = c.parallelism.context_parallel_degree;
  if (tp < 1 || cp < 1) return;  // the mesh's refusal names the degree
  // Each microbatch crosses the stages as tp sequence shards of a cp rank's S/cp tokens.
  const int64_t local_seq = c.training.seq_len / cp;
  if ((micro * local_seq) % tp != 0) {
    input_error("parallelism.pipeline_parallel_microbatch_size: ", micro, " × training.seq_len ",
                c.training.seq_len,
                cp > 1 ? detail::concat(" / context_parallel_degree ", cp) : std::string(), " = ",
                micro * local_seq, " tokens per microbatch do not split into tp ", tp,
                " sequence shards; make microbatch_size × seq_len a multiple of ", tp * cp);
  }
  // Validation runs the training microbatch when it divides the validation batch, else the
  // whole validation batch as one microbatch (validation_loss()).
  if (c.validation.enable) {
    const int64_t batch = c.validation.resolved_local_batch_size(c.training);
    const int64_t seq = c.validation.resolved_seq_len(c.training) / cp;
    const int64_t rows = batch % micro == 0 ? micro : batch;
    if ((rows * seq) % tp != 0) {
      input_error("validation.seq_len: a validation microbatch of ", rows, " × ", seq,
                  " tokens per cp rank does not split into tp ", tp,
                  " sequence shards; make validation.seq_len a multiple of ", tp * cp);
    }
  }
}

void Trainer::setup() {
  TT_CHECK(global_batch_ > 0, "Trainer::setup before check_config");
  // Collective: every rank got here, since main agreed that check_config passed everywhere.
  parallel::CommOptions comm = comm_options(config_);
  comm.backend_key = "parallelism.comm_backend";
  mesh_ = parallel::DeviceMesh::root(dims_, mpi_.world_rank(), comm);
  // From here on nothing in set-up communicates, so a rank that fails alone (a data file its
  // node cannot read) still meets the others at main's next agreement.
  check_memory();
  open_data();
  open_validation_data();
  checkpoints_ = std::make_unique<CheckpointManager>(config_, args_, mpi_.world_rank());
  open_outputs();
  // Every input is checked: now the large allocations.
  build_model_and_optimizer();
  log_start();
  start_step_ = checkpoints_->resume(*parts_.front(), *optimizer_, *loader_, *mesh_);
  // A skipped step takes no optimizer step: the steps a checkpoint's run skipped are the ones
  // its optimizer did not take.
  skipped_steps_ = std::max<int64_t>(0, (start_step_ - 1) - optimizer_->steps_taken());
}

void Trainer::check_mesh_and_device() {
  const JobConfig& c = config_;
  dims_ = parallel_dims(c, mpi_.world_size());
  device_ = c.training.device;
  check_attention_backend(c, args_, dims_.tp, dims_.cp);  // pure: before the GPU is looked for
  if (device_.is_cuda()) {
    gpu_ = choose_cuda_device(c.training.device, mpi_.local_rank(), mpi_.local_size());
    device_ = Device::cuda(gpu_.info.index);
    cuda_backend::set_device(device_.index);
  }
}

void Trainer::check_model_fits_mesh() const {
  parallel::check_tensor_parallel_fit(args_, dims_.tp, "parallelism.tp");
  if (std::string line = use_attention_backend(config_, args_, dims_.tp, dims_.cp, device_);
      !line.empty()) {
    spdlog::info("{}", line);
  }
  const JobConfig::Training& t = config_.training;
  int64_t tokens = 0;
  if (__builtin_mul_overflow(t.local_batch_size, t.seq_len, &tokens) ||
      __builtin_mul_overflow(t.local_batch_size, dims_.dp(), &tokens)) {
    input_error("training.local_batch_size: ", t.local_batch_size, " sequences × seq_len ",
                t.seq_len, " × dp ", dims_.dp(),
                " overflow 64 bits; use a micro-batch that "
                "fits the device (e.g. local_batch_size 8, seq_len 8192)");
  }
}

void Trainer::resolve_batch() {
  const JobConfig::Training& t = config_.training;
  const int64_t dp = dims_.dp();
  const int64_t micro_batch = t.local_batch_size * dp;  // sequences per micro-step, all dp ranks
  global_batch_ = t.global_batch_size == -1 ? micro_batch : t.global_batch_size;
  if (global_batch_ % micro_batch != 0) {
    input_error("training.global_batch_size: ", global_batch_,
                " is not a multiple of local_batch_size ", t.local_batch_size, " × dp ", dp, " = ",
                micro_batch, "; use a multiple of ", micro_batch,
                " (or -1 for no gradient accumulation)");
  }
  accumulation_ = global_batch_ / micro_batch;

  validation_local_batch_ = config_.validation.resolved_local_batch_size(t);
  validation_seq_len_ = config_.validation.resolved_seq_len(t);
}

void Trainer::check_memory() const {
  // The plan of this rank's step (app/plan/memory_plan.h), the one memory model titan_train
  // --plan prints, against this rank's device: its GPU (shared by `sharers` ranks under the MPI
  // backend) or this node's memory, shared by the node's ranks.
  const plan::PlanJob job = plan::plan_job(config_, plan::PlanMesh::of(dims_));
  const plan::MemoryPlan memory = plan::plan_memory(job, device_.is_cuda());
  const int sharers = device_.is_cuda() ? gpu_.sharers : mpi_.local_size();
  const double capacity =
      device_.is_cuda() ? static_cast<double>(gpu_.info.total_bytes) : physical_memory_bytes();
  const double need = memory.total() * sharers;
  if (need <= capacity) return;
  auto gib = [](double bytes) { return fmt::format("{:.1f}", bytes / kGiB); };
  const std::string where =
      device_.is_cuda()
          ? detail::concat(device_, " (", sharers, " rank(s)), whose ", gpu_.info.name, " has ",
                           std::llround(capacity / kGiB), " GiB")
          : detail::concat("this node's ", sharers, " rank(s), which has ",
                           std::llround(capacity / kGiB), " GiB");
  const MemoryCategory largest = plan::largest_category(memory);
  const double part = memory.at_peak[largest] * sharers;
  const std::string over = detail::concat(
      gib(need - capacity), " GiB more than it has; the largest part is ",
      plan::category_name(largest), " (", gib(part), " GiB): ", plan::how_to_shrink(largest, job),
      " (titan_train --plan prints every part)");
  const JobConfig::Training& t = config_.training;
  if (largest == MemoryCategory::Activations) {
    input_error("training.local_batch_size: ", t.local_batch_size, " sequences × seq_len ",
                t.seq_len, " need about ", gib(part),
                " GiB of activations (activation_checkpoint.mode ",
                config_.activation_checkpoint.mode, ") besides ", gib(need - part),
                " GiB of the rest on ", where, ", ", over);
  }
  input_error("model.flavor: ", args_.flavor, " needs ", gib(need),
              " GiB by the plan of its step on ", where, ", ", over);
}

void Trainer::open_data() {
  const JobConfig& c = config_;
  const TokenizerChoice tokenizer = tokenizer_choice(c);
  tokenizer_ = data::load_tokenizer(tokenizer.spec, tokenizer.key);
  source_ = data::open_token_source(training_data(c), tokenizer_.get());
  if (c.model.attention_mask == model::AttentionMaskKind::BlockCausal) {
    document_eos_ = tokenizer_->eos_id();
    if (!document_eos_) {
      input_error(
          "model.attention_mask: block_causal ends each document at the tokenizer's EOS, "
          "but ",
          tokenizer_->describe(), " has none (", tokenizer.key,
          "); use causal, or a tokenizer with an end-of-text token");
    }
  }
  if (source_->vocab_bound() > args_.vocab_size) {
    input_error("model.vocab_size: ", args_.vocab_size, " is smaller than the data's vocabulary (",
                source_->describe(), " uses ids below ", source_->vocab_bound(),
                "); raise model.vocab_size to at least ", source_->vocab_bound());
  }
  // The tp and cp ranks of one dp rank read the same tokens (each cp rank then keeps its
  // chunks: local_tokens): the loader only knows the dp rank.
  const parallel::DeviceMesh dp = mesh_->slice({"dp"});
  loader_ = std::make_unique<data::DataLoader>(
      source_, c.training.seq_len, static_cast<uint64_t>(c.training.seed), dp.rank(), dp.size(),
      data::LoaderKeys{"data.path", "training.seq_len"});
}

void Trainer::open_validation_data() {
  const JobConfig::Validation& v = config_.validation;
  if (!v.enable) return;
  validation_source_ = data::open_token_source(validation_data(config_), tokenizer_.get());
  if (validation_source_->vocab_bound() > args_.vocab_size) {
    input_error("model.vocab_size: ", args_.vocab_size,
                " is smaller than the held-out data's vocabulary (validation.dataset_path ",
                validation_source_->describe(), " uses ids below ",
                validation_source_->vocab_bound(), "); raise model.vocab_size to at least ",
                validation_source_->vocab_bound());
  }
  const parallel::DeviceMesh dp = mesh_->slice({"dp"});
  validation_ = std::make_unique<data::FixedOrderLoader>(
      validation_source_, validation_seq_len_, dp.rank(), dp.size(), "validation.dataset_path",
      "validation.seq_len");
  if (v.steps != -1) {
    int64_t sequences = 0, tokens = 0;
    if (__builtin_mul_overflow(v.steps, validation_local_batch_ * dp.size(), &sequences) ||
        __builtin_mul_overflow(sequences, validation_seq_len_, &tokens)) {
      input_error("validation.steps: ", v.steps, " batches of ", validation_local_batch_,
                  " sequences × dp ", dp.size(), " × seq_len ", validation_seq_len_,
                  " tokens overflow 64 bits; use -1 (every whole batch of the held-out data) "
                  "or a count of batches that one validation can run");
    }
    validation_batches_ = v.steps;
    return;
  }
  // Whole global batches only, so that every mesh with this global batch reads the same windows.
  const int64_t global = validation_local_batch_ * dp.size();
  validation_batches_ = validation_->windows() / global;
  if (validation_batches_ == 0) {
    input_error("validation.dataset_path: ", validation_source_->describe(), " holds ",
                validation_->windows(), " windows of ", validation_seq_len_ + 1,
                " tokens, fewer than one validation batch of ", global,
                " sequences (validation.local_batch_size ", validation_local_batch_, " × dp ",
                dp.size(),
                "); use more held-out data, or lower validation.local_batch_size or "
                "validation.seq_len");
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
        rank, device_.is_cuda());
  }
  if (p.enable_memory_snapshot) {
    memory_snapshot_ = std::make_unique<MemorySnapshot>(
        (dump / p.save_memory_snapshot_folder).string(), rank, device_);
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
    parts.push_back(part.get());
  }
  parallel::ParallelModel parallel_model =
      parallel::parallelize(parts, *mesh_, parallelize_options(c, device_));
  data_parallel_ = parallel_model.data_parallel;
  float8_ = parallel_model.float8;
  tp_table_ = parallel_model.tp_table;
  data_parallel_->init_weights(static_cast<uint64_t>(c.training.seed));
  tag.emplace(MemoryCategory::OptimizerState);
  optimizer_ = std::make_unique<model::AdamW>(data_parallel_->optimizer_params(), adamw_config(c));
  scheduler_ = std::make_unique<model::LrScheduler>(lr_scheduler(c));
  if (pipeline_plan_) {
    std::vector<parallel::PipelineStage> held;
    for (size_t i = 0; i < stages.size(); ++i) held.push_back({stages[i], parts_[i].get()});
    parallel::PipelineShape shape;
    shape.microbatch_size = pipeline_plan_->microbatch_size;
    // The executor is given a cp rank's S/cp tokens of each sequence (local_tokens), which the
    // tp ranks then shard: the rows per rank are b·(S/cp)/tp.
    shape.sequence_shards = dims_.tp;
    shape.dim = args_.dim;
    shape.dtype = compute_dtype_on(device_);
    shape.device = device_;
    pipeline_ = std::make_unique<parallel::PipelineExecutor>(pipeline_plan_->schedule,
                                                             std::move(held), *mesh_, shape);
  }
}

void Trainer::log_start() const {
  const JobConfig& c = config_;
  spdlog::info("titan_train: {}", c.job.description);
  spdlog::info(
      "model {} ({}): dim {}, {} layers, {} heads, {} kv heads, ffn {}, vocab {}; "
      "{:.2f}M parameters",
      args_.flavor, c.model.name, args_.dim, args_.n_layers, args_.n_heads, args_.n_kv_heads,
      args_.ffn_dim, args_.vocab_size, static_cast<double>(model::count_parameters(args_)) / 1e6);
  spdlog::info("mesh {} on {}; {}; activation checkpointing {}", dims_.describe(),
               c.training.device.str(), data_parallel_->describe(), ac_policy_.describe());
  if (pipeline_plan_) {
    const PipelinePlan& p = *pipeline_plan_;
    spdlog::info(
        "pipeline {}: {} stages over pp {}, {} microbatches of {} sequence{} per local batch; "
        "simulated bubble {:.3f}, at most {} microbatch activations held per rank",
        parallel::pipeline::kScheduleKindNames.name(p.schedule.kind), p.stages.size(), dims_.pp,
        p.microbatches(), p.microbatch_size, p.microbatch_size == 1 ? "" : "s", p.simulation.bubble,
        std::max_element(p.simulation.ranks.begin(), p.simulation.ranks.end(),
                         [](const auto& a, const auto& b) { return a.peak_held < b.peak_held; })
            ->peak_held);
    for (int64_t r = 0; r < dims_.pp; ++r) {
      std::string held;
      for (int64_t s : p.stages_of(r)) {
        held += fmt::format("{}stage {} ({})", held.empty() ? "" : ", ", s,
                            parallel::pipeline::describe(p.stages[static_cast<size_t>(s)]));
      }
      spdlog::info("  pp rank {}: {}", r, held);
    }
  }
  if (c.float8.enabled) {
    size_t linear_count = 0;
    for (const auto& part : parts_) linear_count += part->linears().size();
    for (const std::string& line : float8_.auto_filtered) spdlog::warn("{}", line);
    if (c.float8.enable_fsdp_float8_all_gather && dims_.dp_shard == 1) {
      spdlog::warn("float8.enable_fsdp_float8_all_gather: no effect without FSDP (dp_shard 1)");
    }
    spdlog::info("float8 {}: {} of {} linears converted (filter_fqns: {})",
                 fp8::recipe_name(c.float8.recipe), float8_.converted.size(), linear_count,
                 fmt::join(c.float8.filter_fqns, ", "));
  }
  if (dims_.cp > 1) {
    const int64_t S = c.training.seq_len;
    spdlog::info(
        "context parallel cp {} ({}): each rank holds chunks r and {} − r of {} tokens of every "
        "sequence of {} ({} tokens), their attention over the whole sequence",
        dims_.cp, parallel::kCpRotateMethods.name(c.parallelism.context_parallel_comm),
        2 * dims_.cp - 1, S / (2 * dims_.cp), S, S / dims_.cp);
  }
  if (!tp_table_.empty()) {
    spdlog::info("tensor parallel {} (tp {}):",
                 c.parallelism.enable_async_tensor_parallel ? "async" : "synchronous", dims_.tp);
    for (const std::string& line : tp_table_) spdlog::info("  {}", line);
  }
  const parallel::ParamMemory memory = data_parallel_->memory();
  spdlog::info("per rank: parameters {:.2f} MiB, gradients {:.2f} MiB, AdamW state {:.2f} MiB",
               static_cast<double>(memory.param_bytes) / kMiB,
               static_cast<double>(memory.grad_bytes) / kMiB,
               static_cast<double>(optimizer_->state_bytes()) / kMiB);
  spdlog::info("data {}: {} windows of {} tokens per epoch", source_->describe(),
               loader_->windows_per_epoch(), c.training.seq_len);
  if (validation_) {
    const int64_t global = validation_local_batch_ * dims_.dp();
    spdlog::info(
        "validation {}: {} batch{} of {} sequences × {} tokens, in order from its start, after "
        "step 1 and every {} steps",
        validation_source_->describe(), validation_batches_, validation_batches_ == 1 ? "" : "es",
        global, validation_seq_len_, c.validation.freq);
    if (validation_batches_ * global > validation_->windows()) {
      spdlog::warn(
          "validation.steps: {} batches of {} sequences need {} windows but the held-out data "
          "holds {}; the batches past its end start again from its first window",
          validation_batches_, global, validation_batches_ * global, validation_->windows());
    }
  }
  spdlog::info(
      "batch: {} sequences × {} tokens per step ({} micro-step{} of {} per rank), "
      "{} steps, lr {:g} (warmup {}, decay {} {}), seed {}",
      global_batch_, c.training.seq_len, accumulation_, accumulation_ == 1 ? "" : "s",
      c.training.local_batch_size, c.training.steps, c.optimizer.lr, scheduler_->warmup_steps(),
      scheduler_->decay_steps(), model::kDecayTypes.name(c.lr_scheduler.decay_type),
      c.training.seed);
}

void Trainer::inject_step_start_faults(int64_t step) {
  const int rank = mpi_.world_rank();
  if (fault_due(faults_, rank, step, FaultKind::Throw)) {
    throw Error(detail::concat("injected fault (TITAN_FAULT_INJECT) at step ", step));
  }
  if (fault_due(faults_, rank, step, FaultKind::Stop)) raise(SIGSTOP);
  if (fault_due(faults_, rank, step, FaultKind::Late)) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kLateFaultSeconds));
  }
  if (fault_due(faults_, rank, step, FaultKind::ExtraCollective)) mesh_->comm().barrier();
  if (fault_due(faults_, rank, step, FaultKind::Hang)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // stuck, outside MPI
  }
}

void Trainer::poison_one_gradient() {
  for (model::Parameter* p : data_parallel_->optimizer_params()) {
    if (p->grad.defined() && p->grad.numel() > 0) {
      p->grad.view(Shape({p->grad.numel()})).narrow(0, 0, 1).fill_(std::nan(""));
      return;
    }
  }
}

Trainer::LocalTokens Trainer::local_tokens(const Tensor& window, int64_t seq_len) const {
  Tensor inputs = window.narrow(1, 0, seq_len).contiguous();
  Tensor targets = window.narrow(1, 1, seq_len).contiguous();
  Tensor doc_start = document_eos_ ? data::document_starts(inputs, *document_eos_) : Tensor();
  if (dims_.cp == 1) return {inputs, targets, doc_start};
  // Cut after the shift, so that each target stays beside its input, and the document starts
  // (global positions) with them.
  const int64_t rank = mesh_->coordinate(parallel::MeshDim::Cp);
  return {parallel::cp_shard(inputs, 1, dims_.cp, rank),
          parallel::cp_shard(targets, 1, dims_.cp, rank),
          doc_start.defined() ? parallel::cp_shard(doc_start, 1, dims_.cp, rank) : Tensor()};
}

Trainer::StepOutcome Trainer::train_step(int64_t step) {
  const JobConfig& c = config_;
  const int64_t S = c.training.seq_len, B = c.training.local_batch_size;
  const double global_tokens = static_cast<double>(global_batch_ * S);
  inject_step_start_faults(step);

  data_parallel_->zero_grad();
  double loss_sum = 0;
  for (int64_t micro = 0; micro < accumulation_; ++micro) {
    auto [inputs, targets, doc_start] = local_tokens(loader_->next_batch(B), S);
    // Each token's loss is scaled by 1 / (the global batch's tokens), so summing the gradients
    // over the dp ranks (FSDP's reduce-scatter, DDP's all-reduce) and over the microbatches of
    // a pipeline and of accumulation gives the global mean's, whatever the schedule.
    if (pipeline_) {
      loss_sum += pipeline_->train(inputs, targets, 1.0 / global_tokens, doc_start);
      const parallel::PipelineTiming& timing = pipeline_->last_timing();
      pipeline_seconds_ += timing.seconds;
      pipeline_wait_seconds_ += timing.wait_seconds;
      // The run's figures leave out the first step, which warms the caches and the allocator.
      if (step > start_step_) {
        pipeline_run_ += timing;
        pipeline_ran_.push_back(timing.ran);
        if (pipeline_ran_.size() > kReplayedRuns) pipeline_ran_.pop_front();
      }
    } else {
      loss_sum += parts_.front()->forward(inputs, targets, 1.0 / global_tokens, doc_start);
      parts_.front()->backward();
    }
  }
  data_parallel_->finish_gradients();
  const int rank = mpi_.world_rank();
  if (fault_due(faults_, rank, step, FaultKind::NanGrad)) poison_one_gradient();
  if (fault_due(faults_, rank, step, FaultKind::NanLoss)) loss_sum = std::nan("");
  // Every tp rank of a dp rank has the same loss (loss parallel), each cp rank the sum over its
  // own tokens, and only the pipeline's last stage has one: sum over pp, dp and cp, so that
  // every rank reports the global loss.
  Tensor sum = Tensor::from_vector<double>({loss_sum}, {1});
  const parallel::DeviceMesh losses = mesh_->slice({"pp", "dp_cp"});
  if (losses.size() > 1) losses.comm().all_reduce(sum, parallel::ReduceOp::Sum);
  StepOutcome outcome;
  outcome.loss = sum.data<double>()[0] / global_tokens;
  // The loss and the norm are reduced over the job: every rank takes the same branch below,
  // before anything touches the weights.
  outcome.grad_norm = std::nan("");
  std::vector<model::Parameter*> params = data_parallel_->optimizer_params();
  if (std::isfinite(outcome.loss)) {
    profiler::Span span("grad_norm", "optimizer");
    outcome.grad_norm = parallel::global_grad_norm(params, *mesh_);
  }
  if (!std::isfinite(outcome.loss) || !std::isfinite(outcome.grad_norm)) {
    skip_nonfinite_step(step, outcome.loss, outcome.grad_norm);
    outcome.applied = false;
    return outcome;
  }
  model::clip_grads_to_norm(params, outcome.grad_norm, c.training.max_norm);
  profiler::Span optimizer_span("optimizer", "optimizer");
  optimizer_->step(scheduler_->lr(step - 1));
  data_parallel_->on_weights_updated();
  return outcome;
}

void Trainer::report_pipeline_costs() {
  // The runs replayed with each action's own time (pipeline::replayed_bubble): what the
  // variation of the actions' times adds to the bubble. A collective over pp: before any return.
  const std::string replayed = replayed_pipeline_bubble();
  // Every rank's figures, summed over the job: F, B, I, W seconds and counts, wait, total.
  const parallel::PipelineTiming& r = pipeline_run_;
  std::vector<double> figures;
  for (double s : r.compute_seconds) figures.push_back(s);
  for (int64_t n : r.computes) figures.push_back(static_cast<double>(n));
  figures.push_back(r.wait_seconds);
  figures.push_back(r.seconds);
  figures.push_back(static_cast<double>(r.weight_grads_run_early));
  Tensor sums = Tensor::from_vector<double>(figures, {static_cast<int64_t>(figures.size())});
  // And the slowest rank's pipeline time: the run's makespan, for the bubble in the
  // simulator's terms (pipeline::measured_bubble).
  Tensor slowest = Tensor::from_vector<double>({r.seconds}, {1});
  if (dims_.world_size > 1) {
    mesh_->comm().all_reduce(sums, parallel::ReduceOp::Sum);
    mesh_->comm().all_reduce(slowest, parallel::ReduceOp::Max);
  }
  const double* f = sums.data<double>();
  if (mpi_.world_rank() != 0 || f[9] <= 0) return;  // nothing timed: a run of one step
  const double measured =
      parallel::pipeline::measured_bubble(f[9], f[8], dims_.world_size, slowest.data<double>()[0]);
  // Mean milliseconds of one stage's compute on one microbatch, by kind; 0 for a kind not run.
  std::array<double, 4> ms{};
  for (size_t k = 0; k < 4; ++k) ms[k] = f[4 + k] > 0 ? 1000.0 * f[k] / f[4 + k] : 0.0;
  // The schedule simulated with those costs (in microseconds), against the bubble measured in
  // the same terms: the ranks' idle share of the slowest one's pipeline time.
  auto micros = [](double v) { return std::max<int64_t>(1, std::llround(1000.0 * v)); };
  parallel::pipeline::SimulationCosts costs;
  costs.forward = micros(ms[0]);
  costs.backward_full = micros(ms[1] > 0 ? ms[1] : ms[2] + ms[3]);
  costs.backward_input = micros(ms[2] > 0 ? ms[2] : ms[1] / 2);
  costs.backward_weight = micros(ms[3] > 0 ? ms[3] : ms[1] / 2);
  const parallel::pipeline::Outcome<parallel::pipeline::Simulation> simulated =
      parallel::pipeline::simulate(pipeline_plan_->schedule, costs);
  // The Ws the executor ran ahead of their place while a receive was late (PipelineExecutor).
  const std::string early =
      f[7] > 0 ? fmt::format("; {:.0f} of the {:.0f} W ran early, in place of a wait", f[10], f[7])
               : std::string();
  spdlog::info(
      "pipeline: one stage on one microbatch took F {:.2f} ms, B {:.2f} ms, I {:.2f} ms, W {:.2f} "
      "ms (mean over ranks and steps after the first); simulated with these costs the schedule "
      "idles {:.3f} of the time{}; measured {:.3f}{}",
      ms[0], ms[1], ms[2], ms[3], simulated ? simulated.value().bubble : std::nan(""), replayed,
      measured, early);
}

std::string Trainer::replayed_pipeline_bubble() {
  // Each rank's runs, as (list index, microseconds) pairs in a [run][pp rank][compute] layout
  // padded to the longest list, summed over the pp group: each rank fills only its own rows.
  namespace pipeline = parallel::pipeline;
  const pipeline::PipelineSchedule& schedule = pipeline_plan_->schedule;
  const int64_t pp = schedule.pp();
  std::vector<size_t> computes(static_cast<size_t>(pp), 0);
  for (size_t r = 0; r < computes.size(); ++r) {
    for (const pipeline::Action& a : schedule.ranks[r]) computes[r] += a.is_compute() ? 1 : 0;
  }
  const size_t widest = *std::max_element(computes.begin(), computes.end());
  const size_t runs = pipeline_ran_.size();
  const parallel::DeviceMesh pp_group = (*mesh_)["pp"];
  const size_t me = static_cast<size_t>(pp_group.rank());
  std::vector<double> rows(runs * static_cast<size_t>(pp) * widest * 2, 0.0);
  for (size_t run = 0; run < runs; ++run) {
    const std::vector<pipeline::RanCompute>& ran = pipeline_ran_[run];
    for (size_t n = 0; n < ran.size() && n < widest; ++n) {
      const size_t at = ((run * static_cast<size_t>(pp) + me) * widest + n) * 2;
      rows[at] = static_cast<double>(ran[n].index);
      rows[at + 1] = static_cast<double>(ran[n].cost);
    }
  }
  if (rows.empty()) return "";
  Tensor all = Tensor::from_vector<double>(rows, {static_cast<int64_t>(rows.size())});
  pp_group.comm().all_reduce(all, parallel::ReduceOp::Sum);
  if (mpi_.world_rank() != 0) return "";
  const double* f = all.data<double>();
  std::vector<std::vector<std::vector<pipeline::RanCompute>>> replays(runs);
  for (size_t run = 0; run < runs; ++run) {
    for (size_t r = 0; r < computes.size(); ++r) {
      std::vector<pipeline::RanCompute>& ran = replays[run].emplace_back();
      for (size_t n = 0; n < computes[r]; ++n) {
        const size_t at = ((run * static_cast<size_t>(pp) + r) * widest + n) * 2;
        ran.push_back({std::llround(f[at]), std::llround(f[at + 1])});
      }
    }
  }
  const pipeline::Outcome<double> bubble = pipeline::replayed_bubble(schedule, replays);
  if (!bubble) return fmt::format(", not replayed ({})", bubble.error());
  return fmt::format(", and with each action's own time {:.3f}", bubble.value());
}

void Trainer::skip_nonfinite_step(int64_t step, double loss, double grad_norm) {
  const JobConfig& c = config_;
  const std::string what = std::isfinite(loss) ? detail::concat("gradient norm is ", grad_norm)
                                               : detail::concat("loss is ", loss);
  const int64_t allowed = c.training.skip_nonfinite_steps;
  if (skipped_steps_ >= allowed) {
    const std::string skips =
        allowed == 0
            ? std::string("; to skip such steps instead, set training.skip_nonfinite_steps")
            : detail::concat(" after ", skipped_steps_, " skipped step",
                             skipped_steps_ == 1 ? "" : "s", " (training.skip_nonfinite_steps ",
                             allowed, ")");
    throw TrainingDiverged(
        detail::concat("step ", step, ": ", what, "; training diverged", skips,
                       ". Lower optimizer.lr (now ", c.optimizer.lr,
                       ") or lengthen lr_scheduler.warmup_steps (now ", c.lr_scheduler.warmup_steps,
                       "), and check training.max_norm (now ", c.training.max_norm, ")"));
  }
  ++skipped_steps_;
  spdlog::warn(
      "step {}: {}; step skipped: the weights and AdamW state keep their values, and no "
      "checkpoint of step {} is written ({} of training.skip_nonfinite_steps {} used)",
      step, what, step, skipped_steps_, allowed);
}

bool Trainer::validates(int64_t step) const {
  return validation_ != nullptr && (step == 1 || step % config_.validation.freq == 0);
}

double Trainer::validation_loss() {
  profiler::Span span("validation", "validation");
  const int64_t S = validation_seq_len_, B = validation_local_batch_;
  double loss_sum = 0;
  for (int64_t k = 0; k < validation_batches_; ++k) {
    // The same windows every evaluation.
    auto [inputs, targets, doc_start] = local_tokens(validation_->batch(k, B), S);
    if (pipeline_) {
      // The training microbatch when it divides the validation batch, else one microbatch.
      const int64_t micro =
          B % pipeline_plan_->microbatch_size == 0 ? pipeline_plan_->microbatch_size : B;
      loss_sum += pipeline_->evaluate(inputs, targets, micro, doc_start);
    } else {
      loss_sum += parts_.front()->evaluate(inputs, targets, doc_start);
    }
  }
  // As train_step: the tp ranks of a dp rank hold the same sum, a cp rank its tokens' sum, and
  // only the last stage one.
  Tensor sum = Tensor::from_vector<double>({loss_sum}, {1});
  const parallel::DeviceMesh losses = mesh_->slice({"pp", "dp_cp"});
  if (losses.size() > 1) losses.comm().all_reduce(sum, parallel::ReduceOp::Sum);
  return sum.data<double>()[0] / static_cast<double>(validation_batches_ * B * dims_.dp() * S);
}

Trainer::Outcome Trainer::train() {
  const JobConfig& c = config_;
  using clock = std::chrono::steady_clock;
  Allocator& memory = allocator_for(device_);  // the peak reported is this rank's device's
  RunFacts facts;
  facts.tokens_per_step = static_cast<double>(global_batch_ * c.training.seq_len);
  // torchtitan's model FLOPs per token, against the GPU's bf16 dense peak (none on the CPU).
  facts.flops_per_token = model::training_flops_per_token(args_, c.training.seq_len);
  if (document_eos_) {
    // block_causal: attention counted over the documents tokens attend within (data/
    // documents.h), sampled from the training data; said once, and beside every mfu.
    const data::DocumentContext d =
        data::sample_document_context(*source_, c.training.seq_len, *document_eos_);
    if (d.windows > 0) {
      facts.attention_keys = d.keys_per_token;
      facts.flops_per_token = model::training_flops_per_token(args_, d.keys_per_token);
    }
    if (mpi_.world_rank() == 0) {
      spdlog::info(
          "block_causal: tflops and MFU count attention over {:.1f} keys a token (Σ n²/S over "
          "the documents of {} windows of data.path, {:.1f} documents a window), not {}",
          d.keys_per_token, d.windows, d.mean_documents, c.training.seq_len);
    }
  }
  facts.peak_tflops = device_.is_cuda() ? peak_bf16_tflops(gpu_.info.name) : 0.0;
  facts.world_size = dims_.world_size;
  facts.device_bytes = device_.is_cuda() ? gpu_.info.total_bytes : 0;
  facts.first_step = start_step_;
  facts.last_step = c.training.steps;
  facts.log_freq = c.metrics.log_freq;
  auto max_over_ranks = [this](double value) {
    if (dims_.world_size == 1) return value;
    Tensor t = Tensor::from_vector<double>({value}, {1});
    mesh_->comm().all_reduce(t, parallel::ReduceOp::Max);
    return t.data<double>()[0];
  };
  MetricsProcessor metrics(facts, memory, max_over_ranks, std::move(sinks_),
                           mpi_.world_rank() == 0);
  if (pipeline_) {
    // Each pp coordinate's maximum over the ranks at it: a world all-gather, read by coordinate.
    metrics.set_pipeline([this](double value) {
      const int64_t world = dims_.world_size;
      Tensor all = Tensor::empty({world}, DType::F64);
      mesh_->comm().all_gather(all, Tensor::from_vector<double>({value}, {1}));
      std::vector<double> per_rank(static_cast<size_t>(dims_.pp), 0.0);
      const int64_t per_stage = world / dims_.pp;  // pp is the outermost dim
      for (int64_t w = 0; w < world; ++w) {
        double& slot = per_rank[static_cast<size_t>(w / per_stage)];
        slot = std::max(slot, all.data<double>()[w]);
      }
      return per_rank;
    });
  }
  metrics.write_config(to_yaml(config_));

  // The weights are initialised or loaded; anything derived from them across ranks (FSDP's
  // precomputed float8 scales) is computed now, not during set-up, which must stay free of
  // collectives once the mesh exists (a rank failing alone there must not strand the others).
  data_parallel_->on_weights_updated();
  reset_gemm_stats();
  // Set-up's waits are no step's; on CUDA they are read once the stream has run them.
  if (device_.is_cuda()) cuda_backend::synchronize();
  parallel::take_tp_wait_seconds();
  parallel::take_cp_wait_seconds();
  const auto train_start = clock::now();
  metrics.start();
  if (memory_snapshot_) memory_snapshot_->start();
  int64_t step = start_step_;
  try {
    for (; step <= c.training.steps; ++step) {
      if (step_profiler_) step_profiler_->begin_step(step);
      StepOutcome outcome;
      {
        TT_PROFILE_SPAN("step " + std::to_string(step), "step");
        outcome = train_step(step);
        // The optimizer step is still queued on the GPU: finish it inside the timed window.
        if ((metrics.reports(step) || validates(step)) && device_.is_cuda()) {
          cuda_backend::synchronize();
        }
        // On CUDA a step's tp and cp waits are read off events on the stream once they have run:
        // those still queued count in the next step, and a reported step has run them all.
        if (dims_.tp > 1) metrics.add_tp_wait(parallel::take_tp_wait_seconds());
        if (dims_.cp > 1) metrics.add_cp_wait(parallel::take_cp_wait_seconds());
        if (pipeline_) {
          metrics.add_pipeline_time(std::exchange(pipeline_seconds_, 0.0),
                                    std::exchange(pipeline_wait_seconds_, 0.0));
        }
      }
      if (validates(step)) {
        const auto start = clock::now();
        const double val_loss = validation_loss();  // ends on the host: nothing left queued
        parallel::take_tp_wait_seconds();           // validation's tp and cp waits are no step's
        parallel::take_cp_wait_seconds();
        const double seconds = std::chrono::duration<double>(clock::now() - start).count();
        metrics.set_validation_loss(step, val_loss, seconds);
        spdlog::info(
            "validation: step {}, loss {:.4f} over {} batch{} ({} tokens) in {:.2f} s", step,
            val_loss, validation_batches_, validation_batches_ == 1 ? "" : "es",
            validation_batches_ * validation_local_batch_ * dims_.dp() * validation_seq_len_,
            seconds);
      }
      if (!outcome.applied) metrics.note_skipped_step(step, skipped_steps_);
      metrics.end_step(step, outcome.loss, outcome.grad_norm, scheduler_->lr(step - 1));
      if (memory_snapshot_) memory_snapshot_->end_step(step);
      const bool preempted = checkpoints_->end_step(step, outcome.applied, *parts_.front(),
                                                    *optimizer_, *loader_, *mesh_);
      if (step_profiler_) step_profiler_->end_step(step);
      if (fault_due(faults_, mpi_.world_rank(), step, FaultKind::StopAfter)) raise(SIGSTOP);
      if (preempted) {
        metrics.flush();
        return Outcome::Preempted;
      }
    }
    checkpoints_->finish(*mesh_);
  } catch (const OutOfMemory& e) {
    // What held the memory, before the job ends: the reason to have asked for snapshots.
    if (memory_snapshot_) memory_snapshot_->write_out_of_memory(step, e.what());
    // The allocator says what failed; what to change is this program's to say.
    if (device_.is_cuda()) {
      throw OutOfMemory(
          detail::concat(e.what(),
                         "; lower training.local_batch_size or seq_len, or enable activation "
                         "checkpointing"));
    }
    throw;
  }
  metrics.flush();
  if (pipeline_) report_pipeline_costs();
  if (memory_snapshot_ && start_step_ <= c.training.steps) {
    memory_snapshot_->write_peak(mpi_.world_rank() == 0);
  }
  if (start_step_ > c.training.steps) {
    spdlog::info("nothing to train: the checkpoint is at step {} of {}", start_step_ - 1,
                 c.training.steps);
    return Outcome::Completed;
  }
  const double total = std::chrono::duration<double>(clock::now() - train_start).count();
  const int64_t trained = c.training.steps - start_step_ + 1;
  if (device_.is_cuda()) {
    // GEMMs are queued, not timed, on a GPU: the host clock around a launch says nothing.
    spdlog::info("trained {} steps in {:.1f} s", trained, total);
  } else {
    const GemmStats gemm = gemm_stats();
    spdlog::info(
        "trained {} steps in {:.1f} s; GEMMs took {:.1f} s ({:.0f}% of the time, "
        "{:.1f} GFLOP/s over {} calls)",
        trained, total, gemm.seconds, 100.0 * gemm.seconds / total, gemm.flops / gemm.seconds / 1e9,
        gemm.calls);
  }
  const parallel::ParamMemory params = data_parallel_->memory();
  if (params.peak_unsharded_bytes > 0) {
    const double persistent =
        static_cast<double>(params.param_bytes + params.grad_bytes + optimizer_->state_bytes());
    spdlog::info(
        "FSDP: at most {:.2f} MiB of gathered parameters, their gradients and collective buffers "
        "at once; peak parameter + gradient + optimizer memory {:.2f} MiB per rank",
        static_cast<double>(params.peak_unsharded_bytes) / kMiB,
        (persistent + static_cast<double>(params.peak_unsharded_bytes)) / kMiB);
    spdlog::info("FSDP: all-gathered {:.2f} MiB per step per rank",
                 static_cast<double>(params.gathered_bytes) / kMiB / static_cast<double>(trained));
  }
  return Outcome::Completed;
}

}  // namespace titan::app
