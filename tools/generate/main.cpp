// titan_generate: text from a titan_train checkpoint or a Hugging Face Llama 3 folder, with a KV
// cache, on the CPU or CUDA; tensor-parallel under mpirun (each rank holds its heads, and the
// cache its kv heads); or, with --eval, the mean token loss of a file; or, with --tasks, the
// accuracy on multiple-choice tasks (docs/evaluation.md). docs/generation.md.
//
// clang-format off
//   titan_generate --model outputs/checkpoint/step-200 --prompt "In the beginning" [--prompt …]
//   titan_generate --model hf/ --prompts prompts.jsonl --top-p 0.9 --jsonl out.jsonl
//   mpirun -np 2 titan_generate --model … --prompt …     (tp 2: each rank holds half the heads)
//   titan_generate --model … --eval data/val --eval-batch-size 4 --eval-seq-len 256
//   titan_generate --model … --tasks hellaswag.jsonl arc:arc_easy.jsonl --limit 500 --jsonl r.jsonl
// clang-format on
//
// Set-up is two phases, as titan_train's (docs/architecture.md#decision-12): every rank checks
// the command line, the model's files, the tokenizer and the prompts (rank 0 reads them), then
// all agree; only then is the mesh made and the weights read, and all agree again. Bad input is
// one line and exit code 2 from the lowest failing rank, before anything large is allocated.
// After set-up a failing rank ends the job. stdout holds the text (or the --eval result); the
// model, the KV cache's size and the speeds go to stderr, from rank 0.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/blas_core.h"            // defines: use_best_blas_core, blas_core_note
#include "core/byte_units.h"
#include "core/cuda/backend.h"         // defines: set_device
#include "core/cuda/device_query.h"    // defines: query_cuda_devices
#include "core/exit_code.h"            // defines: ExitCode, exit_status
#include "data/task_scoring.h"         // defines: TaskScoring, task_item_record
#include "data/tokenizer.h"            // defines: load_tokenizer
#include "model/inference/decoder.h"   // defines: Decoder
#include "model/linear.h"              // defines: HighPrecisionGemms
#include "parallel/device_mesh.h"      // defines: DeviceMesh
#include "parallel/mpi_runtime.h"      // defines: MpiRuntime
#include "parallel/parallelize.h"      // defines: check_tensor_parallel_fit
#include "parallel/process_setup.h"    // defines: start_mpi, run_setup_phases, choose_gpu
#include "parallel/tensor_parallel.h"  // defines: TensorParallelGroup
#include "tools/generate/evaluation.h"
#include "tools/generate/generation.h"
#include "tools/generate/model_source.h"
#include "tools/generate/options.h"
#include "tools/generate/prompts.h"
#include "tools/generate/records.h"

namespace {

using titan::exit_status;
using titan::ExitCode;
using titan::input_error;
using titan::kGiB;
using titan::Tensor;
namespace gen = titan::generate;

constexpr int64_t kDefaultBatch = 8;
constexpr std::string_view kProgram = "titan_generate";

// Everything set-up decides, kept for the run.
struct Job {
  gen::Options options;
  gen::ModelSource source;
  std::unique_ptr<titan::data::Tokenizer> tokenizer;
  int64_t position_limit = 0;
  int64_t batch_size = 0;
  bool stream = false;
  titan::Device device;
  std::vector<gen::Prompt> prompts;  // rank 0's until shared
  std::unique_ptr<gen::Evaluation> evaluation;
  std::unique_ptr<titan::data::TaskScoring> scoring;      // --tasks
  std::unique_ptr<std::ofstream> task_scores;     // rank 0
  std::unique_ptr<std::ofstream> jsonl;  // rank 0
  std::vector<std::string> warnings;     // printed by rank 0 once set-up has succeeded
};

std::string dtype_text(titan::DType dtype) { return dtype == titan::DType::BF16 ? "bf16" : "f32"; }

// The GPU of this rank: --device cuda:N, or the node-local rank's among the visible ones.
titan::Device choose_device(titan::Device setting, int local_rank, int local_size) {
  if (setting.is_cpu()) return setting;
  return titan::Device::cuda(
      titan::parallel::choose_gpu(setting, local_rank, local_size, "--device").info.index);
}

// BOS (unless --no-bos) and the encoded text, each within the sequence limit.
std::vector<gen::Prompt> tokenize_prompts(const std::vector<std::string>& texts, const Job& job) {
  std::vector<gen::Prompt> prompts;
  const std::optional<int32_t> bos = job.tokenizer->bos_id();
  for (size_t i = 0; i < texts.size(); ++i) {
    gen::Prompt p{static_cast<int64_t>(i), texts[i], {}};
    if (job.options.bos && bos) p.ids.push_back(*bos);
    const std::vector<int32_t> ids = job.tokenizer->encode(texts[i]);
    p.ids.insert(p.ids.end(), ids.begin(), ids.end());
    if (p.ids.empty()) {
      input_error("prompt ", i + 1,
                  " is empty and --no-bos leaves it no token; give it text, or "
                  "drop --no-bos");
    }
    if (static_cast<int64_t>(p.ids.size()) >= job.position_limit) {
      input_error("prompt ", i + 1, " is ", p.ids.size(),
                  " tokens, and the model's sequence limit is ", job.position_limit, " positions (",
                  job.options.max_seq_len ? "--max-seq-len" : "its max_position_embeddings",
                  "), which leaves no room for a new token; shorten the prompt",
                  job.options.max_seq_len ? " or raise --max-seq-len" : "");
    }
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// Weights and the largest batch's KV cache against what this rank's device (or the node's
// ranks) can hold: refused before any of it is allocated.
void check_memory(const Job& job, int tp, int ranks_on_node) {
  const titan::model::ModelArgs& args = job.source.args;
  const double width = job.device.is_cuda() ? titan::dtype_size(job.options.dtype) : 4.0;
  const double weights = static_cast<double>(titan::model::count_parameters(args)) * width / tp;
  double cache = 0;
  int64_t cache_batch = 0, cache_positions = 0;
  if (!job.prompts.empty()) {
    gen::GenerationSettings settings;
    settings.max_new_tokens = job.options.max_new_tokens;
    settings.position_limit = job.position_limit;
    for (size_t begin = 0; begin < job.prompts.size(); begin += job.batch_size) {
      const std::vector<gen::Prompt> batch(
          job.prompts.begin() + begin,
          job.prompts.begin() + std::min(job.prompts.size(), begin + job.batch_size));
      const int64_t positions = gen::cache_positions(batch, settings);
      const titan::model::KvCacheShape shape{
          args.n_layers,        static_cast<int64_t>(batch.size()),
          args.n_kv_heads / tp, positions,
          args.head_dim(),      job.options.dtype};
      if (static_cast<double>(shape.bytes()) > cache) {
        cache = static_cast<double>(shape.bytes());
        cache_batch = static_cast<int64_t>(batch.size());
        cache_positions = positions;
      }
    }
  }
  double capacity = 0;
  int sharers = 1;
  if (job.device.is_cuda()) {
    capacity =
        static_cast<double>(titan::query_cuda_devices().devices.at(job.device.index).total_bytes);
  } else {
    capacity =
        static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    sharers = ranks_on_node;
  }
  const double needed = (weights + cache) * sharers;
  if (needed > 0.9 * capacity) {
    input_error("--model: ", job.source.describe(), " needs about ", std::llround(needed / kGiB),
                " GiB (weights ", std::llround(weights / kGiB), " GiB per rank, KV cache ",
                std::llround(cache / kGiB), " GiB for ", cache_batch, " sequences × ",
                cache_positions, " positions) but ", job.device,
                job.device.is_cuda() ? "" : " (this node)", " has ", std::llround(capacity / kGiB),
                " GiB; lower --batch-size or --max-new-tokens, use --dtype bf16, or spread the "
                "model over more ranks (mpirun -np)");
  }
}

// Phase 1: everything that can be wrong with the input, on every rank, before the mesh exists.
void check_input(Job& job, int argc, char** argv, const titan::parallel::MpiRuntime& mpi,
                 bool& help) {
  const bool rank0 = mpi.world_rank() == 0;
  titan::parallel::configure_gemm_threads(mpi.local_size());
  std::optional<gen::Options> parsed = gen::parse_options(argc, argv, rank0);
  if (!parsed) {
    help = true;
    return;
  }
  job.options = std::move(*parsed);
  gen::Options& o = job.options;
  gen::check_options(o);
  if ((!o.eval.empty() || !o.tasks.empty()) && mpi.world_size() > 1) {
    input_error(o.eval.empty() ? "--tasks" : "--eval", " runs on one rank, and this job has ",
                mpi.world_size(),
                "; start it without mpirun (or with -np 1)");
  }
  if (o.cuda_graph && mpi.world_size() > 1) {
    input_error("--cuda-graph on with ", mpi.world_size(),
                " ranks: the tensor-parallel all-reduce goes through MPI on the host, which a "
                "CUDA graph cannot capture; run one rank (no mpirun), or leave --cuda-graph off");
  }
  job.source = gen::find_model(o.model);
  job.warnings = job.source.notes;
  titan::parallel::check_tensor_parallel_fit(job.source.args, mpi.world_size(),
                                             "mpirun -np (the tensor-parallel degree)");
  job.device = choose_device(o.device, mpi.local_rank(), mpi.local_size());
  const std::string tokenizer = o.tokenizer.empty() ? job.source.default_tokenizer : o.tokenizer;
  job.tokenizer = titan::data::load_tokenizer(tokenizer, "--tokenizer");
  if (job.tokenizer->vocab_size() > job.source.args.vocab_size) {
    input_error("--tokenizer: ", job.tokenizer->describe(), " has ", job.tokenizer->vocab_size(),
                " tokens but the model's vocabulary (", job.source.describe(), ") has ",
                job.source.args.vocab_size,
                "; give the tokenizer the model was trained with (--tokenizer byte, or its "
                "tokenizer.json)");
  }
  job.position_limit = o.max_seq_len.value_or(job.source.position_limit);
  const std::string capped = gen::cap_max_new_tokens(
      o, job.position_limit,
      o.max_seq_len ? "--max-seq-len" : "the model's max_position_embeddings");
  if (!capped.empty() && o.eval.empty() && o.tasks.empty()) job.warnings.push_back(capped);
  const bool terminal = isatty(STDOUT_FILENO) == 1;
  job.batch_size = o.batch_size.value_or(terminal ? 1 : kDefaultBatch);
  job.stream = terminal && job.batch_size == 1;
  if (!o.eval.empty()) {
    std::optional<int32_t> document_eos;
    if (o.eval_attention_mask == titan::model::AttentionMaskKind::BlockCausal) {
      document_eos = job.tokenizer->eos_id();
      if (!document_eos) {
        titan::input_error(
            "--eval-attention-mask block_causal ends each document at the "
            "tokenizer's EOS, but ",
            job.tokenizer->describe(),
            " has none; use causal, or a tokenizer with an end-of-text token");
      }
    }
    job.evaluation = std::make_unique<gen::Evaluation>(
        o.eval, *job.tokenizer, job.source.args.vocab_size, o.eval_steps, o.eval_batch_size,
        o.eval_seq_len, document_eos);
  } else if (!o.tasks.empty()) {
    std::vector<titan::data::Task> tasks;
    for (const std::string& spec : o.tasks) {
      tasks.push_back(titan::data::read_task_spec(spec, "--tasks", o.limit));
    }
    job.scoring = std::make_unique<titan::data::TaskScoring>(
        std::move(tasks), *job.tokenizer,
        o.bos ? job.tokenizer->bos_id() : std::optional<int32_t>(), job.position_limit,
        o.max_seq_len ? "--max-seq-len" : "the model's max_position_embeddings", o.num_fewshot,
        static_cast<uint64_t>(o.fewshot_seed));
  } else if (rank0) {
    job.prompts = tokenize_prompts(gen::read_prompts(o), job);
  }
  if (rank0 && !o.jsonl.empty()) {
    job.jsonl = std::make_unique<std::ofstream>(o.jsonl, std::ios::trunc);
    if (!*job.jsonl) {
      input_error("--jsonl: cannot write '", o.jsonl, "'; name a file in a folder you can write");
    }
  }
  if (rank0 && !o.task_scores.empty()) {
    job.task_scores = std::make_unique<std::ofstream>(o.task_scores, std::ios::trunc);
    if (!*job.task_scores) {
      input_error("--task-scores: cannot write '", o.task_scores,
                  "'; name a file in a folder you can write");
    }
  }
  if (rank0) check_memory(job, mpi.world_size(), mpi.local_size());
}

// Rank 0's prompts to every rank: their count, then each one's text and ids.
void share_prompts(Job& job, titan::parallel::Communicator& comm) {
  if (comm.size() == 1) return;
  std::vector<int64_t> header;
  std::string bytes;
  if (comm.rank() == 0) {
    header.push_back(static_cast<int64_t>(job.prompts.size()));
    for (const gen::Prompt& p : job.prompts) {
      header.push_back(static_cast<int64_t>(p.text.size()));
      header.push_back(static_cast<int64_t>(p.ids.size()));
      bytes += p.text;
      bytes.append(reinterpret_cast<const char*>(p.ids.data()), p.ids.size() * sizeof(int32_t));
    }
  }
  Tensor sizes = Tensor::from_vector<int64_t>(
      {static_cast<int64_t>(header.size()), static_cast<int64_t>(bytes.size())}, {2});
  comm.broadcast_async(sizes, 0).wait();
  const int64_t header_size = sizes.data<int64_t>()[0], byte_size = sizes.data<int64_t>()[1];
  Tensor header_t = Tensor::empty({header_size}, titan::DType::I64);
  Tensor bytes_t = Tensor::empty({std::max<int64_t>(byte_size, 1)}, titan::DType::U8);
  if (comm.rank() == 0) {
    std::copy(header.begin(), header.end(), header_t.data<int64_t>());
    std::copy(bytes.begin(), bytes.end(), bytes_t.data<uint8_t>());
  }
  comm.broadcast_async(header_t, 0).wait();
  comm.broadcast_async(bytes_t, 0).wait();
  if (comm.rank() == 0) return;
  const int64_t* h = header_t.data<int64_t>();
  const char* b = reinterpret_cast<const char*>(bytes_t.data<uint8_t>());
  job.prompts.clear();
  for (int64_t i = 0; i < h[0]; ++i) {
    gen::Prompt p{i, std::string(b, static_cast<size_t>(h[1 + 2 * i])), {}};
    b += h[1 + 2 * i];
    p.ids.resize(static_cast<size_t>(h[2 + 2 * i]));
    std::memcpy(p.ids.data(), b, p.ids.size() * sizeof(int32_t));
    b += p.ids.size() * sizeof(int32_t);
    job.prompts.push_back(std::move(p));
  }
}

void print_text(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (text.empty() || text.back() != '\n') std::fputc('\n', stdout);
}

void run_generation(Job& job, titan::model::Transformer& model,
                    std::shared_ptr<titan::parallel::TensorParallelGroup> tp, bool rank0) {
  const gen::Options& o = job.options;
  titan::model::DecoderOptions decoder_options;
  decoder_options.cache_dtype = job.options.dtype;
  decoder_options.bf16_gemm_operands = job.device.is_cpu() && o.dtype == titan::DType::BF16;
  decoder_options.cuda_graph = o.cuda_graph;
  titan::model::Decoder decoder(model, decoder_options, tp);

  gen::GenerationSettings settings;
  settings.max_new_tokens = o.max_new_tokens;
  settings.sampling = {o.temperature, o.top_k, o.top_p, static_cast<uint64_t>(o.seed)};
  settings.stops = o.stops;
  settings.position_limit = job.position_limit;
  settings.sample_vocab = job.tokenizer->vocab_size();
  settings.eos = job.tokenizer->eos_id();

  gen::GenerationHooks hooks;
  if (tp->size() > 1) {
    hooks.share_tokens = [&tp](std::vector<int32_t>& tokens) {
      Tensor t = Tensor::from_vector(tokens, {static_cast<int64_t>(tokens.size())});
      tp->comm().broadcast_async(t, 0).wait();
      std::copy_n(t.data<int32_t>(), tokens.size(), tokens.begin());
    };
  }
  if (job.stream && rank0) {
    hooks.on_text = [](size_t, std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }

  gen::GenerationStats stats;
  bool first = true;
  for (size_t begin = 0; begin < job.prompts.size(); begin += static_cast<size_t>(job.batch_size)) {
    const size_t end = std::min(job.prompts.size(), begin + static_cast<size_t>(job.batch_size));
    const std::vector<gen::Prompt> batch(job.prompts.begin() + begin, job.prompts.begin() + end);
    if (job.stream && rank0) {
      if (!first) std::fputc('\n', stdout);
      std::fwrite(batch[0].text.data(), 1, batch[0].text.size(), stdout);
      std::fflush(stdout);
    }
    const std::vector<gen::Completion> done =
        gen::complete_batch(decoder, *job.tokenizer, batch, settings, rank0, hooks, stats);
    if (!rank0) continue;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (job.stream) {
        if (done[i].text.empty() || done[i].text.back() != '\n') std::fputc('\n', stdout);
      } else {
        if (!first) std::fputc('\n', stdout);
        print_text(batch[i].text + done[i].text);
      }
      first = false;
      if (job.jsonl) *job.jsonl << gen::completion_record(batch[i], done[i]) << '\n';
    }
    std::fflush(stdout);
    if (job.jsonl) job.jsonl->flush();
  }
  if (!rank0) return;
  auto rate = [](double n, double s) { return s > 0 ? n / s : 0.0; };
  const int64_t widest = std::min<int64_t>(job.batch_size, stats.prompts);
  std::fprintf(stderr,
               "titan_generate: %lld prompt%s in %lld batch%s of up to %lld; prefill %lld tokens "
               "in %.3f s (%.0f tokens/s); decode %lld tokens in %.3f s (%.1f tokens/s, %.2f ms "
               "per step); KV cache %s per rank (the largest batch's)\n",
               static_cast<long long>(stats.prompts), stats.prompts == 1 ? "" : "s",
               static_cast<long long>(stats.batches), stats.batches == 1 ? "" : "es",
               static_cast<long long>(widest), static_cast<long long>(stats.prefill_tokens),
               stats.prefill_seconds,
               rate(static_cast<double>(stats.prefill_tokens), stats.prefill_seconds),
               static_cast<long long>(stats.decode_tokens), stats.decode_seconds,
               rate(static_cast<double>(stats.decode_tokens), stats.decode_seconds),
               stats.decode_steps > 0 ? 1e3 * stats.decode_seconds / stats.decode_steps : 0.0,
               stats.largest_cache.c_str());
}

// titan_train's bfloat16 on the CPU: f32 weights, GEMMs on bf16-rounded operands.
void use_training_precision(const Job& job, titan::model::Transformer& model) {
  if (job.device.is_cpu() && job.options.dtype == titan::DType::BF16) {
    auto bf16 = std::make_shared<titan::model::HighPrecisionGemms>(/*bf16_operands=*/true);
    for (titan::model::Linear* linear : model.linears()) linear->set_gemms(bf16);
  }
}

void run_tasks(Job& job, titan::model::Transformer& model) {
  use_training_precision(job, model);
  titan::data::TaskScoringStats stats;
  const std::vector<titan::data::TaskResult> results = job.scoring->run(
      [&model](const titan::Tensor& tokens, const titan::Tensor& targets) {
        return model.evaluate_tokens(tokens, targets);
      },
      job.options.eval_batch_size, stats);
  const std::string table = gen::task_table(results);
  std::fwrite(table.data(), 1, table.size(), stdout);
  std::fflush(stdout);
  std::fprintf(stderr,
               "titan_generate: scored %lld choices in %lld batch%s of up to %lld rows: %lld "
               "tokens (%lld with padding) in %.3f s, %.0f tokens/s\n",
               static_cast<long long>(stats.requests), static_cast<long long>(stats.batches),
               stats.batches == 1 ? "" : "es",
               static_cast<long long>(job.options.eval_batch_size),
               static_cast<long long>(stats.tokens), static_cast<long long>(stats.padded_tokens),
               stats.seconds, stats.seconds > 0 ? static_cast<double>(stats.tokens) / stats.seconds : 0.0);
  for (const titan::data::TaskResult& r : results) {
    if (job.jsonl) {
      *job.jsonl << gen::task_record(r, job.source.describe(), job.tokenizer->describe()) << '\n';
    }
    if (job.task_scores) {
      for (size_t i = 0; i < r.task->items.size(); ++i) {
        *job.task_scores << titan::data::task_item_record(r, i) << '\n';
      }
    }
  }
}

void run_evaluation(Job& job, titan::model::Transformer& model) {
  use_training_precision(job, model);
  if (job.evaluation->wraps()) {
    std::fprintf(stderr,
                 "titan_generate: warning: --eval-steps %lld batches need more windows "
                 "than the file holds; the batches past its end start again from its first "
                 "window\n",
                 static_cast<long long>(job.evaluation->batches()));
  }
  const gen::EvalResult r = job.evaluation->run(model);
  std::printf(
      "eval %s: loss %.6f, perplexity %.4f over %lld batch%s of %lld × %lld tokens "
      "(%lld tokens) in %.2f s\n",
      job.evaluation->describe().c_str(), r.loss, std::exp(r.loss),
      static_cast<long long>(r.batches), r.batches == 1 ? "" : "es",
      static_cast<long long>(r.batch_size), static_cast<long long>(r.seq_len),
      static_cast<long long>(r.batches * r.batch_size * r.seq_len), r.seconds);
  if (job.jsonl) *job.jsonl << gen::eval_record(job.options.eval, r) << '\n';
}

}  // namespace

int main(int argc, char** argv) {
  titan::use_best_blas_core(argv);  // may re-execute this binary, before anything has started
  const std::unique_ptr<titan::parallel::MpiRuntime> mpi =
      titan::parallel::start_mpi(&argc, &argv, kProgram);
  if (!mpi) return exit_status(ExitCode::Failure);
  const int rank = mpi->world_rank(), world = mpi->world_size();
  Job job;
  bool help = false;
  std::optional<titan::parallel::DeviceMesh> mesh;
  std::shared_ptr<titan::parallel::TensorParallelGroup> tp;
  std::unique_ptr<titan::model::Transformer> model;
  double load_seconds = 0;
  const std::function<void()> phases[] = {
      [&] { check_input(job, argc, argv, *mpi, help); },
      [&] {
        // Every rank passed phase 1: the collectives start.
        mesh.emplace(titan::parallel::DeviceMesh::root(
            titan::parallel::ParallelDims::resolve(1, 1, world, world), rank));
        tp = std::make_shared<titan::parallel::TensorParallelGroup>(mesh->shared_comm());
        share_prompts(job, mesh->comm());
        if (job.device.is_cuda()) titan::cuda_backend::set_device(job.device.index);
        const auto start = std::chrono::steady_clock::now();
        model = std::make_unique<titan::model::Transformer>(job.source.args, titan::DType::F32);
        gen::load_weights(job.source, *model, rank, world, job.device, job.options.dtype);
        load_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      },
  };
  if (const std::optional<int> status =
          titan::parallel::run_setup_phases(phases, kProgram, rank, [&] { return help; })) {
    return *status;
  }

  try {
    const titan::model::ModelArgs& a = job.source.args;
    if (rank == 0) {
      if (const std::string note = titan::blas_core_note(); !note.empty()) {
        std::fprintf(stderr, "titan_generate: %s\n", note.c_str());
      }
      for (const std::string& warning : job.warnings) {
        std::fprintf(stderr, "titan_generate: warning: %s\n", warning.c_str());
      }
      std::fprintf(stderr,
                   "titan_generate: %s: dim %lld, %lld layers, %lld heads, %lld kv heads, ffn "
                   "%lld, vocab %lld (%.2fM parameters), read in %.2f s; %s %s, tp %d; "
                   "tokenizer: %s; sequence limit %lld positions\n",
                   job.source.describe().c_str(), static_cast<long long>(a.dim),
                   static_cast<long long>(a.n_layers), static_cast<long long>(a.n_heads),
                   static_cast<long long>(a.n_kv_heads), static_cast<long long>(a.ffn_dim),
                   static_cast<long long>(a.vocab_size),
                   static_cast<double>(titan::model::count_parameters(a)) / 1e6, load_seconds,
                   job.device.str().c_str(), dtype_text(job.options.dtype).c_str(), world,
                   job.tokenizer->describe().c_str(), static_cast<long long>(job.position_limit));
    }
    if (job.scoring) {
      run_tasks(job, *model);
    } else if (job.evaluation) {
      run_evaluation(job, *model);
    } else {
      run_generation(job, *model, tp, rank == 0);
    }
  } catch (const titan::InputError& e) {
    return titan::parallel::fail_after_setup(ExitCode::BadInput, e.what(), kProgram, rank, world);
  } catch (const std::exception& e) {
    return titan::parallel::fail_after_setup(ExitCode::Failure, e.what(), kProgram, rank, world);
  }
  return exit_status(ExitCode::Ok);
}
