// The pipeline executor on CUDA tensors, two ranks sharing one GPU under mpirun (pp 2; ctest
// runs it as `mpirun -np 2`, gpu_rank.h says how NCCL accepts two ranks on one device):
//
//   "pipeline on cuda: peer channels …"  both ranks send before they receive, an activation one
//        way and a gradient the other, 64 MiB each: on one NCCL stream each send would wait for
//        a receive queued behind the other rank's send; on the peer channels (one communicator
//        and stream per kind and direction) both arrive, whole.
//   "pipeline on cuda: every schedule …" each schedule's step over NCCL and over MPI, on the same
//        GPU from the same weights: the same loss and gradients, and the boundary tensors never
//        in host memory over NCCL. That is counted, not taken on trust: the CPU allocator's
//        allocations during the step. Over MPI every message is one host allocation (the MPI
//        communicator stages each CUDA tensor through a host copy) and otherwise the two steps
//        allocate the same on the host, so the MPI step must make exactly one host allocation
//        more per message than the NCCL step. An executor that staged messages through the host
//        itself (as it did before the peer channels) would make the two equal.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/stream.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "model/transformer.h"
#include "parallel/comm/peer_channels.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dims.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/pipeline_executor.h"
#include "support/mpi_world.h"
#include "support/small_model.h"

namespace titan::parallel {
namespace {

namespace pp = pipeline;

constexpr uint64_t kCudaSeed = 11;
constexpr int64_t kCudaSeqLen = 16;
constexpr int64_t kCudaMicrobatch = 2;
constexpr int64_t kCudaMicrobatches = 4;

Device gpu() { return Device::cuda(cuda::current_device()); }

model::ModelArgs cuda_pipeline_args() {
  testing::SmallModelDims dims;
  dims.n_layers = 6;  // two stages a rank on pp 2 still give each stage a layer
  return testing::small_model_args(dims);
}

// pp 2 over `backend`, every other dim 1.
DeviceMesh pp2_mesh(CommBackend backend) {
  MeshDegrees degrees;
  degrees.pp = 2;
  degrees.dp_shard = 1;
  return DeviceMesh::root(ParallelDims::resolve(degrees, 2), testing::world_rank(),
                          CommOptions{backend, 120});
}

// [rows, S] i32 tokens below the vocabulary, the same on both ranks (host memory, as the loader
// hands them to the pipeline).
Tensor cuda_stage_tokens(int64_t rows, const char* stream) {
  Tensor t = Tensor::empty({rows, kCudaSeqLen}, DType::I32);
  const CounterRng rng(kCudaSeed, stream);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<int32_t>()[i] = static_cast<int32_t>(rng.bits64(static_cast<uint64_t>(i)) %
                                                cuda_pipeline_args().vocab_size);
  }
  return t;
}

struct CudaRankPipeline {
  std::vector<std::unique_ptr<model::Transformer>> parts;
  std::unique_ptr<PipelineExecutor> executor;
};

// This rank's stages on the GPU in f32, from the same seed whatever the backend.
CudaRankPipeline build_on_gpu(const pp::PipelineSchedule& schedule, const DeviceMesh& mesh) {
  const model::ModelArgs args = cuda_pipeline_args();
  const std::vector<pp::StageLayers> stages =
      pp::split_stages(args.n_layers, schedule.num_stages(), {}, {"pp", "", "", ""}).value();
  CudaRankPipeline rank;
  std::vector<PipelineStage> held;
  for (int64_t s : schedule.placement.stages_of(mesh.coordinate(MeshDim::Pp))) {
    const pp::StageLayers& l = stages[static_cast<size_t>(s)];
    auto part = std::make_unique<model::Transformer>(
        args, DType::F32, model::ModelPart{l.first_layer, l.end_layer, l.embedding, l.output});
    part->allocate(gpu());
    part->init_weights(kCudaSeed);
    part->zero_grad();
    held.push_back({s, part.get()});
    rank.parts.push_back(std::move(part));
  }
  PipelineShape shape;
  shape.microbatch_size = kCudaMicrobatch;
  shape.dim = args.dim;
  shape.dtype = DType::F32;
  shape.device = gpu();
  rank.executor = std::make_unique<PipelineExecutor>(schedule, held, mesh, shape);
  return rank;
}

// One step of `schedule` over `mesh`: its loss sum, its host allocations, its gradients (copied
// to the host after the count).
struct CudaStep {
  double loss = 0;
  int64_t host_allocations = 0;
  std::map<std::string, Tensor> grads;
  PipelineTiming timing;
};

CudaStep cuda_step(const pp::PipelineSchedule& schedule, const DeviceMesh& mesh) {
  CudaRankPipeline rank = build_on_gpu(schedule, mesh);
  const Tensor tokens = cuda_stage_tokens(kCudaMicrobatches * kCudaMicrobatch, "tokens");
  const Tensor targets = cuda_stage_tokens(kCudaMicrobatches * kCudaMicrobatch, "targets");
  const double grad_scale = 1.0 / static_cast<double>(tokens.numel());
  cuda::synchronize_stream();
  Allocator& host = allocator_for(Device::cpu());
  CudaStep step;
  const int64_t before = host.stats().allocations;
  step.loss = rank.executor->train(tokens, targets, grad_scale);
  step.host_allocations = host.stats().allocations - before;
  step.timing = rank.executor->last_timing();
  for (const auto& part : rank.parts) {
    for (model::Parameter* p : part->parameters()) step.grads[p->name] = p->grad.to(Device::cpu());
  }
  return step;
}

double worst_relative(const Tensor& got, const Tensor& want) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    scale = std::max(scale, std::abs(double(want.data<float>()[i])));
  }
  for (int64_t i = 0; i < want.numel(); ++i) {
    worst = std::max(worst, std::abs(double(got.data<float>()[i]) - want.data<float>()[i]) /
                                std::max(scale, 1e-30));
  }
  return worst;
}

int64_t messages_of(const pp::PipelineSchedule& schedule, int64_t rank) {
  const std::vector<pp::Action>& list = schedule.ranks[static_cast<size_t>(rank)];
  return std::count_if(list.begin(), list.end(),
                       [](const pp::Action& a) { return a.is_send() || a.is_receive(); });
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("pipeline on cuda: peer channels carry crossing sends of both kinds") {
    const DeviceMesh mesh = pp2_mesh(CommBackend::Nccl);
    Communicator& comm = mesh[MeshDim::Pp].comm();
    const int me = comm.rank(), peer = 1 - me;
    constexpr int64_t kFloats = int64_t{16} << 20;  // 64 MiB: far beyond what NCCL buffers
    auto filled = [](float value) {
      Tensor t = Tensor::empty({kFloats}, DType::F32, gpu());
      t.fill_(value);
      return t;
    };
    // Rank 0 sends an activation and receives a gradient; rank 1 the other way round. Each
    // posts its send first and waits on nothing before posting its receive.
    const int sent_kind = me == 0 ? kActivationChannel : kGradientChannel;
    const int got_kind = me == 0 ? kGradientChannel : kActivationChannel;
    Work send = comm.send_async(filled(static_cast<float>(me + 1)), peer, sent_kind);
    Tensor got = filled(-7);
    Work recv = comm.recv_async(got, peer, got_kind);
    recv.wait();
    send.wait();
    const Tensor host = got.to(Device::cpu());
    const float want = static_cast<float>(peer + 1);
    int64_t wrong = 0;
    for (int64_t i = 0; i < kFloats; ++i) wrong += host.data<float>()[i] != want;
    CHECK(wrong == 0);
  }

  TEST_CASE("pipeline on cuda: every schedule over NCCL keeps its messages on the GPU") {
    const DeviceMesh nccl = pp2_mesh(CommBackend::Nccl);
    const DeviceMesh mpi = pp2_mesh(CommBackend::Mpi);
    const int64_t me = nccl.coordinate(MeshDim::Pp);
    for (const auto& [kind, name] : pp::kScheduleKindNames.entries()) {
      CAPTURE(name);
      const int64_t v = pp::is_single_stage(kind) ? 1 : 2;
      pp::ValueOrRefusal<pp::PipelineSchedule> schedule =
          pp::generate_schedule(kind, 2, v, kCudaMicrobatches);
      REQUIRE_MESSAGE(schedule.ok(), schedule.error());
      const CudaStep over_nccl = cuda_step(schedule.value(), nccl);
      const CudaStep over_mpi = cuda_step(schedule.value(), mpi);

      const int64_t messages = messages_of(schedule.value(), me);
      REQUIRE(messages > 0);
      MESSAGE(name, ", pp rank ", me, ": ", messages, " messages; host allocations over NCCL ",
              over_nccl.host_allocations, ", over MPI ", over_mpi.host_allocations);
      CHECK(over_mpi.host_allocations - over_nccl.host_allocations == messages);

      // The transport changes nothing in the arithmetic.
      CHECK(std::abs(over_nccl.loss - over_mpi.loss) <=
            1e-6 * std::max(1.0, std::abs(over_mpi.loss)));
      REQUIRE(over_nccl.grads.size() == over_mpi.grads.size());
      for (const auto& [param, grad] : over_nccl.grads) {
        const double rel = worst_relative(grad, over_mpi.grads.at(param));
        CHECK_MESSAGE(rel <= 1e-5, param, ": gradient over NCCL differs from MPI's by ", rel);
      }

      // The device's times: every compute timed, the computes and waits inside the list's time.
      const PipelineTiming& t = over_nccl.timing;
      double computing = 0;
      for (double seconds : t.compute_seconds) computing += seconds;
      CHECK(computing > 0);
      CHECK(t.wait_seconds >= 0);
      CHECK(computing + t.wait_seconds <= t.seconds + 1e-6);
      CHECK(t.weight_grads_run_early == 0);  // never on CUDA
    }
  }
}

}  // namespace titan::parallel
