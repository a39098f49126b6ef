// DeviceMesh on 8 ranks, as the five-dim meshes (pp, dp_replicate, dp_shard, cp, tp) =
// (1, 2, 2, 1, 2) — the three-dim mesh (2, 2, 2) — and (2, 1, 2, 2, 1), where pipeline and
// context parallelism are real dims: every slice, and every slice of a slice, has the right
// ranks in the right order, its communicator really connects those ranks, and dim sets that
// differ only in dims of degree 1 share one communicator.
//
// The lesson this guards: torchao / PyTorch failed with "Cannot create a submesh from a
// submesh" on a (2, 2, 2) mesh with FSDP, because a submesh there remembered only its parent.
// Here every slice resolves against the root (docs/architecture.md#decision-5), so slicing from a
// submesh must give exactly what slicing the same dims from the root gives, at any depth.
#include <doctest/doctest.h>
#include <mpi.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dims.h"
#include "support/mpi_world.h"

namespace titan::parallel {
namespace {

using testing::world_rank;

constexpr int kDims = 5;
using Degrees = std::array<int64_t, kDims>;  // pp, dp_replicate, dp_shard, cp, tp
constexpr Degrees kThreeDims = {1, 2, 2, 1, 2};
constexpr Degrees kPipelineAndContext = {2, 1, 2, 2, 1};
constexpr unsigned kRoot = (1u << kDims) - 1;

DeviceMesh mesh_of(const Degrees& d) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  REQUIRE_MESSAGE(world == 8,
                  "the mesh tests build meshes of 8 ranks (mpirun -np 8), got " << world);
  MeshDegrees degrees;
  degrees.pp = d[0];
  degrees.dp_replicate = d[1];
  degrees.dp_shard = d[2];
  degrees.cp = d[3];
  degrees.tp = d[4];
  return DeviceMesh::root(ParallelDims::resolve(degrees, world), world_rank());
}

// World rank w = (((p·R + r)·S + s)·C + c)·T + t.
std::array<int64_t, kDims> coordinates_of(const Degrees& degrees, int64_t w) {
  std::array<int64_t, kDims> coords{};
  for (int d = kDims - 1; d >= 0; --d) {
    coords[d] = w % degrees[d];
    w /= degrees[d];
  }
  return coords;
}

int64_t index_on(const Degrees& degrees, unsigned mask, const std::array<int64_t, kDims>& coords) {
  int64_t index = 0;
  for (int d = 0; d < kDims; ++d) {
    if (mask & (1u << d)) index = index * degrees[d] + coords[d];
  }
  return index;
}

// The world ranks in this rank's group of the mesh `mask`, in their mesh-rank order: those
// with this rank's coordinates on the other dims.
std::vector<int64_t> expected_members(const Degrees& degrees, unsigned mask) {
  const auto mine = coordinates_of(degrees, world_rank());
  std::vector<int64_t> members;
  for (int64_t w = 0; w < 8; ++w) {
    const auto theirs = coordinates_of(degrees, w);
    bool same_group = true;
    for (int d = 0; d < kDims; ++d) {
      if (!(mask & (1u << d)) && theirs[d] != mine[d]) same_group = false;
    }
    if (same_group) members.push_back(w);
  }
  // Ascending world rank is already row-major order on the mask's dims (tp innermost).
  return members;
}

// The five dims and the three flattened sets, with the bits the tests expect of each.
struct SliceName {
  const char* name;
  MeshDims dims;
  unsigned mask;
};
constexpr std::array<SliceName, 8> kNames = {{{"pp", MeshDim::Pp, 0b00001},
                                              {"dp_replicate", MeshDim::DpReplicate, 0b00010},
                                              {"dp_shard", MeshDim::DpShard, 0b00100},
                                              {"cp", MeshDim::Cp, 0b01000},
                                              {"tp", MeshDim::Tp, 0b10000},
                                              {"dp", kDp, 0b00110},
                                              {"dp_shard_cp", kDpShardCp, 0b01100},
                                              {"dp_cp", kDpCp, 0b01110}}};

// The dims of degree above 1.
unsigned nontrivial(const Degrees& degrees) {
  unsigned mask = 0;
  for (int d = 0; d < kDims; ++d) {
    if (degrees[d] > 1) mask |= 1u << d;
  }
  return mask;
}

// A communicator is named after its dims of degree above 1.
std::string expected_comm_name(const Degrees& degrees, unsigned mask) {
  const unsigned real = mask & nontrivial(degrees);
  if (real == 0) return "self";
  if (real == nontrivial(degrees)) return "world";
  std::string name;
  for (int d = 0; d < kDims; ++d) {
    if (!(real & (1u << d))) continue;
    if (!name.empty()) name += "×";
    name += kNames[d].name;
  }
  return name;
}

// Checks `mesh` (which should span `mask`) against the coordinates; then, `depth` more levels
// down, slices it by every non-empty subset of the single dims it has, and by each flattened
// name it has, and checks those.
void check_mesh(const Degrees& degrees, const DeviceMesh& root, const DeviceMesh& mesh,
                unsigned mask, int depth, const std::string& path) {
  INFO("slices ", path, " → mesh ", mesh.describe());
  const std::vector<int64_t> members = expected_members(degrees, mask);
  const int64_t n = static_cast<int64_t>(members.size());

  int64_t product = 1;
  std::vector<std::string> names;
  for (int d = 0; d < kDims; ++d) {
    CHECK(mesh.has(static_cast<MeshDim>(d)) == ((mask & (1u << d)) != 0));
    if (mask & (1u << d)) {
      product *= degrees[d];
      names.emplace_back(kNames[d].name);
    }
  }
  CHECK(mesh.dim_names() == names);
  CHECK(mesh.size() == product);
  CHECK(mesh.size() == n);
  CHECK(mesh.rank() == index_on(degrees, mask, coordinates_of(degrees, world_rank())));
  CHECK(mesh.comm().size() == mesh.size());
  CHECK(mesh.comm().rank() == mesh.rank());
  CHECK(mesh.comm().name() == expected_comm_name(degrees, mask));
  // Cached: the same group of ranks has one communicator, however it was reached, and dims of
  // degree 1 add nothing.
  const bool same_as_self = mesh.shared_comm() == root.slice({}).shared_comm();
  CHECK(same_as_self == ((mask & nontrivial(degrees)) == 0));
  MeshDims real_dims;
  for (int d = 0; d < kDims; ++d) {
    if (mask & nontrivial(degrees) & (1u << d)) real_dims = real_dims | kNames[d].dims;
  }
  CHECK(mesh.shared_comm() == root.slice(real_dims).shared_comm());

  // The communicator connects exactly the expected ranks, in the expected order.
  Tensor sum = Tensor::from_vector<double>({static_cast<double>(world_rank())}, {1});
  mesh.comm().all_reduce(sum, ReduceOp::Sum);
  int64_t expected_sum = 0;
  for (int64_t w : members) expected_sum += w;
  CHECK(sum.data<double>()[0] == static_cast<double>(expected_sum));
  Tensor gathered = Tensor::zeros({n}, DType::I64);
  mesh.comm().all_gather(gathered, Tensor::from_vector<int64_t>({world_rank()}, {1}));
  CHECK(std::vector<int64_t>(gathered.data<int64_t>(), gathered.data<int64_t>() + n) == members);

  // Dims the mesh lacks cannot be sliced from it; the error names the dims and the mesh.
  for (const SliceName& name : kNames) {
    if ((name.mask & ~mask) == 0) continue;
    CHECK(name.dims.mask() == name.mask);
    for (int d = 0; d < kDims; ++d) {
      if (name.mask & ~mask & (1u << d)) {
        CHECK_THROWS_WITH_AS(mesh.slice(name.dims), doctest::Contains(kNames[d].name), Error);
      }
    }
    CHECK_THROWS_WITH_AS(mesh.slice(name.dims), doctest::Contains(mesh.describe().c_str()), Error);
  }

  if (depth == 0) return;
  for (unsigned subset = 1; subset <= kRoot; ++subset) {
    if ((subset & ~mask) != 0) continue;
    MeshDims chosen;
    std::string sub_path = path + " → {";
    for (int d = 0; d < kDims; ++d) {
      if (!(subset & (1u << d))) continue;
      chosen = chosen | kNames[d].dims;
      if (sub_path.back() != '{') sub_path += ",";
      sub_path += kNames[d].name;
    }
    check_mesh(degrees, root, mesh.slice(chosen), subset, depth - 1, sub_path + "}");
  }
  for (size_t i = kDims; i < kNames.size(); ++i) {
    if ((kNames[i].mask & ~mask) != 0) continue;
    check_mesh(degrees, root, mesh[kNames[i].dims], kNames[i].mask, 0,
               path + " → " + kNames[i].name);
  }
}

}  // namespace

TEST_SUITE("mpi") {
  TEST_CASE("DeviceMesh: the root of a (2 2 2) mesh has this rank's coordinates") {
    const DeviceMesh root = mesh_of(kThreeDims);
    const auto coords = coordinates_of(kThreeDims, world_rank());
    for (int d = 0; d < kDims; ++d) {
      CHECK(root.degree(static_cast<MeshDim>(d)) == kThreeDims[d]);
      CHECK(root.coordinate(static_cast<MeshDim>(d)) == coords[d]);
    }
    CHECK(root.size() == 8);
    CHECK(root.rank() == world_rank());
    CHECK(root.world_rank() == world_rank());
    CHECK(root.dims().world_size == 8);
    CHECK(root.describe() == "(pp, dp_replicate, dp_shard, cp, tp) = 1 × 2 × 2 × 1 × 2");
    CHECK(root.dims().describe() == "dp_replicate 2 × dp_shard 2 × tp 2 = 8 ranks");
    CHECK(root[MeshDim::Tp].describe() == "(tp) = 2");
    CHECK(root.slice({MeshDim::DpShard, MeshDim::Tp}).describe() == "(dp_shard, tp) = 2 × 2");
    CHECK(root.slice({MeshDim::Tp, kDp}).dim_names() ==
          std::vector<std::string>{"dp_replicate", "dp_shard", "tp"});
    CHECK(mesh_dims_text(kDpShardCp, " × ") == "dp_shard × cp");
    // No dims: just this rank.
    CHECK(root.slice({}).size() == 1);
    CHECK(root.slice({}).comm().name() == "self");
    CHECK(std::string(mesh_dim_name(MeshDim::DpShard)) == "dp_shard");
    // The pp and cp dims of degree 1 are this rank alone: no communicator of their own.
    CHECK(root[MeshDim::Pp].shared_comm() == root.slice({}).shared_comm());
    CHECK(root[kDpShardCp].shared_comm() == root[MeshDim::DpShard].shared_comm());
  }

  TEST_CASE("DeviceMesh: every slice and every slice of a slice on (2 2 2) as five dims") {
    const DeviceMesh root = mesh_of(kThreeDims);
    check_mesh(kThreeDims, root, root, kRoot, 2, "root");
  }

  TEST_CASE("DeviceMesh: every slice and every slice of a slice on pp 2 dp_shard 2 cp 2") {
    const DeviceMesh root = mesh_of(kPipelineAndContext);
    CHECK(root.dims().describe() == "pp 2 × dp_replicate 1 × dp_shard 2 × cp 2 × tp 1 = 8 ranks");
    // A stage's peer: the rank at the other pp coordinate with this rank's other coordinates.
    const int64_t other = 1 - root.coordinate(MeshDim::Pp);
    CHECK(root.world_rank_at(MeshDim::Pp, other) == (world_rank() + 4) % 8);
    check_mesh(kPipelineAndContext, root, root, kRoot, 2, "root");
  }

  TEST_CASE("DeviceMesh: slicing a dim the submesh lacks is an error naming both") {
    const DeviceMesh root = mesh_of(kThreeDims);
    const DeviceMesh fsdp = root[MeshDim::DpShard];
    CHECK_THROWS_WITH_AS(fsdp[MeshDim::Tp],
                         doctest::Contains("dims (tp) are not in the mesh (dp_shard) = 2"), Error);
    // Of a flattened set, the dims the mesh lacks.
    CHECK_THROWS_WITH_AS(fsdp[kDp], doctest::Contains("dims (dp_replicate) are not"), Error);
    // The same dims slice fine from the root, or from any mesh that has them.
    CHECK(root[MeshDim::Tp].size() == 2);
    CHECK(root.slice({kDp, MeshDim::Tp})[MeshDim::Tp].comm().name() == "tp");
  }
}

}  // namespace titan::parallel
