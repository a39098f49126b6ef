#include "parallel/device_mesh.h"

#include <mpi.h>

#include <algorithm>

#include "core/check.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/comm/mpi_watchdog.h"
#include "parallel/comm/nccl_communicator.h"
#include "parallel/comm/peer_channels.h"
#include "parallel/mpi_runtime.h"

namespace titan::parallel {
namespace {

constexpr unsigned kAllDims = (1u << kMeshDims) - 1;  // the root: every dim

constexpr unsigned bit(MeshDim dim) { return 1u << static_cast<int>(dim); }
constexpr unsigned bit(int dim) { return 1u << dim; }

std::string joined_dims(unsigned mask, const char* separator) {
  std::string text;
  for (int d = 0; d < kMeshDims; ++d) {
    if (!(mask & bit(d))) continue;
    if (!text.empty()) text += separator;
    text += mesh_dim_name(static_cast<MeshDim>(d));
  }
  return text;
}

// The communicator's name in messages: its dims of degree above 1, "dp_replicate×dp_shard";
// all of them is "world" and none "self".
std::string comm_name(unsigned canonical, unsigned nontrivial) {
  if (canonical == 0) return "self";
  if (canonical == nontrivial) return "world";
  return joined_dims(canonical, "×");
}

// The pipeline's peer channels (comm/peer_channels.h): between neighbouring pp ranks, a two-rank
// communicator for each kind of message and each direction, cut from the world like every other
// communicator (decision 5), round by round (peer_pairs_of), 4 splits a round. Under NCCL each
// is an NCCL split on a stream of its own (`nccl`); under MPI (CommOptions::mpi_peer_channels)
// the MPI split alone. `others`: this rank's index on the dims other than pp, which its pp group
// shares.
std::shared_ptr<Communicator> with_pipeline_peer_channels(std::shared_ptr<Communicator> pp_group,
                                                          const std::shared_ptr<NcclWorld>& nccl,
                                                          int64_t pp, int64_t coordinate,
                                                          int64_t others) {
  const std::vector<PeerPair> mine = peer_pairs_of(pp, coordinate);
  const int64_t pairs = pp == 2 ? 1 : pp;
  std::vector<PeerChannel> channels;
  for (int64_t round = 0; round < peer_pair_rounds(pp); ++round) {
    const auto it = std::find_if(mine.begin(), mine.end(),
                                 [round](const PeerPair& p) { return p.round == round; });
    const PeerPair* pair = it == mine.end() ? nullptr : &*it;
    for (const int channel : {kActivationChannel, kGradientChannel}) {
      for (const int sender_key : {0, 1}) {  // 0: from p to p + 1, 1: back
        std::string name;
        int color = kNoGroup, key = 0;
        if (pair != nullptr) {
          const int64_t low = pair->pair, high = (pair->pair + 1) % pp;
          name =
              detail::concat("pp ", sender_key == 0 ? low : high, "→", sender_key == 0 ? high : low,
                             " ", channel == kActivationChannel ? "activations" : "gradients");
          color = static_cast<int>(others * pairs + pair->pair);
          key = pair->key;
        }
        std::shared_ptr<Communicator> comm = split_world_communicator(color, key, name);
        if (nccl) comm = split_nccl_peer_channel(nccl, color, key, sender_key, std::move(comm));
        if (pair == nullptr) continue;
        channels.push_back(
            {static_cast<int>(pair->peer), channel,
             key == sender_key ? PeerTransfer::Direction::Send : PeerTransfer::Direction::Recv,
             std::move(comm), 1 - key});
      }
    }
  }
  return with_peer_channels(std::move(pp_group), std::move(channels));
}

}  // namespace

const char* mesh_dim_name(MeshDim dim) {
  switch (dim) {
    case MeshDim::Pp: return "pp";
    case MeshDim::DpReplicate: return "dp_replicate";
    case MeshDim::DpShard: return "dp_shard";
    case MeshDim::Cp: return "cp";
    case MeshDim::Tp: return "tp";
  }
  TT_CHECK(false, "unknown MeshDim ", static_cast<int>(dim));
}

CommBackend resolve_comm_backend(CommBackend backend, Device device) {
  if (backend != CommBackend::Auto) return backend;
  return device.is_cuda() ? CommBackend::Nccl : CommBackend::Mpi;
}

struct DeviceMesh::Root {
  ParallelDims dims;
  CommBackend backend = CommBackend::Mpi;
  std::array<int64_t, kMeshDims> degrees{};      // pp, dp_replicate, dp_shard, cp, tp
  std::array<int64_t, kMeshDims> coordinates{};  // this rank's, in the same order
  std::array<std::shared_ptr<Communicator>, 1u << kMeshDims> comms;  // indexed by dim mask
  int64_t world_rank = 0;

  // The dims of degree above 1: a dim set and its intersection with these are one group.
  unsigned nontrivial() const {
    unsigned mask = 0;
    for (int d = 0; d < kMeshDims; ++d) {
      if (degrees[d] > 1) mask |= bit(d);
    }
    return mask;
  }
  // Row-major index of `coords` restricted to the dims in `mask` (root order, tp innermost).
  int64_t index_on(unsigned mask, const std::array<int64_t, kMeshDims>& coords) const {
    int64_t index = 0;
    for (int d = 0; d < kMeshDims; ++d) {
      if (mask & bit(d)) index = index * degrees[d] + coords[d];
    }
    return index;
  }
  int64_t size_of(unsigned mask) const {
    int64_t size = 1;
    for (int d = 0; d < kMeshDims; ++d) {
      if (mask & bit(d)) size *= degrees[d];
    }
    return size;
  }
};

DeviceMesh DeviceMesh::root(const ParallelDims& dims, int world_rank, const CommOptions& options) {
  int mpi_size = 0, mpi_rank = 0;
  TT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &mpi_size));
  TT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank));
  TT_CHECK(dims.pp * dims.dp_replicate * dims.dp_shard * dims.cp * dims.tp == mpi_size &&
               dims.world_size == mpi_size,
           "DeviceMesh::root: the mesh ", dims.describe(), " (world_size ", dims.world_size,
           ") does not cover the ", mpi_size, " ranks of MPI_COMM_WORLD; build it with ",
           "ParallelDims::resolve for this world");
  TT_CHECK(world_rank == mpi_rank, "DeviceMesh::root: called with world rank ", world_rank,
           " on MPI_COMM_WORLD rank ", mpi_rank);
  TT_CHECK(options.timeout_s > 0, "DeviceMesh::root: the communication timeout must be ",
           "positive, got ", options.timeout_s, " s");
  TT_CHECK(options.backend != CommBackend::Auto,
           "DeviceMesh::root: resolve_comm_backend picks the backend of auto");

  // The MPI watchdog's limit for everything posted from here on (NCCL's watchdog takes it below).
  set_comm_timeout(options.timeout_s);

  auto root = std::make_shared<Root>();
  root->dims = dims;
  root->backend = options.backend;
  root->degrees = {dims.pp, dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp};
  root->world_rank = world_rank;
  // w = (((p·R + r)·S + s)·C + c)·T + t: peel the dims off from the innermost.
  int64_t rest = world_rank;
  for (int d = kMeshDims - 1; d >= 0; --d) {
    root->coordinates[d] = rest % root->degrees[d];
    rest /= root->degrees[d];
  }

  std::shared_ptr<NcclWorld> nccl;
  if (options.backend == CommBackend::Nccl) {
    nccl = create_nccl_world(options.timeout_s, options.backend_key);
  }

  // Every rank splits the world for every mask of dims of degree above 1, in the same order:
  // the ranks sharing their coordinates on the other dims form one group, ordered by their
  // index on the mask's dims. A mask with dims of degree 1 is the same group as the mask
  // without them, and shares its communicator.
  const unsigned nontrivial = root->nontrivial();
  for (unsigned mask = 0; mask <= kAllDims; ++mask) {
    if ((mask & ~nontrivial) != 0) continue;
    const int color = static_cast<int>(root->index_on(kAllDims & ~mask, root->coordinates));
    const int key = static_cast<int>(root->index_on(mask, root->coordinates));
    const std::string name = comm_name(mask, nontrivial);
    auto comm = split_world_communicator(color, key, name);
    TT_CHECK(comm->size() == root->size_of(mask) && comm->rank() == key, "DeviceMesh::root: ", name,
             " came out as rank ", comm->rank(), " of ", comm->size(), ", expected ", key, " of ",
             root->size_of(mask));
    // The NCCL communicator of the same group holds the MPI one, for CPU tensors.
    if (nccl) comm = split_nccl_communicator(nccl, color, key, std::move(comm));
    root->comms[mask] = std::move(comm);
  }
  if ((nccl || options.mpi_peer_channels) && dims.pp > 1) {
    const unsigned pp = bit(MeshDim::Pp);
    root->comms[pp] = with_pipeline_peer_channels(
        root->comms[pp], nccl, dims.pp, root->coordinates[static_cast<int>(MeshDim::Pp)],
        root->index_on(kAllDims & ~pp, root->coordinates));
  }
  for (unsigned mask = 0; mask <= kAllDims; ++mask) {
    root->comms[mask] = root->comms[mask & nontrivial];
  }
  return DeviceMesh(std::move(root), MeshDims{MeshDim::Pp, MeshDim::DpReplicate, MeshDim::DpShard,
                                              MeshDim::Cp, MeshDim::Tp});
}

DeviceMesh DeviceMesh::slice(MeshDims dims) const {
  const unsigned lacking = dims.mask() & ~mask_;
  TT_CHECK(lacking == 0, "DeviceMesh::slice: dims (", joined_dims(lacking, ", "),
           ") are not in the mesh ", describe(),
           "; slice them from a mesh that has them (the root has every dim)");
  return DeviceMesh(root_, dims);
}

std::string mesh_dims_text(MeshDims dims, const char* separator) {
  return joined_dims(dims.mask(), separator);
}

std::vector<std::string> DeviceMesh::dim_names() const {
  std::vector<std::string> names;
  for (int d = 0; d < kMeshDims; ++d) {
    if (mask_ & bit(d)) names.emplace_back(mesh_dim_name(static_cast<MeshDim>(d)));
  }
  return names;
}

bool DeviceMesh::has(MeshDim dim) const { return (mask_ & bit(static_cast<int>(dim))) != 0; }

int64_t DeviceMesh::size() const { return root_->size_of(mask_); }

int64_t DeviceMesh::rank() const { return root_->index_on(mask_, root_->coordinates); }

int64_t DeviceMesh::degree(MeshDim dim) const { return root_->degrees[static_cast<int>(dim)]; }

int64_t DeviceMesh::coordinate(MeshDim dim) const {
  return root_->coordinates[static_cast<int>(dim)];
}

Communicator& DeviceMesh::comm() const { return *root_->comms[mask_]; }

std::shared_ptr<Communicator> DeviceMesh::shared_comm() const { return root_->comms[mask_]; }

const ParallelDims& DeviceMesh::dims() const { return root_->dims; }

CommBackend DeviceMesh::backend() const { return root_->backend; }

int64_t DeviceMesh::world_rank() const { return root_->world_rank; }

int64_t DeviceMesh::world_rank_at(MeshDim dim, int64_t coordinate) const {
  const int d = static_cast<int>(dim);
  TT_CHECK(0 <= coordinate && coordinate < root_->degrees[d],
           "DeviceMesh::world_rank_at: ", mesh_dim_name(dim), " coordinate ", coordinate,
           " of a degree ", root_->degrees[d]);
  std::array<int64_t, kMeshDims> coords = root_->coordinates;
  coords[d] = coordinate;
  return root_->index_on(kAllDims, coords);
}

std::string DeviceMesh::describe() const {
  if (mask_ == 0) return "(self) = 1";
  std::string degrees;
  for (int d = 0; d < kMeshDims; ++d) {
    if (!(mask_ & bit(d))) continue;
    if (!degrees.empty()) degrees += " × ";
    degrees += std::to_string(root_->degrees[d]);
  }
  std::string text = "(";
  text += joined_dims(mask_, ", ");
  text += ") = ";
  text += degrees;
  return text;
}

}  // namespace titan::parallel
