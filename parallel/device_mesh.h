// The device mesh pp × dp_replicate × dp_shard × cp × tp (pp outermost, tp innermost) and its
// submeshes (docs/architecture.md#decision-5 and #decision-16).
//
// A DeviceMesh is a set of the root's dims (MeshDims) plus a handle on the root; slicing any
// set of dims — from the root or from a submesh — resolves against the root, so a submesh of a
// submesh is just another set of root dims ("Cannot create a submesh from a submesh" has
// nowhere to happen). Dims are named by MeshDim in code; their names ("dp_shard") are for
// messages. Three sets stand for flattened dims, outer dim first (torchtitan's names):
//   kDp          dp_replicate × dp_shard: the data-parallel rank that data loading uses
//   kDpShardCp   dp_shard × cp: the ranks FSDP shards a parameter over
//   kDpCp        dp_replicate × dp_shard × cp: the ranks the loss and gradients average over
//
// The root creates the communicator of every one of the 2⁵ dim sets at once, by MPI_Comm_split
// of the world (and, with the NCCL backend, ncclCommSplit of the world NCCL communicator with
// the same color and key), and caches them: slicing is then a lookup that needs no collective
// call, so ranks can never disagree about the order submeshes were made in. Dim sets that differ
// only in dims of degree 1 are the same group of ranks and share one communicator, so a mesh
// with pp 1 and cp 1 makes exactly the communicators the three-dim mesh made. With NCCL and
// pp > 1 the root also cuts the pipeline's peer channels (comm/peer_channels.h: a two-rank
// communicator per kind of message and direction between neighbouring pp ranks, each on a
// stream of its own) and hangs them on the pp communicator, whose messages then take them.
//
// World rank w has coordinates (p, r, s, c, t) with w = (((p·R + r)·S + s)·C + c)·T + t (R, S,
// C, T the degrees of dp_replicate, dp_shard, cp and tp); within a submesh a rank's index is its
// coordinates on the submesh's dims in the same row-major order.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/enum_names.h"
#include "parallel/comm/communicator.h"
#include "parallel/parallel_dims.h"

namespace titan::parallel {

enum class MeshDim { Pp = 0, DpReplicate = 1, DpShard = 2, Cp = 3, Tp = 4 };
constexpr int kMeshDims = 5;
const char* mesh_dim_name(MeshDim dim);

// A set of root dims: what a submesh spans. A MeshDim converts to the set of itself, and a
// braced list of dims and sets is their union: mesh.slice({MeshDim::Pp, kDpCp}).
class MeshDims {
 public:
  constexpr MeshDims() = default;
  constexpr MeshDims(MeshDim dim) : mask_(1u << static_cast<int>(dim)) {}  // NOLINT: implicit
  constexpr MeshDims(std::initializer_list<MeshDims> sets) {
    for (MeshDims set : sets) mask_ |= set.mask_;
  }
  constexpr unsigned mask() const { return mask_; }
  constexpr bool has(MeshDim dim) const { return (mask_ & MeshDims(dim).mask_) != 0; }
  friend constexpr MeshDims operator|(MeshDims a, MeshDims b) { return MeshDims({a, b}); }
  friend constexpr bool operator==(MeshDims a, MeshDims b) = default;

 private:
  unsigned mask_ = 0;
};
inline constexpr MeshDims kDp{MeshDim::DpReplicate, MeshDim::DpShard};
inline constexpr MeshDims kDpShardCp{MeshDim::DpShard, MeshDim::Cp};
inline constexpr MeshDims kDpCp{MeshDim::DpReplicate, MeshDim::DpShard, MeshDim::Cp};
// The dims' names in root order, joined by `separator`: "dp_shard, tp".
std::string mesh_dims_text(MeshDims dims, const char* separator = ", ");

// What moves the tensors (parallelism.comm_backend). Mpi: every tensor through MPI, CUDA ones
// staged through host memory (mpi_communicator.h). Nccl: CUDA tensors through NCCL on the
// current CUDA device, CPU ones through MPI (nccl_communicator.h); needs a CUDA build with NCCL.
// Auto: a setting, for resolve_comm_backend; a mesh is made with Mpi or Nccl.
enum class CommBackend { Auto, Nccl, Mpi };
inline constexpr EnumName<CommBackend> kCommBackendList[] = {
    {CommBackend::Auto, "auto"}, {CommBackend::Nccl, "nccl"}, {CommBackend::Mpi, "mpi"}};
inline constexpr EnumNames<CommBackend> kCommBackends{"backend", kCommBackendList};

// The one reading of Auto: NCCL for a CUDA device, MPI on the CPU. Others are kept.
CommBackend resolve_comm_backend(CommBackend backend, Device device);

struct CommOptions {
  CommBackend backend = CommBackend::Mpi;  // resolved: Mpi or Nccl
  // An operation not complete this many seconds after it was posted aborts the job
  // (parallelism.comm_timeout_s): the watchdogs of mpi_watchdog.h and nccl_communicator.h.
  double timeout_s = 600;
  // What the caller calls `backend` in its messages (titan_train: "parallelism.comm_backend"),
  // when the backend cannot run here.
  std::string backend_key = "CommOptions::backend";
  // Cut the pipeline's peer channels under MPI too (two-rank MPI communicators, where MPI's tags
  // would do): for tests, so that the routing the NCCL backend relies on runs without a GPU.
  bool mpi_peer_channels = false;
};

class DeviceMesh {
 public:
  // Collective over MPI_COMM_WORLD: every rank calls it with the same dims and options. With
  // the NCCL backend, the CUDA device this rank uses must be current.
  static DeviceMesh root(const ParallelDims& dims, int world_rank, const CommOptions& options = {});

  // The submesh over `dims`, each of which must belong to this mesh. Throws naming the dims
  // it lacks and this mesh's dims.
  DeviceMesh slice(MeshDims dims) const;
  DeviceMesh operator[](MeshDims dims) const { return slice(dims); }

  std::vector<std::string> dim_names() const;  // in root order
  bool has(MeshDim dim) const;
  int64_t size() const;                   // ranks in this (sub)mesh
  int64_t rank() const;                   // this rank's index in it
  int64_t degree(MeshDim dim) const;      // of the root
  int64_t coordinate(MeshDim dim) const;  // this rank's coordinate on a root dim
  Communicator& comm() const;
  std::shared_ptr<Communicator> shared_comm() const;
  const ParallelDims& dims() const;
  CommBackend backend() const;
  std::string describe() const;  // "(dp_shard, tp) = 2 × 2"
  // This rank's world rank, and the world rank of the rank whose coordinates are this rank's
  // with `dim` set to `coordinate` (a pipeline stage's peer on the next stage).
  int64_t world_rank() const;
  int64_t world_rank_at(MeshDim dim, int64_t coordinate) const;

 private:
  struct Root;
  DeviceMesh(std::shared_ptr<const Root> root, MeshDims dims)
      : root_(std::move(root)), mask_(dims.mask()) {}

  std::shared_ptr<const Root> root_;
  unsigned mask_ = 0;  // bit d set: root dim d belongs to this mesh
};

}  // namespace titan::parallel
