// Context parallelism (parallel/context_parallel.h) under mpirun: every rank builds the same
// whole sequence, runs single-process causal attention on it as the oracle, and checks that
// its head-tail rows of out, lse and dqkv come out of ring attention and of all-gather
// attention over the cp ranks, to 1e-6 relative in f32 (merging by the log-sum-exp reorders
// the softmax sums, nothing more). It also checks that each rank computes exactly its share of
// the causal blocks (2·cp + 1, equal on every rank), and the split itself: positions, shard,
// unshard, gather, RoPE at global positions, the refusal of a length that does not split.
// And the model on top of it: a Transformer given its head-tail chunks of the tokens on each cp
// rank has the loss and (summed over the ranks) the gradients of one process with the whole
// sequence, under every activation checkpointing mode. Each of these runs again under
// block_causal, on documents that cross the chunk cuts: the ring then computes exactly the
// blocks some query's document reaches.
//
// Suites: "fast ranks=2" and "fast ranks=4" run in the fast tier (a few seconds each, most of
// it mpirun's start), "matrix ranks=8" in the matrix tier (test/CMakeLists.txt).
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/ops/attention/attention.h"
#include "model/ops/rope.h"
#include "model/transformer.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/context_parallel.h"
#include "support/mpi_world.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

namespace titan::parallel {
namespace {

using testing::world_rank;

// cp groups of `cp` consecutive world ranks.
std::shared_ptr<Communicator> cp_group(int cp) {
  return split_world_communicator(world_rank() / cp, world_rank(), "cp");
}

// max |a − b| / max |b|
double cp_relative_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = testing::to_doubles(a), y = testing::to_doubles(b);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  return diff / std::max(scale, 1e-30);
}

struct CpHeads {
  int64_t B, S, H, Hkv, Dh;
  int64_t nq() const { return H * Dh; }
  int64_t W() const { return (H + 2 * Hkv) * Dh; }
};

// This rank's head-tail rows of a [B·S, N] tensor, as [B·S/cp, N].
Tensor my_rows(const Tensor& t, const CpHeads& h, int64_t cp, int64_t rank) {
  return cp_shard(t.view({h.B, h.S, t.size(1)}), 1, cp, rank).view({h.B * h.S / cp, t.size(1)});
}

int64_t all_min(int64_t v) {
  int64_t out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  return out;
}
int64_t all_max(int64_t v) {
  int64_t out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// Documents for block_causal: in sequence 0 of lengths 4 and S − 4, in sequence 1 5 and
// S − 5, the second crossing every chunk cut after it. doc_start [B, S] (the global positions).
Tensor cp_documents(int64_t B, int64_t S) {
  Tensor t = Tensor::empty({B, S}, DType::I32);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < S; ++i) t.data<int32_t>()[b * S + i] = i < 4 + b % 2 ? 0 : 4 + b % 2;
  }
  return t;
}

// The chunk×chunk blocks ring attention computes over the whole group: those of the lower
// triangle whose keys do not all lie before every query's document.
int64_t visible_blocks(const Tensor& doc_start, int64_t cp, int64_t C) {
  const int64_t B = doc_start.size(0), S = doc_start.size(1);
  int64_t blocks = 0;
  for (int64_t qc = 0; qc < 2 * cp; ++qc) {
    int64_t least = qc * C;
    for (int64_t b = 0; b < B; ++b) {
      least = std::min<int64_t>(least, doc_start.data<int32_t>()[b * S + qc * C]);
    }
    for (int64_t kc = 0; kc <= qc; ++kc) blocks += (kc + 1) * C > least ? 1 : 0;
  }
  return blocks;
}

// The sum of `v` over the cp group.
int64_t group_sum(Communicator& comm, int64_t v) {
  Tensor t = Tensor::from_vector<double>({static_cast<double>(v)}, {1});
  comm.all_reduce(t, ReduceOp::Sum);
  return static_cast<int64_t>(t.data<double>()[0]);
}

// Forward and backward of cp attention on this rank's tokens against the whole sequence on one
// process; the blocks and transfers each rank counted. `documents`: under block_causal, on the
// documents of cp_documents.
void check_cp_attention(const std::shared_ptr<Communicator>& comm, CpRotateMethod method,
                        const CpHeads& h, bool documents = false) {
  const int64_t cp = comm->size(), r = comm->rank(), L = h.S / cp;
  CAPTURE(cp);
  CAPTURE(r);
  CAPTURE(h.H);
  CAPTURE(h.Hkv);
  CAPTURE(method == CpRotateMethod::Ring ? "ring" : "allgather");
  // Scale 2: softmax rows neither flat nor one-hot.
  const Tensor qkv_full = testing::random_tensor({h.B * h.S, h.W()}, DType::F32, 71, 2.0);
  const Tensor dout_full = testing::random_tensor({h.B * h.S, h.nq()}, DType::F32, 72);
  const model::AttentionShape full{h.B, h.S, h.H, h.Hkv, h.Dh};
  const Tensor doc_full = documents ? cp_documents(h.B, h.S) : Tensor();
  Tensor out_full = Tensor::empty({h.B * h.S, h.nq()}, DType::F32);
  Tensor lse_full = Tensor::empty({h.B, h.H, h.S}, DType::F32);
  Tensor dqkv_full = Tensor::empty(qkv_full.shape(), DType::F32);
  model::attention_forward(out_full, lse_full, qkv_full, full, doc_full);
  model::attention_backward(dqkv_full, dout_full, qkv_full, out_full, lse_full, full, doc_full);
  model::DocumentMask mask;
  if (documents) {
    mask.doc_start = cp_shard(doc_full, 1, cp, r);
    mask.doc_start_host = mask.doc_start;
  }

  const model::AttentionShape local{h.B, L, h.H, h.Hkv, h.Dh};
  const Tensor qkv = my_rows(qkv_full, h, cp, r), dout = my_rows(dout_full, h, cp, r);
  ContextParallelGroup group(comm, method);
  Tensor out = Tensor::empty({h.B * L, h.nq()}, DType::F32);
  Tensor lse = Tensor::empty({h.B, h.H, L}, DType::F32);
  group.attention_forward(out, lse, qkv, local, mask);
  const CommStats forward = group.waits().take();
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32);
  group.attention_backward(dqkv, dout, qkv, out, lse, local, mask);
  const CommStats backward = group.waits().take();

  const double e_out = cp_relative_error(out, my_rows(out_full, h, cp, r));
  const double e_lse = cp_relative_error(lse, cp_shard(lse_full, 2, cp, r));
  const double e_dqkv = cp_relative_error(dqkv, my_rows(dqkv_full, h, cp, r));
  MESSAGE("cp " << cp << " rank " << r << " H " << h.H << " Hkv " << h.Hkv
                << ": relative error out " << e_out << ", lse " << e_lse << ", dqkv " << e_dqkv);
  CHECK(e_out < 1e-6);
  CHECK(e_lse < 1e-6);
  CHECK(e_dqkv < 1e-6);
  // Gathered back, the ranks' rows are the whole sequence's.
  CHECK(cp_relative_error(cp_all_gather(*comm, out.view({h.B, L, h.nq()}), 1),
                          out_full.view({h.B, h.S, h.nq()})) < 1e-6);

  // Each rank computes its lower-triangle share of the (2·cp)² chunk blocks and no more; under
  // block_causal the group computes only the blocks some query's document reaches.
  if (documents) {
    const int64_t expected = visible_blocks(doc_full, cp, h.S / (2 * cp));
    MESSAGE("cp " << cp << " block_causal: " << group_sum(*comm, forward.blocks) << " blocks of "
                  << cp * (2 * cp + 1) << " computed");
    if (method == CpRotateMethod::Ring) {
      CHECK(group_sum(*comm, forward.blocks) == expected);
      CHECK(group_sum(*comm, backward.blocks) == expected);
      CHECK(expected < cp * (2 * cp + 1));
    } else {
      CHECK(group_sum(*comm, forward.blocks) <= cp * (2 * cp + 1));
    }
  } else {
    CHECK(forward.blocks == 2 * cp + 1);
    CHECK(backward.blocks == 2 * cp + 1);
    CHECK(all_min(forward.blocks) == all_max(forward.blocks));
  }
  // The ring passes K/V cp − 1 times forward, and K/V cp − 1 plus dK/dV cp times backward; the
  // all-gather mode gathers once each way and reduce-scatters dK/dV once.
  if (method == CpRotateMethod::Ring) {
    CHECK(forward.transfers == cp - 1);
    CHECK(backward.transfers == 2 * cp - 1);
  } else {
    CHECK(forward.transfers == 1);
    CHECK(backward.transfers == 2);
  }
  CHECK(forward.wait_seconds >= 0);
}

void check_every_method_and_grouping(const std::shared_ptr<Communicator>& comm) {
  for (CpRotateMethod method : {CpRotateMethod::Ring, CpRotateMethod::AllGather}) {
    for (auto [H, Hkv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {4, 1}}) {
      // Chunks of 3 tokens: S = 2·cp·3.
      check_cp_attention(comm, method, {2, 6 * comm->size(), H, Hkv, 8});
    }
    check_cp_attention(comm, method, {2, 6 * comm->size(), 4, 2, 8}, /*documents=*/true);
  }
}

// The small model, its weights and gradients: one process on the whole sequence against the
// cp group on its chunks, each rank's gradients summed over the group (what FSDP's reduce-
// scatter over dp_shard × cp does). Each token's loss is scaled by 1 / (B·S) in both, so the
// sums are the whole sequence's mean. Full AC recomputes the ring in backward.
void check_cp_model(const std::shared_ptr<Communicator>& comm, CpRotateMethod method,
                    bool documents = false) {
  const model::ModelArgs args = testing::small_model_args();
  const int64_t cp = comm->size(), r = comm->rank(), B = 2, S = 6 * cp;
  const Tensor tokens = testing::random_tokens(B, S, args.vocab_size, 91);
  const Tensor targets = testing::random_tokens(B, S, args.vocab_size, 92);
  const Tensor doc_start = documents ? cp_documents(B, S) : Tensor();
  CAPTURE(documents);
  for (const model::ActivationCheckpointMode mode :
       {model::ActivationCheckpointMode::None, model::ActivationCheckpointMode::Full}) {
    CAPTURE(std::string(model::kActivationCheckpointModes.name(mode)));
    CAPTURE(std::string(kCpRotateMethods.name(method)));
    const model::ActivationCheckpointPolicy policy =
        model::ActivationCheckpointPolicy::make(mode, "1", "option");
    model::Transformer whole(args, DType::F32), part(args, DType::F32);
    for (model::Transformer* m : {&whole, &part}) {
      m->allocate();
      m->init_weights(7);
      m->set_activation_checkpoint(policy);
      m->zero_grad();
    }
    part.set_context_parallel(std::make_shared<ContextParallelGroup>(comm, method));
    const double expected = whole.forward(tokens, targets, 1.0 / (B * S), doc_start);
    whole.backward();
    Tensor loss = Tensor::from_vector<double>(
        {part.forward(cp_shard(tokens, 1, cp, r), cp_shard(targets, 1, cp, r), 1.0 / (B * S),
                      documents ? cp_shard(doc_start, 1, cp, r) : Tensor())},
        {1});
    part.backward();
    comm->all_reduce(loss, ReduceOp::Sum);
    MESSAGE("cp " << cp << " model loss " << loss.data<double>()[0] << ", one process "
                  << expected);
    CHECK(std::fabs(loss.data<double>()[0] - expected) <= 1e-6 * std::fabs(expected));
    const std::vector<model::Parameter*> mine = part.parameters(), ref = whole.parameters();
    double worst = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      comm->all_reduce(mine[i]->grad, ReduceOp::Sum);
      const double e = cp_relative_error(mine[i]->grad, ref[i]->grad);
      worst = std::max(worst, e);
      CHECK_MESSAGE(e < 1e-5, mine[i]->name << ": gradient relative error " << e);
    }
    MESSAGE("cp " << cp << ": worst gradient relative error " << worst);
  }
}

}  // namespace

TEST_SUITE("fast ranks=2") {
  TEST_CASE("cp split: a rank's positions are chunks r and 2cp-1-r and unshard inverts shard") {
    const int64_t S = 24;
    CHECK(cp_positions(8, 2, 0) == std::vector<int64_t>{0, 1, 6, 7});
    CHECK(cp_positions(8, 2, 1) == std::vector<int64_t>{2, 3, 4, 5});
    for (int64_t cp : {1, 2, 3, 4}) {
      CAPTURE(cp);
      std::vector<int64_t> seen;
      // tokens [B, S] and activations [B, S, D] sharded along dim 1, a table [S, D] along dim 0
      const Tensor tokens = testing::random_tokens(2, S, 1000, 81);
      const Tensor acts = testing::random_tensor({2, S, 5}, DType::F32, 82);
      const Tensor table = testing::random_tensor({S, 3}, DType::F32, 83);
      std::vector<Tensor> token_shards, act_shards, table_shards;
      for (int64_t r = 0; r < cp; ++r) {
        const std::vector<int64_t> pos = cp_positions(S, cp, r);
        REQUIRE(static_cast<int64_t>(pos.size()) == S / cp);
        seen.insert(seen.end(), pos.begin(), pos.end());
        token_shards.push_back(cp_shard(tokens, 1, cp, r));
        act_shards.push_back(cp_shard(acts, 1, cp, r));
        table_shards.push_back(cp_shard(table, 0, cp, r));
        for (int64_t i = 0; i < S / cp; ++i) {
          CHECK(token_shards[r].data<int32_t>()[S / cp + i] == tokens.data<int32_t>()[S + pos[i]]);
          CHECK(table_shards[r].data<float>()[i * 3 + 2] == table.data<float>()[pos[i] * 3 + 2]);
        }
      }
      std::sort(seen.begin(), seen.end());
      for (int64_t i = 0; i < S; ++i) CHECK(seen[i] == i);  // every position exactly once
      CHECK(testing::bitwise_equal(cp_unshard(token_shards, 1), tokens));
      CHECK(testing::bitwise_equal(cp_unshard(act_shards, 1), acts));
      CHECK(testing::bitwise_equal(cp_unshard(table_shards, 0), table));
    }
  }

  TEST_CASE("cp split: a length that does not split into 2·cp chunks is refused naming the key") {
    CHECK_NOTHROW(check_cp_seq_len(2048, 4, "training.seq_len"));
    CHECK_THROWS_WITH_AS(check_cp_seq_len(100, 3, "training.seq_len"),
                         "training.seq_len: 100 tokens do not split into 2·cp = 6 equal chunks "
                         "(context parallel degree 3, head-tail split); use a multiple of 6",
                         InputError);
  }

  TEST_CASE(
      "cp rope: tables cut at a rank's positions rotate its tokens as in the whole sequence") {
    const int64_t B = 2, S = 16, heads = 3, Dh = 8, W = 4 * Dh;
    Tensor cos = Tensor::empty({S, Dh / 2}, DType::F32),
           sin = Tensor::empty({S, Dh / 2}, DType::F32);
    model::rope_tables(cos, sin, Dh, 500000.0, model::RopeScaling{});
    const Tensor x = testing::random_tensor({B * S, W}, DType::F32, 84);
    const Tensor rotated = x.clone();
    model::rope_forward(rotated, cos, sin, S, heads, Dh);
    for (int64_t cp : {2, 4}) {
      for (int64_t r = 0; r < cp; ++r) {
        const Tensor mine = cp_shard(x.view({B, S, W}), 1, cp, r).view({B * S / cp, W});
        model::rope_forward(mine, cp_shard(cos, 0, cp, r), cp_shard(sin, 0, cp, r), S / cp, heads,
                            Dh);
        CHECK(testing::bitwise_equal(
            mine, cp_shard(rotated.view({B, S, W}), 1, cp, r).view({B * S / cp, W})));
      }
    }
  }

  TEST_CASE("cp attention: a cp group of one rank is the local attention bit for bit") {
    const CpHeads h{2, 6, 4, 2, 8};
    const Tensor qkv = testing::random_tensor({h.B * h.S, h.W()}, DType::F32, 85);
    const model::AttentionShape a{h.B, h.S, h.H, h.Hkv, h.Dh};
    Tensor out = Tensor::empty({h.B * h.S, h.nq()}, DType::F32),
           lse = Tensor::empty({2, 4, 6}, DType::F32);
    Tensor out_ref = Tensor::empty(out.shape(), DType::F32),
           lse_ref = Tensor::empty(lse.shape(), DType::F32);
    ContextParallelGroup(split_world_communicator(world_rank(), 0, "cp"), CpRotateMethod::Ring)
        .attention_forward(out, lse, qkv, a, {});
    model::attention_forward(out_ref, lse_ref, qkv, a);
    CHECK(testing::bitwise_equal(out, out_ref));
    CHECK(testing::bitwise_equal(lse, lse_ref));
  }

  TEST_CASE("cp attention: ring and all-gather on 2 ranks equal full causal attention") {
    check_every_method_and_grouping(cp_group(2));
  }

  TEST_CASE("cp model: a Transformer on 2 cp ranks has one process's loss and gradients") {
    for (CpRotateMethod method : {CpRotateMethod::Ring, CpRotateMethod::AllGather}) {
      check_cp_model(cp_group(2), method);
      check_cp_model(cp_group(2), method, /*documents=*/true);
    }
  }
}

TEST_SUITE("fast ranks=4") {
  TEST_CASE(
      "cp attention: ring and all-gather on 4 ranks and on two groups of 2 equal full attention") {
    check_every_method_and_grouping(cp_group(4));
    check_every_method_and_grouping(cp_group(2));
  }

  TEST_CASE("cp model: a Transformer on 4 cp ranks has one process's loss and gradients") {
    check_cp_model(cp_group(4), CpRotateMethod::Ring);
    check_cp_model(cp_group(4), CpRotateMethod::Ring, /*documents=*/true);
  }
}

TEST_SUITE("matrix ranks=8") {
  TEST_CASE("cp attention: ring and all-gather on 8 ranks equal full causal attention") {
    check_every_method_and_grouping(cp_group(8));
  }
}

}  // namespace titan::parallel
