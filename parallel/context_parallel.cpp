#include "parallel/context_parallel.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/cast.h"
#include "core/check.h"
#include "model/ops/attention/attention_block.h"
#include "model/ops/tensor_math.h"

namespace titan::parallel {

namespace {

// Posted transfers not yet waited for: tested between blocks (which is what moves an MPI
// message past its eager limit while the CPU computes), waited for where a result is needed,
// the wait timed as cp wait on the device the attention runs on (core/wait_clock.h).
class InFlight {
 public:
  InFlight(CommWaits& waits, Device device) : waits_(waits), device_(device) {}
  void post(Work work) { works_.push_back({std::move(work), false}); }
  void poll() {
    for (Posted& p : works_) {
      if (!p.done && p.work.done()) {
        p.done = true;
        waits_.count_finished_during_compute();
      }
    }
  }
  void wait_all() {
    const WaitClock::Scope timed(waits_.clock(), device_);
    for (Posted& p : works_) {
      waits_.count_transfer();
      p.work.wait();
    }
    works_.clear();
  }

 private:
  struct Posted {
    Work work;
    bool done;
  };
  CommWaits& waits_;
  Device device_;
  std::vector<Posted> works_;
};

// Rows [start, start + count) of sequence o in a [outer·len, inner] buffer: contiguous, so
// copy_from can write them on any device.
Tensor seq_rows(const Tensor& t2d, int64_t o, int64_t len, int64_t start, int64_t count) {
  return t2d.rows(o * len + start, o * len + start + count);
}

// [outer, len, inner] flattened to rows of `inner` elements: seq_dim's extent is len.
struct SeqLayout {
  int64_t outer = 1, len = 0, inner = 1;
};

SeqLayout seq_layout(const Tensor& t, int seq_dim) {
  TT_CHECK(seq_dim >= 0 && seq_dim < t.ndim(), "context parallel: sequence dim ", seq_dim,
           " out of range for ", t);
  SeqLayout l;
  l.len = t.size(seq_dim);
  for (int d = 0; d < seq_dim; ++d) l.outer *= t.size(d);
  for (int d = seq_dim + 1; d < t.ndim(); ++d) l.inner *= t.size(d);
  return l;
}

// The sizes and views of one rank's attention: L = S/cp local tokens per sequence in two
// chunks of C, qkv [B·L, W], kv buffers [B·L, 2·Hkv·Dh] (k heads, then v heads).
struct LocalAttention {
  int64_t cp, rank;
  int64_t B, L, C, H, Hkv, Dh;
  model::AttentionBackend backend;  // the model's, for every block
  int64_t nq, nkv, W;
  DType act, acc;    // activations (qkv, out); partials, lse and gradient accumulators
  CommWaits& waits;  // the cp group's: its transfers' waits and the blocks computed

  const model::DocumentMask& mask;  // this rank's rows of the document starts (block_causal)

  LocalAttention(int64_t cp_size, int64_t cp_rank, const Tensor& qkv,
                 const model::AttentionShape& a, CommWaits& cp_waits,
                 const model::DocumentMask& document_mask)
      : cp(cp_size),
        rank(cp_rank),
        B(a.batch),
        L(a.seq_len),
        C(a.seq_len / 2),
        H(a.n_heads),
        Hkv(a.n_kv_heads),
        Dh(a.head_dim),
        backend(a.backend),
        nq(a.n_heads * a.head_dim),
        nkv(2 * a.n_kv_heads * a.head_dim),
        W(nq + nkv),
        act(qkv.dtype()),
        acc(qkv.device().is_cuda() ? DType::F32 : qkv.dtype()),
        waits(cp_waits),
        mask(document_mask) {}

  // Local chunk c ∈ {0, 1} of a [B·L, N] buffer, as [B, C, N] (columns [col, col + n)).
  Tensor chunk(const Tensor& t2d, int64_t c, int64_t col, int64_t n) const {
    return t2d.view({B, L, t2d.size(1)}).narrow(1, c * C, C).narrow(2, col, n);
  }
  Tensor q(const Tensor& qkv, int64_t c) const { return chunk(qkv, c, 0, nq); }
  Tensor k(const Tensor& kv, int64_t c) const { return chunk(kv, c, 0, nkv / 2); }
  Tensor v(const Tensor& kv, int64_t c) const { return chunk(kv, c, nkv / 2, nkv / 2); }
  Tensor lse_chunk(const Tensor& lse, int64_t c) const { return lse.narrow(2, c * C, C); }
  // Positions of chunks: local chunk c of rank `of`.
  int64_t pos(int64_t of, int64_t c) const { return cp_chunk_index(cp, of, c) * C; }

  // Local chunk c's rows of the document starts, [B, C] on the device; undefined when causal.
  Tensor doc(int64_t c) const {
    return mask.block_causal() ? mask.doc_start.view({B, L}).narrow(1, c * C, C) : Tensor();
  }
  // The least document start of local chunk c's queries over the batch (0 when causal): no
  // query of the chunk sees a key before it.
  int64_t min_doc(int64_t c) const {
    if (!mask.block_causal()) return 0;
    const int32_t* starts = mask.doc_start_host.data<int32_t>();
    int64_t least = pos(rank, c);
    for (int64_t b = 0; b < B; ++b) least = std::min<int64_t>(least, starts[b * L + c * C]);
    return least;
  }

  model::AttentionBlockShape block(int64_t q_pos, int64_t q_len, int64_t kv_pos,
                                   int64_t kv_len) const {
    return {B, H, Hkv, Dh, q_len, kv_len, q_pos, kv_pos, backend};
  }

  // This rank's K/V columns of qkv, contiguous: what travels.
  Tensor local_kv(const Tensor& qkv) const {
    Tensor kv = Tensor::empty({B * L, nkv}, act, qkv.device());
    kv.copy_from(qkv.narrow(1, nq, nkv));
    return kv;
  }
};

void check_local(const char* op, int64_t cp, const Tensor& qkv, const Tensor& out,
                 const Tensor& lse, const model::AttentionShape& a) {
  TT_CHECK(a.seq_len % 2 == 0, op, ": this rank's S/cp = ", a.seq_len,
           " tokens must be its two head-tail chunks of equal length (S a multiple of 2·cp = ",
           2 * cp, "); check_cp_seq_len should have refused the config");
  const int64_t tokens = a.batch * a.seq_len;
  check_tensor(qkv, "cp attention qkv", {tokens, (a.n_heads + 2 * a.n_kv_heads) * a.head_dim},
               qkv.dtype());
  check_tensor(out, "cp attention out", {tokens, a.n_heads * a.head_dim}, qkv.dtype());
  check_tensor(lse, "cp attention lse", {a.batch, a.n_heads, a.seq_len},
               qkv.device().is_cuda() ? DType::F32 : qkv.dtype());
}

// block_causal's document starts: this rank's [B, S/cp] on the device and on the CPU.
void check_mask(const char* op, const model::DocumentMask& mask, const model::AttentionShape& a) {
  if (!mask.block_causal()) return;
  check_tensor(mask.doc_start, "cp attention doc_start", {a.batch, a.seq_len}, DType::I32);
  TT_CHECK(mask.doc_start_host.defined() && mask.doc_start_host.device().is_cpu(), op,
           ": block_causal under cp needs the document starts on the CPU too (doc_start_host)");
  check_tensor(mask.doc_start_host, "cp attention doc_start_host", {a.batch, a.seq_len},
               DType::I32);
}

// Where the blocks' out accumulates: out itself when it has the accumulator's dtype (the CPU),
// else an accumulator of its shape (f32 on CUDA, beside the model's bf16 out). It says which,
// so that storing it needs no comparison of addresses.
struct OutAccumulator {
  Tensor values;
  bool is_out = false;
};

OutAccumulator out_accumulator(const Tensor& out, DType acc) {
  if (out.dtype() == acc) return {out, true};
  return {Tensor::empty(out.shape(), acc, out.device()), false};
}

// The accumulated out into the model's out; nothing to do when it accumulated there.
void store_out(const Tensor& out, const OutAccumulator& out_acc) {
  if (!out_acc.is_out) cast_into(out, out_acc.values);
}

// ---- ring -------------------------------------------------------------------------------------

// The K/V chunks of rank `src` that local query chunk `a` sees, with their block shapes: not
// after every query, and under block_causal not before every query's document.
template <class F>
void for_each_visible_block(const LocalAttention& l, int64_t src, F&& f) {
  for (int64_t a = 0; a < 2; ++a) {
    const int64_t min_doc = l.min_doc(a);
    for (int64_t c = 0; c < 2; ++c) {
      const model::AttentionBlockShape blk = l.block(l.pos(l.rank, a), l.C, l.pos(src, c), l.C);
      if (model::kv_block_place(blk) == model::KvBlockPlace::Future) continue;
      if (model::kv_block_before_documents(blk, min_doc)) continue;
      f(a, c, blk);
      l.waits.count_blocks(1);
    }
  }
}

void ring_forward(Communicator& comm, CommWaits& waits, const Tensor& out, const Tensor& lse,
                  const Tensor& qkv, const model::AttentionShape& shape,
                  const model::DocumentMask& mask) {
  const LocalAttention l(comm.size(), comm.rank(), qkv, shape, waits, mask);
  const int next = static_cast<int>((l.rank + 1) % l.cp);
  const int prev = static_cast<int>((l.rank + l.cp - 1) % l.cp);
  Tensor kv = l.local_kv(qkv), kv_next = Tensor::empty(kv.shape(), l.act, qkv.device());
  const OutAccumulator accumulator = out_accumulator(out, l.acc);
  const Tensor& out_acc = accumulator.values;
  out_acc.zero_();
  lse.fill_(-std::numeric_limits<double>::infinity());  // the merge's empty result
  const Tensor out_part = Tensor::empty({l.B, l.C, l.nq}, l.acc, qkv.device());
  const Tensor lse_part = Tensor::empty({l.B, l.H, l.C}, l.acc, qkv.device());
  InFlight flight(l.waits, qkv.device());
  for (int64_t s = 0; s < l.cp; ++s) {
    const int64_t src = (l.rank + l.cp - s) % l.cp;  // whose K/V are in hand
    if (s + 1 < l.cp) flight.post(comm.exchange_async({kv}, next, {kv_next}, prev));
    for_each_visible_block(l, src, [&](int64_t a, int64_t c, const model::AttentionBlockShape& b) {
      model::attention_block_forward(out_part, lse_part, l.q(qkv, a), l.k(kv, c), l.v(kv, c), b,
                                     l.doc(a));
      model::attention_lse_merge(l.chunk(out_acc, a, 0, l.nq), l.lse_chunk(lse, a), out_part,
                                 lse_part);
      flight.poll();
    });
    flight.wait_all();
    std::swap(kv, kv_next);
  }
  store_out(out, accumulator);
}

// dK, dV of the K/V in hand are computed into a fresh buffer while the partial sum of the ranks
// before arrives, then added to it and sent on: the dK/dV transfer of step s − 1 overlaps the
// blocks of step s, as the K/V transfer of step s + 1 does.
void ring_backward(Communicator& comm, CommWaits& waits, const Tensor& dqkv, const Tensor& dout,
                   const Tensor& qkv, const Tensor& out, const Tensor& lse,
                   const model::AttentionShape& shape, const model::DocumentMask& mask) {
  const LocalAttention l(comm.size(), comm.rank(), qkv, shape, waits, mask);
  const Device device = qkv.device();
  const int next = static_cast<int>((l.rank + 1) % l.cp);
  const int prev = static_cast<int>((l.rank + l.cp - 1) % l.cp);
  Tensor kv = l.local_kv(qkv), kv_next = Tensor::empty(kv.shape(), l.act, device);
  const Tensor dq = Tensor::zeros({l.B * l.L, l.nq}, l.acc, device);
  const Tensor dkv_block[2] = {Tensor::empty({l.B * l.L, l.nkv}, l.acc, device),
                               Tensor::empty({l.B * l.L, l.nkv}, l.acc, device)};
  const Tensor dkv_in = Tensor::empty({l.B * l.L, l.nkv}, l.acc, device);
  InFlight kv_flight(l.waits, device), dkv_flight(l.waits, device);
  for (int64_t s = 0; s < l.cp; ++s) {
    const int64_t src = (l.rank + l.cp - s) % l.cp;
    if (s + 1 < l.cp) kv_flight.post(comm.exchange_async({kv}, next, {kv_next}, prev));
    const Tensor& dkv = dkv_block[s % 2];
    dkv.zero_();
    for_each_visible_block(l, src, [&](int64_t a, int64_t c, const model::AttentionBlockShape& b) {
      model::attention_block_backward(
          l.chunk(dq, a, 0, l.nq), l.k(dkv, c), l.v(dkv, c), l.chunk(dout, a, 0, l.nq), l.q(qkv, a),
          l.k(kv, c), l.v(kv, c), l.chunk(out, a, 0, l.nq), l.lse_chunk(lse, a), b, l.doc(a));
      kv_flight.poll();
      dkv_flight.poll();
    });
    if (s > 0) {
      dkv_flight.wait_all();
      model::accumulate(dkv, dkv_in);  // the ranks before this one, for the same K/V
    }
    kv_flight.wait_all();
    std::swap(kv, kv_next);
    // After the last step the sum of every rank is one hop from home: rank r holds r + 1's.
    dkv_flight.post(comm.exchange_async({dkv}, next, {dkv_in}, prev));
  }
  dkv_flight.wait_all();
  model::attention_assemble_dqkv(dqkv, dq, dkv_in);
}

// ---- all-gather -------------------------------------------------------------------------------

// Between the gathered [cp·B·L, N] (rank-major, each rank's two chunks in its order) and
// [B·S, N] in sequence order, chunk by chunk, either way.
void move_chunks(const LocalAttention& l, const Tensor& seq, const Tensor& gathered,
                 bool to_sequence) {
  const int64_t S = l.L * l.cp;
  for (int64_t r = 0; r < l.cp; ++r) {
    const Tensor part = gathered.rows(r * l.B * l.L, (r + 1) * l.B * l.L);
    for (int64_t c = 0; c < 2; ++c) {
      for (int64_t b = 0; b < l.B; ++b) {
        const Tensor in_seq = seq_rows(seq, b, S, cp_chunk_index(l.cp, r, c) * l.C, l.C);
        const Tensor in_part = seq_rows(part, b, l.L, c * l.C, l.C);
        if (to_sequence) {
          in_seq.copy_from(in_part);
        } else {
          in_part.copy_from(in_seq);
        }
      }
    }
  }
}

// Every rank's K/V, gathered and put in sequence order: [B·S, 2·Hkv·Dh].
Tensor gather_kv(Communicator& comm, const LocalAttention& l, const Tensor& qkv) {
  const Device device = qkv.device();
  const Tensor gathered = Tensor::empty({l.cp * l.B * l.L, l.nkv}, l.act, device);
  InFlight flight(l.waits, device);
  flight.post(comm.all_gather_async(gathered, l.local_kv(qkv)));
  flight.wait_all();
  const Tensor kv = Tensor::empty({l.B * l.L * l.cp, l.nkv}, l.act, device);
  move_chunks(l, kv, gathered, true);
  return kv;
}

// Keys and values at the block's positions [kv_pos, kv_pos + kv_len) of a sequence-ordered
// [B·S, 2·Hkv·Dh] buffer.
Tensor block_k(const LocalAttention& l, const Tensor& kv, const model::AttentionBlockShape& b) {
  return kv.view({l.B, l.L * l.cp, l.nkv}).narrow(1, b.kv_pos, b.kv_len).narrow(2, 0, l.nkv / 2);
}
Tensor block_v(const LocalAttention& l, const Tensor& kv, const model::AttentionBlockShape& b) {
  return kv.view({l.B, l.L * l.cp, l.nkv})
      .narrow(1, b.kv_pos, b.kv_len)
      .narrow(2, l.nkv / 2, l.nkv / 2);
}

// Each local query chunk attends, in one block, over every position up to its own (under
// block_causal from its least document start on).
template <class F>
void for_each_query_chunk(const LocalAttention& l, F&& f) {
  for (int64_t a = 0; a < 2; ++a) {
    const int64_t chunk = cp_chunk_index(l.cp, l.rank, a);
    const int64_t first = l.min_doc(a);
    f(a, l.block(chunk * l.C, l.C, first, (chunk + 1) * l.C - first));
    l.waits.count_blocks(chunk + 1 - first / l.C);
  }
}

void all_gather_forward(Communicator& comm, CommWaits& waits, const Tensor& out, const Tensor& lse,
                        const Tensor& qkv, const model::AttentionShape& shape,
                        const model::DocumentMask& mask) {
  const LocalAttention l(comm.size(), comm.rank(), qkv, shape, waits, mask);
  const Tensor kv = gather_kv(comm, l, qkv);
  const OutAccumulator accumulator = out_accumulator(out, l.acc);
  const Tensor& out_acc = accumulator.values;
  for_each_query_chunk(l, [&](int64_t a, const model::AttentionBlockShape& b) {
    model::attention_block_forward(l.chunk(out_acc, a, 0, l.nq), l.lse_chunk(lse, a), l.q(qkv, a),
                                   block_k(l, kv, b), block_v(l, kv, b), b, l.doc(a));
  });
  store_out(out, accumulator);
}

// K/V are gathered again rather than kept from the forward: cp times the local K/V per layer
// is what context parallelism exists to avoid holding.
void all_gather_backward(Communicator& comm, CommWaits& waits, const Tensor& dqkv,
                         const Tensor& dout, const Tensor& qkv, const Tensor& out,
                         const Tensor& lse, const model::AttentionShape& shape,
                         const model::DocumentMask& mask) {
  const LocalAttention l(comm.size(), comm.rank(), qkv, shape, waits, mask);
  const Device device = qkv.device();
  const Tensor kv = gather_kv(comm, l, qkv);
  const Tensor dq = Tensor::zeros({l.B * l.L, l.nq}, l.acc, device);
  const Tensor dkv_seq = Tensor::zeros(kv.shape(), l.acc, device);
  for_each_query_chunk(l, [&](int64_t a, const model::AttentionBlockShape& b) {
    model::attention_block_backward(l.chunk(dq, a, 0, l.nq), block_k(l, dkv_seq, b),
                                    block_v(l, dkv_seq, b), l.chunk(dout, a, 0, l.nq), l.q(qkv, a),
                                    block_k(l, kv, b), block_v(l, kv, b), l.chunk(out, a, 0, l.nq),
                                    l.lse_chunk(lse, a), b, l.doc(a));
  });
  const Tensor partials = Tensor::empty({l.cp * l.B * l.L, l.nkv}, l.acc, device);
  move_chunks(l, dkv_seq, partials, false);
  const Tensor dkv = Tensor::empty({l.B * l.L, l.nkv}, l.acc, device);
  InFlight flight(l.waits, device);
  flight.post(comm.reduce_scatter_async(dkv, partials, ReduceOp::Sum));
  flight.wait_all();
  model::attention_assemble_dqkv(dqkv, dq, dkv);
}

// The config was checked (check_cp_seq_len) before anything runs: a length that does not split
// here is a bug of the caller, not bad input.
void check_split(int64_t seq_len, int64_t cp, const char* what) {
  TT_CHECK(cp > 0 && seq_len > 0 && seq_len % (2 * cp) == 0, what, ": a sequence of ", seq_len,
           " positions does not split into 2·cp = ", 2 * cp, " equal chunks");
}

}  // namespace

// ---- the head-tail split ----------------------------------------------------------------------

int64_t cp_chunk_index(int64_t cp, int64_t rank, int64_t local_chunk) {
  TT_CHECK(rank >= 0 && rank < cp && (local_chunk == 0 || local_chunk == 1),
           "context parallel: chunk ", local_chunk, " of rank ", rank, " of ", cp);
  return local_chunk == 0 ? rank : 2 * cp - 1 - rank;
}

std::vector<int64_t> cp_positions(int64_t seq_len, int64_t cp, int64_t rank) {
  check_split(seq_len, cp, "cp_positions");
  const int64_t C = seq_len / (2 * cp);
  std::vector<int64_t> positions;
  positions.reserve(2 * C);
  for (int64_t c = 0; c < 2; ++c) {
    const int64_t first = cp_chunk_index(cp, rank, c) * C;
    for (int64_t i = 0; i < C; ++i) positions.push_back(first + i);
  }
  return positions;
}

Tensor cp_shard(const Tensor& full, int seq_dim, int64_t cp, int64_t rank) {
  const SeqLayout s = seq_layout(full, seq_dim);
  check_split(s.len, cp, "cp_shard");
  const int64_t C = s.len / (2 * cp), L = s.len / cp;
  Shape shape = full.shape();
  shape[seq_dim] = L;
  const Tensor shard = Tensor::empty(shape, full.dtype(), full.device());
  const Tensor from = full.contiguous().view({s.outer * s.len, s.inner});
  const Tensor to = shard.view({s.outer * L, s.inner});
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t c = 0; c < 2; ++c) {
      seq_rows(to, o, L, c * C, C)
          .copy_from(seq_rows(from, o, s.len, cp_chunk_index(cp, rank, c) * C, C));
    }
  }
  return shard;
}

Tensor cp_unshard(const std::vector<Tensor>& shards, int seq_dim) {
  TT_CHECK(!shards.empty(), "cp_unshard: no shards");
  const int64_t cp = static_cast<int64_t>(shards.size());
  const SeqLayout s = seq_layout(shards[0], seq_dim);
  TT_CHECK(s.len % 2 == 0, "cp_unshard: a shard of ", s.len,
           " positions is not two head-tail chunks; got ", shards[0]);
  const int64_t C = s.len / 2, S = s.len * cp;
  Shape shape = shards[0].shape();
  shape[seq_dim] = S;
  const Tensor full = Tensor::empty(shape, shards[0].dtype(), shards[0].device());
  const Tensor to = full.view({s.outer * S, s.inner});
  for (int64_t r = 0; r < cp; ++r) {
    TT_CHECK(shards[r].shape() == shards[0].shape() && shards[r].dtype() == shards[0].dtype(),
             "cp_unshard: shard ", r, " is ", shards[r], " but shard 0 is ", shards[0]);
    const Tensor from = shards[r].contiguous().view({s.outer * s.len, s.inner});
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t c = 0; c < 2; ++c) {
        seq_rows(to, o, S, cp_chunk_index(cp, r, c) * C, C)
            .copy_from(seq_rows(from, o, s.len, c * C, C));
      }
    }
  }
  return full;
}

Tensor cp_all_gather(Communicator& comm, const Tensor& shard, int seq_dim) {
  const int64_t cp = comm.size();
  if (cp == 1) return shard;
  const Tensor gathered = Tensor::empty({cp, shard.numel()}, shard.dtype(), shard.device());
  comm.all_gather(gathered, shard.contiguous());
  std::vector<Tensor> shards;
  for (int64_t r = 0; r < cp; ++r) shards.push_back(gathered.rows(r, r + 1).view(shard.shape()));
  return cp_unshard(shards, seq_dim);
}

// ---- attention over the cp group --------------------------------------------------------------

ContextParallelGroup::ContextParallelGroup(std::shared_ptr<Communicator> comm,
                                           CpRotateMethod method, std::shared_ptr<CommWaits> waits)
    : comm_(std::move(comm)), method_(method), waits_(std::move(waits)) {
  TT_CHECK(comm_ != nullptr, "context parallel group without a communicator");
  if (waits_ == nullptr) waits_ = std::make_shared<CommWaits>();
}

void ContextParallelGroup::attention_forward(const Tensor& out, const Tensor& lse,
                                             const Tensor& qkv, const model::AttentionShape& shape,
                                             const model::DocumentMask& mask) {
  if (size() == 1) return model::attention_forward(out, lse, qkv, shape, mask.doc_start);
  check_local("cp attention_forward", size(), qkv, out, lse, shape);
  check_mask("cp attention_forward", mask, shape);
  if (method_ == CpRotateMethod::Ring) {
    return ring_forward(*comm_, *waits_, out, lse, qkv, shape, mask);
  }
  all_gather_forward(*comm_, *waits_, out, lse, qkv, shape, mask);
}

void ContextParallelGroup::attention_backward(const Tensor& dqkv, const Tensor& dout,
                                              const Tensor& qkv, const Tensor& out,
                                              const Tensor& lse, const model::AttentionShape& shape,
                                              const model::DocumentMask& mask) {
  if (size() == 1) {
    return model::attention_backward(dqkv, dout, qkv, out, lse, shape, mask.doc_start);
  }
  check_local("cp attention_backward", size(), qkv, out, lse, shape);
  check_tensor(dqkv, "cp attention dqkv", qkv.shape(), qkv.dtype());
  check_tensor(dout, "cp attention dout", out.shape(), qkv.dtype());
  check_mask("cp attention_backward", mask, shape);
  if (method_ == CpRotateMethod::Ring) {
    return ring_backward(*comm_, *waits_, dqkv, dout, qkv, out, lse, shape, mask);
  }
  all_gather_backward(*comm_, *waits_, dqkv, dout, qkv, out, lse, shape, mask);
}

}  // namespace titan::parallel
