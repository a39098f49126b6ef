#include "checkpoint/checkpointer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/load_staging.h"
#include "checkpoint/safetensors.h"
#include "core/cast.h"
#include "core/check.h"
#include "core/file_io.h"
#include "core/memory_tag.h"
#include "core/profiler.h"
#include "parallel/owned_rows.h"
#include "parallel/rank_agreement.h"

#if defined(TITAN_CUDA)
#include <cuda_runtime.h>
#endif

namespace titan::checkpoint {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kStepPrefix[] = "step-";
constexpr std::string_view kTmpSuffix = ".tmp";
// A complete step folder is renamed to this before it is removed, so that a kill in the middle
// of remove_all never leaves a step-<N> that looks whole but is not.
constexpr std::string_view kDeletingSuffix = ".deleting";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string rank_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank%05d.safetensors", rank);
  return name;
}

// A step folder name: step-<N><suffix>. nullopt for anything else; `overflow` is set when the
// digits do not fit an int64.
struct StepName {
  int64_t step = 0;
  std::string_view suffix;
};
std::optional<StepName> parse_step_name(std::string_view name, bool& overflow) {
  overflow = false;
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  const std::string_view rest = name.substr(sizeof(kStepPrefix) - 1);
  if (rest.empty() || rest[0] < '0' || rest[0] > '9') return std::nullopt;
  StepName out;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), out.step);
  if (ec == std::errc::result_out_of_range) {
    overflow = true;
    return std::nullopt;
  }
  if (ec != std::errc()) return std::nullopt;
  out.suffix = rest.substr(static_cast<size_t>(ptr - rest.data()));
  return out;
}

bool has_metadata(const fs::path& folder) {
  std::error_code ec;
  return fs::is_regular_file(folder / "metadata.json", ec);
}

// The complete step folders under `folder`, by step.
std::vector<std::pair<int64_t, fs::path>> complete_steps(const std::string& folder, bool warn) {
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return steps;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    bool overflow = false;
    const std::optional<StepName> parsed = parse_step_name(name, overflow);
    if (overflow) {
      if (warn)
        spdlog::warn("checkpoint: ignoring {}: its step number overflows", entry.path().string());
      continue;
    }
    if (!parsed || !entry.is_directory(ec)) continue;
    if (parsed->suffix == kTmpSuffix) {
      if (warn) {
        spdlog::warn("checkpoint: ignoring {}: a save that never completed (half-written)",
                     entry.path().string());
      }
      continue;
    }
    if (!parsed->suffix.empty()) continue;  // being deleted, or not ours
    if (!has_metadata(entry.path())) {
      if (warn) {
        spdlog::warn("checkpoint: ignoring {}: it has no metadata.json (half-written)",
                     entry.path().string());
      }
      continue;
    }
    steps.emplace_back(parsed->step, entry.path());
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// What an I/O failure of a save tells the user to do.
constexpr char kWritableFolderFix[] =
    "point job.dump_folder / checkpoint.folder at a writable place with free space";

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  input_error("checkpoint: cannot ", what, " '", path, "': ", std::strerror(errno), "; ",
              kWritableFolderFix);
}

void fsync_folder(const std::string& path) { fsync_path(path, "checkpoint", kWritableFolderFix); }

// Writes `text` to `path`, fsynced.
void write_synced(const std::string& path, const std::string& text) {
  if (const char* failed = write_file_synced(path, text)) io_error(failed, path);
}

// Every rank's `mine`, in rank order (lengths first, then buffers padded to the longest).
std::vector<std::string> all_gather_strings(parallel::Communicator& comm, const std::string& mine) {
  if (comm.size() == 1) return {mine};
  const Tensor length = Tensor::from_vector<int64_t>({static_cast<int64_t>(mine.size())}, {1});
  const Tensor lengths = Tensor::empty({comm.size()}, DType::I64);
  comm.all_gather(lengths, length);
  const int64_t* n = lengths.data<int64_t>();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(n, n + comm.size()));
  const Tensor buffer = Tensor::zeros({longest}, DType::U8);
  std::memcpy(buffer.raw_data(), mine.data(), mine.size());
  const Tensor all = Tensor::empty({comm.size() * longest}, DType::U8);
  comm.all_gather(all, buffer);
  std::vector<std::string> out;
  const char* bytes = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < comm.size(); ++r)
    out.emplace_back(bytes + r * longest, static_cast<size_t>(n[r]));
  return out;
}

std::string join(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(values[i]);
  }
  return out;
}

std::vector<int64_t> split_ints(const std::string& text) {
  std::vector<int64_t> out;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

// Each of a parameter's stored tensors: the value (suffix ""), then the optimizer's state.
std::vector<model::OptimizerState> stored_tensors(model::Optimizer& optimizer, size_t i) {
  std::vector<model::OptimizerState> stored{{"", optimizer.params()[i]->value}};
  for (model::OptimizerState& state : optimizer.state_of(i)) stored.push_back(std::move(state));
  return stored;
}

// `local` as a matrix [rows, width] of its rows (a 1-D tensor is [n, 1]).
Tensor as_rows(const Tensor& local) {
  const int64_t width = local.ndim() == 2 ? local.size(1) : 1;
  return local.view({local.numel() / width, width});
}

}  // namespace

// One save, from staging to commit. The host buffer is kept for the next save.
class Checkpointer::Impl {
 public:
  explicit Impl(CheckpointOptions options) : options(std::move(options)) {}
  ~Impl() {
    if (writer.joinable()) writer.join();
    unpin();
  }

  struct Piece {
    std::string tensor;
    std::vector<int64_t> offsets, sizes;
    int64_t host_begin = 0, host_elements = 0;  // its values: host[host_begin, + host_elements)
    uint64_t byte_begin = 0, byte_end = 0;      // absolute, in this rank's file
  };

  // Stages this rank's pieces into `host` and lays out its file.
  void stage(model::Optimizer& optimizer, const parallel::DeviceMesh& mesh);
  // Writes this rank's file (header, then the staged bytes), fsynced, with its CRC32C.
  void write_file();
  void start_write();
  // Collective: gathers every rank's pieces and file, rank 0 writes metadata.json and renames
  // the folder into place, prunes, and every rank returns once that is done.
  void commit(const parallel::DeviceMesh& mesh);
  void prune() const;
  void pin(bool want);
  void unpin();

  std::string step_folder(int64_t step) const {
    return (fs::path(options.folder) / (kStepPrefix + std::to_string(step))).string();
  }
  std::string tmp_folder() const { return step_folder(meta.step) + std::string(kTmpSuffix); }

  CheckpointOptions options;
  // What the save in flight holds.
  CheckpointMetadata meta;  // rank 0 completes files and pieces at the commit
  std::vector<Piece> pieces;
  std::optional<SafetensorsLayout> layout;  // of this rank's file: one tensor per piece
  Tensor host;                              // f32 [elements]: the staged bytes, reused across saves
  // host's memory while it is registered with CUDA, else null. host is replaced only after
  // unpin(), so a registered buffer is always the current host: whether to pin is this being null.
  void* pinned = nullptr;
  int rank = 0;
  uint64_t file_bytes = 0;
  uint32_t file_crc = 0;

  bool in_flight = false;
  std::atomic<bool> written{false};
  std::exception_ptr write_error;
  std::thread writer;
  double blocking_s = 0;
};

void Checkpointer::Impl::stage(model::Optimizer& optimizer, const parallel::DeviceMesh& mesh) {
  profiler::Span span("checkpoint.stage", "checkpoint");
  // The staged bytes are a copy of state that lives elsewhere, on their way to a file.
  MemoryTagScope tag(MemoryCategory::CommBuffers);
  pieces.clear();
  meta.tensors.clear();
  std::vector<Tensor> sources;  // each piece's [rows, width], contiguous, host or device
  int64_t elements = 0;
  bool on_device = false;
  const std::vector<model::Parameter*>& params = optimizer.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const model::Parameter& p = *params[i];
    // A tied copy holds its original's values and state: stored once, by the original.
    if (!p.tied_to.empty()) continue;
    for (const model::OptimizerState& kind : stored_tensors(optimizer, i)) {
      const std::string name = p.name + kind.suffix;
      const Tensor& local = kind.tensor;
      // Stored as f32 in every case: bf16 moments (optimizer.state_dtype) widen exactly, and
      // a checkpoint resumes into either state dtype.
      meta.tensors[name] = StoredTensor{DType::F32, p.shape, {}};
      if (!parallel::is_primary_copy(p, mesh)) continue;
      TT_CHECK(local.dtype() == DType::F32 || (kind.suffix[0] != '\0' && local.dtype() == DType::BF16),
               "checkpoint: ", name, " is ", dtype_name(local.dtype()),
               "; the master weights are f32, the moments f32 or bf16");
      const Tensor rows = as_rows(local);
      parallel::for_each_owned_run(p, local, mesh, [&](const model::LocalRun& run) {
        TT_CHECK(run.width == rows.size(1), "checkpoint: ", name, ": a run of width ", run.width,
                 " in a local tensor of width ", rows.size(1));
        Piece piece;
        piece.tensor = name;
        if (p.shape.ndim() == 2) {
          piece.offsets = {run.full_row, run.col_begin};
          piece.sizes = {run.rows, run.width};
        } else {
          piece.offsets = {run.full_row};
          piece.sizes = {run.rows};
        }
        piece.host_begin = elements;
        piece.host_elements = run.rows * run.width;
        sources.push_back(rows.rows(run.local_offset, run.local_offset + run.rows));
        elements += piece.host_elements;
        pieces.push_back(std::move(piece));
      });
      on_device = on_device || !local.device().is_cpu();
    }
  }
  if (!host.defined() || host.numel() < elements) {
    unpin();
    host = Tensor::empty({std::max<int64_t>(elements, 1)}, DType::F32);
  }
  pin(on_device && options.async_mode == AsyncMode::AsyncWithPinnedMem);
  for (size_t k = 0; k < pieces.size(); ++k) {
    // A bf16 moment's piece is widened one piece at a time, where it lives: no second copy of
    // the whole state on the device.
    const Tensor src = sources[k].dtype() == DType::F32 ? sources[k] : cast(sources[k], DType::F32);
    host.narrow(0, pieces[k].host_begin, pieces[k].host_elements).view(src.shape()).copy_from(src);
  }

  // The file: safetensors, one tensor per piece, named <tensor>@<offsets>.
  std::vector<TensorInfo> infos;
  infos.reserve(pieces.size());
  for (const Piece& piece : pieces) {
    Shape shape;
    for (int64_t size : piece.sizes) shape.push_back(size);
    infos.push_back({piece.tensor + "@" + join(piece.offsets), DType::F32, shape});
  }
  layout.emplace(std::move(infos),
                 std::map<std::string, std::string>{{"format", kCheckpointFormat}});
  for (size_t k = 0; k < pieces.size(); ++k) {
    pieces[k].byte_begin = layout->begin(k);
    pieces[k].byte_end = layout->end(k);
  }
  file_bytes = pieces.empty() ? 0 : layout->file_bytes();
}

void Checkpointer::Impl::pin(bool want) {
#if defined(TITAN_CUDA)
  if (!want || pinned != nullptr) return;
  // Registered once per buffer: device-to-host copies into it then run at full DMA speed.
  if (cudaHostRegister(host.raw_data(), host.nbytes(), cudaHostRegisterDefault) == cudaSuccess) {
    pinned = host.raw_data();
  } else {
    (void)cudaGetLastError();
    spdlog::warn("checkpoint: cannot pin {} bytes of staging memory; staging unpinned",
                 host.nbytes());
  }
#else
  (void)want;  // CPU tensors are staged by memcpy: there is nothing to pin
#endif
}

void Checkpointer::Impl::unpin() {
#if defined(TITAN_CUDA)
  if (pinned != nullptr) cudaHostUnregister(pinned);
#endif
  pinned = nullptr;
}

void Checkpointer::Impl::write_file() {
  if (pieces.empty()) return;  // a rank that owns nothing writes no file
  profiler::Span span("checkpoint.write", "checkpoint");
  const std::string path = (fs::path(tmp_folder()) / rank_file_name(rank)).string();
  SafetensorsWriter writer(path, *layout, kWritableFolderFix);
  for (const Piece& piece : pieces) {
    writer.append(host.narrow(0, piece.host_begin, piece.host_elements));
  }
  writer.close();
  file_crc = writer.crc32c();
}

void Checkpointer::Impl::start_write() {
  written.store(false);
  write_error = nullptr;
  writer = std::thread([this] {
    try {
      write_file();
    } catch (...) {
      write_error = std::current_exception();
    }
    written.store(true, std::memory_order_release);
  });
}

void Checkpointer::Impl::commit(const parallel::DeviceMesh& mesh) {
  profiler::Span span("checkpoint.commit", "checkpoint");
  if (writer.joinable()) writer.join();
  in_flight = false;
  parallel::Communicator& comm = mesh.comm();
  parallel::run_agreed(comm, [&] {
    if (write_error) std::rethrow_exception(std::exchange(write_error, nullptr));
  });

  // This rank's file and pieces, as text: "<bytes> <crc>\n" then one line per piece, with its
  // tensor's full shape: under pipeline parallelism rank 0 holds only its stage's tensors, and
  // learns the others' from their pieces.
  std::string record;
  if (!pieces.empty()) {
    record = std::to_string(file_bytes) + " " + std::to_string(file_crc) + "\n";
    for (const Piece& p : pieces) {
      std::vector<int64_t> shape;
      for (int64_t size : meta.tensors.at(p.tensor).shape) shape.push_back(size);
      record += p.tensor + "\t" + join(p.offsets) + "\t" + join(p.sizes) + "\t" +
                std::to_string(p.byte_begin) + "\t" + std::to_string(p.byte_end) + "\t" +
                join(shape) + "\n";
    }
  }
  const std::vector<std::string> records = all_gather_strings(comm, record);
  parallel::run_agreed(comm, [&] {
    if (comm.rank() != 0) return;
    meta.files.clear();
    for (size_t r = 0; r < records.size(); ++r) {
      if (records[r].empty()) continue;
      std::istringstream in(records[r]);
      StoredFile file;
      file.name = rank_file_name(static_cast<int>(r));
      in >> file.bytes >> file.crc32c;
      in.ignore(1);
      const int64_t index = static_cast<int64_t>(meta.files.size());
      meta.files.push_back(file);
      std::string line;
      while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string tensor, offsets, sizes, begin, end, shape;
        std::getline(fields, tensor, '\t');
        std::getline(fields, offsets, '\t');
        std::getline(fields, sizes, '\t');
        std::getline(fields, begin, '\t');
        std::getline(fields, end, '\t');
        std::getline(fields, shape, '\t');
        StoredPiece piece;
        piece.offsets = split_ints(offsets);
        piece.sizes = split_ints(sizes);
        piece.file = index;
        piece.byte_begin = std::stoull(begin);
        piece.byte_end = std::stoull(end);
        Shape full;
        for (int64_t size : split_ints(shape)) full.push_back(size);
        // Every stored tensor is f32 (stage() checks it).
        auto [it, added] = meta.tensors.try_emplace(tensor, StoredTensor{DType::F32, full, {}});
        TT_CHECK(it->second.shape == full, "checkpoint: ranks disagree on the shape of ", tensor,
                 ": ", it->second.shape, " and ", full);
        it->second.pieces.push_back(std::move(piece));
      }
    }
    const std::string tmp = tmp_folder(), final_folder = step_folder(meta.step);
    write_synced((fs::path(tmp) / "metadata.json").string(), metadata_json(meta));
    fsync_folder(tmp);
    std::error_code ec;
    const std::string replaced = final_folder + std::string(kDeletingSuffix);
    if (fs::exists(final_folder, ec)) {  // the same step saved again (a resumed run)
      fs::remove_all(replaced, ec);
      fs::rename(final_folder, replaced, ec);
      if (ec) input_error("checkpoint: cannot replace '", final_folder, "': ", ec.message());
    }
    fs::rename(tmp, final_folder, ec);
    if (ec) input_error("checkpoint: cannot rename '", tmp, "': ", ec.message());
    fsync_folder(options.folder);
    fs::remove_all(replaced, ec);
    prune();
  });
  comm.barrier();
}

void Checkpointer::Impl::prune() const {
  std::error_code ec;
  // Leftovers of a removal, or of a save, that was killed half-way: a stale .tmp can be as
  // large as a whole checkpoint. None is in flight now (the one being committed is renamed).
  for (const fs::directory_entry& entry : fs::directory_iterator(options.folder, ec)) {
    bool overflow = false;
    const std::string name = entry.path().filename().string();  // outlives the parsed view
    const std::optional<StepName> parsed = parse_step_name(name, overflow);
    if (parsed && (parsed->suffix == kDeletingSuffix || parsed->suffix == kTmpSuffix)) {
      fs::remove_all(entry.path(), ec);
    }
  }
  if (options.keep_latest_k <= 0) return;
  const std::vector<std::pair<int64_t, fs::path>> steps = complete_steps(options.folder, false);
  const int64_t excess = static_cast<int64_t>(steps.size()) - options.keep_latest_k;
  for (int64_t i = 0; i < excess; ++i) {
    const fs::path& folder = steps[static_cast<size_t>(i)].second;
    const std::string doomed = folder.string() + std::string(kDeletingSuffix);
    fs::rename(folder, doomed, ec);
    if (ec) {
      spdlog::warn("checkpoint: cannot remove {}: {}", folder.string(), ec.message());
      continue;
    }
    fs::remove_all(doomed, ec);
  }
  fsync_folder(options.folder);
}

Checkpointer::Checkpointer(CheckpointOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

Checkpointer::~Checkpointer() = default;

std::string Checkpointer::step_folder(int64_t step) const { return impl_->step_folder(step); }

std::optional<int64_t> Checkpointer::latest_step(bool warn) const {
  const std::vector<std::pair<int64_t, fs::path>> steps =
      complete_steps(impl_->options.folder, warn);
  if (steps.empty()) return std::nullopt;
  return steps.back().first;
}

void Checkpointer::save(const TrainState& state, model::Transformer& model, model::Optimizer& optimizer,
                        const parallel::DeviceMesh& mesh) {
  profiler::Span span("checkpoint.save", "checkpoint");
  Impl& s = *impl_;
  if (s.in_flight) s.commit(mesh);  // one save in flight at a time
  const auto start = Clock::now();
  parallel::Communicator& comm = mesh.comm();
  s.rank = comm.rank();
  s.meta = {};
  s.meta.step = state.step;
  s.meta.optimizer = optimizer.name();
  s.meta.optimizer_steps = optimizer.steps_taken();
  s.meta.loader_samples_consumed = state.loader.samples_consumed;
  for (const data::LoaderState::Source& source : state.loader.sources) {
    s.meta.loader_sources.emplace_back(source.name, source.samples_consumed);
  }
  s.meta.model = model.args();
  const parallel::ParallelDims& dims = mesh.dims();
  s.meta.mesh = {dims.pp, dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp};
  parallel::run_agreed(comm, [&] {
    if (comm.rank() != 0) return;
    const std::string tmp = s.tmp_folder();
    std::error_code ec;
    fs::remove_all(tmp, ec);  // a stale one, from a save that never completed
    fs::create_directories(tmp, ec);
    if (ec) {
      input_error("checkpoint: cannot create '", tmp, "': ", ec.message(),
                  "; point job.dump_folder / checkpoint.folder at a writable place");
    }
  });
  s.stage(optimizer, mesh);
  s.in_flight = true;
  if (s.options.async_mode == AsyncMode::Disabled) {
    try {
      s.write_file();
    } catch (...) {
      s.write_error = std::current_exception();
    }
    s.written.store(true);
    s.commit(mesh);
  } else {
    s.start_write();
  }
  s.blocking_s = seconds_since(start);
}

bool Checkpointer::save_in_flight() const { return impl_->in_flight; }

bool Checkpointer::write_done() const {
  return !impl_->in_flight || impl_->written.load(std::memory_order_acquire);
}

void Checkpointer::commit(const parallel::DeviceMesh& mesh) {
  if (!impl_->in_flight) return;
  impl_->commit(mesh);
}

double Checkpointer::last_save_blocking_s() const { return impl_->blocking_s; }

TrainState Checkpointer::load(int64_t step, model::Transformer& model, model::Optimizer& optimizer,
                              const parallel::DeviceMesh& mesh, LoadScope scope,
                              const CheckpointChoice& choice) const {
  const std::string folder = step_folder(step);
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    input_error("checkpoint: no step ", step, " in '", impl_->options.folder,
                "'; load one of the step-N folders there (latest_step() names the newest)");
  }
  return load_folder(folder, model, optimizer, mesh, scope, choice);
}

TrainState Checkpointer::load_folder(const std::string& step_folder, model::Transformer& model,
                                     model::Optimizer& optimizer, const parallel::DeviceMesh& mesh,
                                     LoadScope scope, const CheckpointChoice& choice) {
  profiler::Span span("checkpoint.load", "checkpoint");
  // Host staging on the way to this rank's rows.
  MemoryTagScope tag(MemoryCategory::CommBuffers);
  parallel::Communicator& comm = mesh.comm();
  const CheckpointReader reader(step_folder, choice);
  const CheckpointMetadata& meta = reader.metadata();
  check_same_model(meta, model.args(), "checkpoint");
  if (scope == LoadScope::Everything) check_same_optimizer(meta, optimizer.name(), "checkpoint", "");
  // Every file's checksum, each checked by one rank. No collective here: a load runs in the
  // trainer's set-up, where a rank that fails alone (a bad checksum, a file its node cannot
  // read) must meet the others at main's agreement on the set-up's outcome, which prints its
  // line and ends every rank, not wait in a collective they never enter.
  for (size_t i = static_cast<size_t>(comm.rank()); i < meta.files.size();
       i += static_cast<size_t>(comm.size())) {
    reader.verify_file(static_cast<int64_t>(i));
  }
  const std::vector<model::Parameter*>& params = optimizer.params();
  // A base model's checkpoint into a LoRA run: the weights come from it, the adapters start as
  // declared (B = 0: the base model's outputs), and nothing of the optimizer can resume.
  const bool adapters_saved = meta.model.lora.enabled();
  if (!adapters_saved && model.args().lora.enabled() && scope == LoadScope::Everything) {
    input_error("checkpoint: ", meta.path, " holds a model without LoRA adapters, which cannot "
                "resume a LoRA run; start one from its weights in a folder of its own: "
                "--checkpoint.initial_load_path ", step_folder,
                " --checkpoint.initial_load_model_only true and another job.dump_folder");
  }
  HostStaging staging;
  for (size_t i = 0; i < params.size(); ++i) {
    const model::Parameter& p = *params[i];
    if (p.adapter && !adapters_saved) continue;
    for (const model::OptimizerState& kind : stored_tensors(optimizer, i)) {
      if (scope == LoadScope::ModelOnly && kind.suffix[0] != '\0') continue;
      const std::string name = p.stored_name() + kind.suffix;
      auto it = meta.tensors.find(name);
      if (it == meta.tensors.end() || it->second.shape != p.shape) {
        input_error("checkpoint: ", meta.path, ": ",
                    it == meta.tensors.end() ? "no tensor " : "another shape for ", name,
                    it == meta.tensors.end() ? "" : " than this model's", " ", p.shape,
                    "; the checkpoint was saved for another model");
      }
      const Tensor& local = kind.tensor;
      // A GPU's tensors are read into one host buffer reused for every tensor (pinned, so the
      // copies run at DMA speed), a CPU's in place. bf16 moments are read as the f32 they are
      // stored in and rounded to nearest after: a checkpoint of f32 moments resumes into bf16.
      const bool rounded = local.dtype() == DType::BF16;
      const Tensor host = local.device().is_cpu() && !rounded
                              ? local
                              : staging.take(local.shape(), DType::F32, /*pin=*/!rounded);
      std::vector<model::LocalRun> runs;
      parallel::for_each_owned_run(p, local, mesh,
                                   [&runs](const model::LocalRun& run) { runs.push_back(run); });
      int64_t covered = 0;
      for (const model::LocalRun& run : runs) covered += run.rows;
      if (covered < local.size(0)) host.zero_();  // padding rows stay zero
      const Tensor rows = as_rows(host);
      for (const model::LocalRun& run : runs) {
        reader.read_region(name, run.full_row, run.rows, run.col_begin, run.width,
                           rows.rows(run.local_offset, run.local_offset + run.rows));
      }
      if (rounded) {
        local.copy_from(cast(host, DType::BF16));
      } else if (!local.device().is_cpu()) {
        local.copy_from(host);
      }
    }
  }
  TrainState state;
  if (scope == LoadScope::Everything) {
    state.step = meta.step;
    state.loader.samples_consumed = meta.loader_samples_consumed;
    for (const auto& [name, samples] : meta.loader_sources) {
      state.loader.sources.push_back({name, samples});
    }
    optimizer.set_steps_taken(meta.optimizer_steps);
  }
  return state;
}

}  // namespace titan::checkpoint
