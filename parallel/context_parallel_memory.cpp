#include "parallel/context_parallel_memory.h"

#include "parallel/memory_estimate.h"

namespace titan::parallel {

namespace {

using Bytes = MemoryTimeline::Bytes;

using replay::d;

}  // namespace

Bytes ContextParallelAttentionMemory::gather_kv(MemoryTimeline& t, const Attention& a,
                                                int64_t nkv) const {
  const double local = d(a.batch * a.seq_len) * d(nkv) * a.element_bytes;
  Bytes gathered = t.hold(d(cp_) * local);
  t.hold(local);  // local_kv, freed once the gather is posted and done
  Bytes kv = t.hold(d(cp_) * local);
  gathered = {};
  return kv;
}

// ContextParallelGroup::attention_forward, the local heads over the cp ranks: L = S/cp local
// tokens in two chunks of C = L/2. Everything here is gone when attention returns.
void ContextParallelAttentionMemory::attention_forward(MemoryTimeline& t,
                                                       const Attention& a) const {
  const int64_t B = a.batch, L = a.seq_len, C = L / 2;
  const int64_t nq = a.heads * a.head_dim, nkv = 2 * a.kv_heads * a.head_dim;
  const double e = a.element_bytes, acc = a.cuda ? 4 : e;
  // out_accumulator: the model's out itself unless it is bf16.
  const auto out_acc = [&] { return acc == e ? Bytes() : t.hold(d(B * L) * d(nq) * acc); };
  if (method_ == CpRotateMethod::AllGather) {
    // Each query chunk attends over its prefix of the gathered K/V in one block.
    const Bytes kv = gather_kv(t, a, nkv);
    const Bytes out = out_acc();
    return;
  }
  // ring_forward: the K/V in hand and the next rank's arriving, one block's partials.
  const Bytes kv = t.hold(d(B * L) * d(nkv) * e), kv_next = t.hold(d(B * L) * d(nkv) * e);
  const Bytes out = out_acc();
  const Bytes out_part = t.hold(d(B * C) * d(nq) * acc);
  const Bytes lse_part = t.hold(d(B * a.heads * C) * acc);
}

// ContextParallelGroup::attention_backward: the K/V travel again, with their gradients.
void ContextParallelAttentionMemory::attention_backward(MemoryTimeline& t,
                                                        const Attention& a) const {
  const int64_t B = a.batch, L = a.seq_len, C = L / 2;
  const int64_t nq = a.heads * a.head_dim, nkv = 2 * a.kv_heads * a.head_dim;
  const double e = a.element_bytes, acc = a.cuda ? 4 : e;
  // attention_block_backward_cuda's Δ [B, H, C] in f32, one block at a time.
  const auto block_delta = [&] {
    if (a.cuda) t.hold(d(B * a.heads * C) * 4);
  };
  if (method_ == CpRotateMethod::AllGather) {
    // K/V gathered again, dq, the sequence's dK/dV, then its chunks reduce-scattered home.
    const Bytes kv = gather_kv(t, a, nkv);
    const Bytes dq = t.hold(d(B * L) * d(nq) * acc);
    const Bytes dkv_seq = t.hold(d(cp_ * B * L) * d(nkv) * acc);
    block_delta();
    const Bytes partials = t.hold(d(cp_ * B * L) * d(nkv) * acc);
    const Bytes dkv = t.hold(d(B * L) * d(nkv) * acc);
    return;
  }
  // ring_backward: the K/V in hand and arriving, dq, two blocks' dK/dV (one computed while the
  // other travels) and the partial sum arriving from the rank before.
  const Bytes kv = t.hold(d(B * L) * d(nkv) * e), kv_next = t.hold(d(B * L) * d(nkv) * e);
  const Bytes dq = t.hold(d(B * L) * d(nq) * acc);
  const Bytes dkv_block0 = t.hold(d(B * L) * d(nkv) * acc),
              dkv_block1 = t.hold(d(B * L) * d(nkv) * acc);
  const Bytes dkv_in = t.hold(d(B * L) * d(nkv) * acc);
  block_delta();
}

}  // namespace titan::parallel
