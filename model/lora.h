// A low-rank adapter on a frozen linear (LoRA, Hu et al. 2021), and the GEMMs that add it:
//
//   y  = x·Wᵀ + s·(x·Aᵀ)·Bᵀ          s = alpha / r, W frozen
//   dx = dy·W + s·(dy·B)·A
//   dA = s·(dy·B)ᵀ·x      dB = s·dyᵀ·(x·Aᵀ)
//
// A fused weight (wqkv, w13) gets one adapter per part, as PEFT adapts q_proj, k_proj and
// v_proj apart: A stacks the parts' A_p [r, in] into [P·r, in], B stacks their B_p [out_p, r]
// as W stacks its parts, so tensor parallelism slices B's rows exactly as W's (each rank keeps
// its block of every part) and a row-parallel W's column slice is A's.
//
//   base style        A [P·r, in]          B [out, r]
//   column-parallel   whole (replicated)   rows, as W
//   row-parallel      columns, as W        whole (replicated)
//
// Every product above is linear in what a tp rank lacks, so each rank adds its partial term
// where W's GEMM has its partial sum (the reduce-scatter adds them), and the replicated factor's
// partial gradient is summed over tp as a sequence-parallel norm's is.
//
// FrozenWeightGemms wraps the linear's own GEMMs: W's output and grad-input GEMMs run as
// configured (high precision, bf16 or FP8), W's grad-weight GEMM never runs, and the adapter's
// small GEMMs run in the activations' precision from the high-precision x and dy. The
// projections x·Aᵀ and dy·B ride on the GEMM operand (GemmOperand::adapter_rows), so they are
// cut into row blocks and moved between tp ranks with the rows they belong to.
#pragma once

#include <cstdint>
#include <vector>

#include "model/linear.h"
#include "model/parameter.h"

namespace titan::model {

struct LowRankAdapter {
  Parameter* a = nullptr;  // [P·r, in], parts "<base part stem>.lora_a.weight"
  Parameter* b = nullptr;  // [out, r], parts "<base part stem>.lora_b.weight"
  int64_t rank = 0;        // r
  double scale = 1.0;      // s = alpha / r

  int64_t part_count() const { return static_cast<int64_t>(b->parts.size()); }
  // This rank's rows of B's (and W's) part p: [begin, begin + count) of its slice.
  struct Rows {
    int64_t begin = 0, count = 0;
  };
  Rows local_rows(int64_t p) const;

  // u [T, P·r] = x [T, in] · Aᵀ
  Tensor project_input(const Tensor& x) const;
  // v [T, P·r] = dy [T, out] · B, part by part
  Tensor project_grad(const Tensor& dy) const;
  // y [T, out] += s · u · Bᵀ, part by part
  void add_output(const Tensor& y, const Tensor& u) const;
  // dx [T, in] += s · v · A
  void add_grad_input(const Tensor& dx, const Tensor& v) const;
  // A's and B's gradients += those of the whole tokens' dy [T, out] and x [T, in].
  void accumulate_grads(const Tensor& dy, const Tensor& x) const;
};

// Declares the adapter of a base weight: A [P·r, in] drawn N(0, 1/(3·in)) (the spread of PEFT's
// kaiming-uniform A), B [out, r] zero, so the adapted model starts as the base model. Parts are
// named after the base weight's: "layers.0.attention.wq.weight" adapts into
// "layers.0.attention.wq.lora_a.weight" and ".lora_b.weight".
struct DeclaredAdapter {
  Parameter a, b;
};
DeclaredAdapter declare_adapter(const Parameter& base, int64_t rank, DType dtype);
// "layers.0.attention.wq.weight" -> "layers.0.attention.wq.lora_a.weight" (which: "a" or "b").
std::string adapter_part_name(const std::string& base_part, const char* which);

// The GEMMs of a linear whose weight is frozen, with its adapter (or none: no weight gradient).
class FrozenWeightGemms final : public LinearGemms {
 public:
  FrozenWeightGemms(LinearGemms& inner, const LowRankAdapter* adapter)
      : inner_(inner), adapter_(adapter) {}
  GemmOperand prepare_a(GemmKind gemm, const Tensor& t) override;
  GemmOperand prepare_b(GemmKind gemm, const Tensor& t) override;
  void run(GemmKind gemm, const Tensor& out, const GemmOperand& a, const GemmOperand& b) override;
  std::string name() const override { return inner_.name(); }

 private:
  LinearGemms& inner_;
  const LowRankAdapter* adapter_;
};

// Points each adapter factor's tensor-parallel slice at its base weight's (the table above):
// B follows a row split, A a column split; the other stays whole.
void follow_base_slice(LowRankAdapter& adapter, const ParamSlice& base);

}  // namespace titan::model
