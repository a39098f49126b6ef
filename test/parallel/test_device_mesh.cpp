// DeviceMesh on a (2, 2, 2) mesh of 8 ranks: every slice, and every slice of a slice, has the
// right ranks in the right order, and its communicator really connects those ranks.
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

namespace titan::parallel {
namespace {

constexpr int kDims = 3;
constexpr std::array<int64_t, kDims> kDegrees = {2, 2, 2};  // dp_replicate, dp_shard, tp
constexpr unsigned kRoot = 0b111;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

DeviceMesh mesh_2x2x2() {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  REQUIRE_MESSAGE(world == 8,
                  "the mesh tests build a (2, 2, 2) mesh and need exactly 8 ranks "
                  "(mpirun -np 8), got "
                      << world);
  return DeviceMesh::root(ParallelDims::resolve(2, 2, 2, world), world_rank());
}

// World rank w = (r·2 + s)·2 + t.
std::array<int64_t, kDims> coordinates_of(int64_t w) {
  return {w / (kDegrees[1] * kDegrees[2]), (w / kDegrees[2]) % kDegrees[1], w % kDegrees[2]};
}

int64_t index_on(unsigned mask, const std::array<int64_t, kDims>& coords) {
  int64_t index = 0;
  for (int d = 0; d < kDims; ++d) {
    if (mask & (1u << d)) index = index * kDegrees[d] + coords[d];
  }
  return index;
}

// The world ranks in this rank's group of the mesh `mask`, in their mesh-rank order: those
// with this rank's coordinates on the other dims.
std::vector<int64_t> expected_members(unsigned mask) {
  const auto mine = coordinates_of(world_rank());
  std::vector<int64_t> members;
  for (int64_t w = 0; w < 8; ++w) {
    const auto theirs = coordinates_of(w);
    bool same_group = true;
    for (int d = 0; d < kDims; ++d) {
      if (!(mask & (1u << d)) && theirs[d] != mine[d]) same_group = false;
    }
    if (same_group) members.push_back(w);
  }
  // Ascending world rank is already row-major order on the mask's dims (tp innermost).
  return members;
}

struct SliceName {
  const char* name;
  unsigned mask;
};
constexpr std::array<SliceName, 4> kNames = {
    {{"dp_replicate", 0b001}, {"dp_shard", 0b010}, {"tp", 0b100}, {"dp", 0b011}}};

std::string expected_comm_name(unsigned mask) {
  if (mask == kRoot) return "world";
  if (mask == 0) return "self";
  std::string name;
  for (int d = 0; d < kDims; ++d) {
    if (!(mask & (1u << d))) continue;
    if (!name.empty()) name += "×";
    name += kNames[d].name;
  }
  return name;
}

// Checks `mesh` (which should span `mask`) against the coordinates, then slices every
// non-empty subset of the names it accepts and checks those, down to `depth` more levels.
void check_mesh(const DeviceMesh& root, const DeviceMesh& mesh, unsigned mask, int depth,
                const std::string& path) {
  INFO("slices ", path, " → mesh ", mesh.describe());
  const std::vector<int64_t> members = expected_members(mask);
  const int64_t n = static_cast<int64_t>(members.size());

  int64_t product = 1;
  std::vector<std::string> names;
  for (int d = 0; d < kDims; ++d) {
    CHECK(mesh.has(static_cast<MeshDim>(d)) == ((mask & (1u << d)) != 0));
    if (mask & (1u << d)) {
      product *= kDegrees[d];
      names.emplace_back(kNames[d].name);
    }
  }
  CHECK(mesh.dim_names() == names);
  CHECK(mesh.size() == product);
  CHECK(mesh.size() == n);
  CHECK(mesh.rank() == index_on(mask, coordinates_of(world_rank())));
  CHECK(mesh.comm().size() == mesh.size());
  CHECK(mesh.comm().rank() == mesh.rank());
  CHECK(mesh.comm().name() == expected_comm_name(mask));
  // Cached: the same dims give the same communicator, however they were reached.
  const bool same_as_self = mesh.shared_comm() == root.slice({}).shared_comm();
  CHECK(same_as_self == (mask == 0));
  if (mask != 0) {
    std::vector<std::string_view> from_root;
    for (const std::string& name : names) from_root.emplace_back(name);
    CHECK(mesh.shared_comm() == root.slice(from_root).shared_comm());
  }

  // The communicator connects exactly the expected ranks, in the expected order.
  Tensor sum = Tensor::from_vector<double>({static_cast<double>(world_rank())}, {1});
  mesh.comm().all_reduce(sum, ReduceOp::Sum);
  int64_t expected_sum = 0;
  for (int64_t w : members) expected_sum += w;
  CHECK(sum.data<double>()[0] == static_cast<double>(expected_sum));
  Tensor gathered = Tensor::zeros({n}, DType::I64);
  mesh.comm().all_gather(gathered, Tensor::from_vector<int64_t>({world_rank()}, {1}));
  CHECK(std::vector<int64_t>(gathered.data<int64_t>(), gathered.data<int64_t>() + n) == members);

  // Dims the mesh lacks cannot be sliced from it; the error names the dim and the mesh.
  std::vector<SliceName> allowed;
  for (const SliceName& name : kNames) {
    if ((name.mask & ~mask) == 0) {
      allowed.push_back(name);
    } else {
      CHECK_THROWS_WITH_AS(mesh.slice({name.name}), doctest::Contains(name.name), Error);
      CHECK_THROWS_WITH_AS(mesh.slice({name.name}), doctest::Contains(mesh.describe().c_str()),
                           Error);
    }
  }
  CHECK_THROWS_WITH_AS(mesh.slice({"pp"}), doctest::Contains("dp_replicate, dp_shard, tp"), Error);

  if (depth == 0) return;
  for (unsigned subset = 1; subset < (1u << allowed.size()); ++subset) {
    std::vector<std::string_view> chosen;
    unsigned sub_mask = 0;
    std::string sub_path = path + " → {";
    for (size_t i = 0; i < allowed.size(); ++i) {
      if (!(subset & (1u << i))) continue;
      chosen.emplace_back(allowed[i].name);
      sub_mask |= allowed[i].mask;
      if (sub_path.back() != '{') sub_path += ",";
      sub_path += allowed[i].name;
    }
    check_mesh(root, mesh.slice(chosen), sub_mask, depth - 1, sub_path + "}");
  }
}

}  // namespace

TEST_SUITE("mpi") {
  TEST_CASE("DeviceMesh: the root of a (2, 2, 2) mesh has this rank's coordinates") {
    const DeviceMesh root = mesh_2x2x2();
    const auto coords = coordinates_of(world_rank());
    for (int d = 0; d < kDims; ++d) {
      CHECK(root.degree(static_cast<MeshDim>(d)) == kDegrees[d]);
      CHECK(root.coordinate(static_cast<MeshDim>(d)) == coords[d]);
    }
    CHECK(root.size() == 8);
    CHECK(root.rank() == world_rank());
    CHECK(root.dims().world_size == 8);
    CHECK(root.describe() == "(dp_replicate, dp_shard, tp) = 2 × 2 × 2");
    CHECK(root["tp"].describe() == "(tp) = 2");
    CHECK(root.slice({"dp_shard", "tp"}).describe() == "(dp_shard, tp) = 2 × 2");
    CHECK(root.slice({"tp", "dp"}).dim_names() ==
          std::vector<std::string>{"dp_replicate", "dp_shard", "tp"});
    // No dims: just this rank.
    CHECK(root.slice({}).size() == 1);
    CHECK(root.slice({}).comm().name() == "self");
    CHECK(std::string(mesh_dim_name(MeshDim::DpShard)) == "dp_shard");
  }

  TEST_CASE("DeviceMesh: every slice and every slice of a slice (3 levels) on (2, 2, 2)") {
    const DeviceMesh root = mesh_2x2x2();
    check_mesh(root, root, kRoot, 3, "root");
  }

  TEST_CASE("DeviceMesh: slicing a dim the submesh lacks is an error naming both") {
    const DeviceMesh root = mesh_2x2x2();
    const DeviceMesh fsdp = root["dp_shard"];
    CHECK_THROWS_WITH_AS(fsdp["tp"], doctest::Contains("\"tp\" is not in the mesh (dp_shard) = 2"),
                         Error);
    CHECK_THROWS_WITH_AS(fsdp["dp"], doctest::Contains("\"dp\""), Error);
    CHECK_THROWS_WITH_AS(root["data"], doctest::Contains("unknown mesh dim \"data\""), Error);
    // The same dims slice fine from the root, or from any mesh that has them.
    CHECK(root["tp"].size() == 2);
    CHECK(root.slice({"dp", "tp"})["tp"].comm().name() == "tp");
  }
}

}  // namespace titan::parallel
