// Linear layer y = x·Wᵀ on 2-D [tokens, features] operands, and the two seams where the rest
// of the system changes how it computes (docs/architecture.md#decision-2 and #decision-4):
//
//   LinearGemms   how the three GEMMs of a linear run — output, grad-input, grad-weight — in
//                 high precision here, in FP8 with per-recipe scaling when fp8/ converts it.
//   LinearStyle   how the input and output are distributed across ranks — local here,
//                 column-/row-parallel with sequence parallelism (and async TP) when parallel/
//                 applies its plan.
//
// The model only ever calls Linear::forward and Linear::backward, so neither tensor parallelism
// nor FP8 appears in model code. Backward takes the forward input explicitly: the block decides
// whether that input was kept or recomputed (activation checkpointing), not the linear.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/parameter.h"

namespace titan::model {

class ProducerFusion;
struct ProducedOperands;

// A GEMM operand prepared once for its GEMM — the FP8 GEMMs quantize it along the GEMM's
// contraction axis — and then cut into row blocks that the styles run, send and receive as they
// are (docs/architecture.md#decision-4: a row block carries the scales of its rows, so no slicing
// can leave them behind). What the values and scales mean is the business of the LinearGemms that
// prepared it; the styles only slice rows and move the wire tensors.
struct GemmOperand {
  Tensor values;           // [rows, cols]: high-precision values, or FP8 codes
  Tensor row_scales;       // [rows, ...]: scales that run with the rows (rowwise, 1×128), or none
  Tensor shared_scales;    // scales all rows share (tensorwise [1], 128×128 tiles), or none
  // [rows, P·r]: the low-rank projection of these rows that a LoRA adapter adds back in
  // (x·Aᵀ for the output GEMM, dy·B for the grad-input GEMM; model/lora.h), or none. It runs
  // and travels with the rows, as row scales do.
  Tensor adapter_rows;
  int scaling = 0;         // how its LinearGemms reads the scales (0: high precision)
  bool row_blocks = true;  // false when a row block would cut through shared tiles (128×128)
  // The values are the very tensor prepare_a was given (a high-precision GEMM's operand as it
  // is): a style moving that tensor anyway need not move the operand too.
  bool is_the_input = false;

  // High-precision values as they are.
  static GemmOperand plain(Tensor values) {
    GemmOperand op;
    op.values = std::move(values);
    return op;
  }
  // The tensor prepare_a was given, as it is (is_the_input).
  static GemmOperand the_input(Tensor t) {
    GemmOperand op = plain(std::move(t));
    op.is_the_input = true;
    return op;
  }
  int64_t rows() const { return values.size(0); }
  // Rows [start, end), views of the same storage.
  GemmOperand row_block(int64_t start, int64_t end) const;
  // What a transfer of its rows moves: values, then row scales and adapter rows (the shared
  // scales are the same on every tp rank — a tensorwise amax is reduced over tp before
  // scaling — and stay put).
  std::vector<Tensor> wire() const;
  // The same layout with `rows` rows, uninitialised, its shared scales shared: a receive buffer
  // (no longer the input).
  GemmOperand with_rows(int64_t rows) const;
};

enum class GemmKind { Output, GradInput, GradWeight };
const char* gemm_kind_name(GemmKind gemm);  // "output", "grad_input", "grad_weight"

// How a linear's three GEMMs run, at two levels:
//   operand level   prepare each operand once, then run the GEMM on row blocks of the prepared
//                   `a` (tensor parallelism runs one block per tp rank, as it arrives);
//   whole tensors   output / grad_input / grad_weight: prepare both, run once (one rank).
// Both levels are one path, so one rank, synchronous TP and async TP compute alike.
//
//   gemm          a (rows = out's rows)   b                      out
//   Output        x  [T, in]              w [out, in]            y  [T, out]   = a · bᵀ
//   GradInput     dy [T, out]             w [out, in]            dx [T, in]    = a · b
//   GradWeight    dy [T, out]             x [T, in]              dw [out, in] += aᵀ · b
// GradWeight contracts over the tokens, so its `a` is never cut into row blocks.
class LinearGemms {
 public:
  virtual ~LinearGemms() = default;
  // May be collective over the tp group (a tensorwise amax is all-reduced there): every rank
  // prepares the same operands in the same order.
  virtual GemmOperand prepare_a(GemmKind gemm, const Tensor& t) = 0;
  virtual GemmOperand prepare_b(GemmKind gemm, const Tensor& t) = 0;
  // out = the GEMM of a (or a row block of it; out holds the same rows) and b.
  virtual void run(GemmKind gemm, const Tensor& out, const GemmOperand& a,
                   const GemmOperand& b) = 0;
  virtual std::string name() const = 0;
  // The fused producers of this linear's inputs and output gradients (model/producer_fusion.h)
  // for a producer writing `output`, or null: the producer runs alone and the operand is
  // prepared here.
  virtual ProducerFusion* producer_fusion(const Tensor& output) {
    (void)output;
    return nullptr;
  }

  // y[T, out] = x[T, in] · w[out, in]ᵀ
  void output(const Tensor& y, const Tensor& x, const Tensor& w) {
    whole(GemmKind::Output, y, x, w);
  }
  // dx[T, in] = dy[T, out] · w[out, in]
  void grad_input(const Tensor& dx, const Tensor& dy, const Tensor& w) {
    whole(GemmKind::GradInput, dx, dy, w);
  }
  // dw[out, in] += dy[T, out]ᵀ · x[T, in]
  void grad_weight(const Tensor& dw, const Tensor& dy, const Tensor& x) {
    whole(GemmKind::GradWeight, dw, dy, x);
  }
  // Whether grad-weight GEMMs are left for later (a split backward, weight_grad_queue.h).
  virtual bool defers_grad_weight() const { return false; }
  // dw += the grad-weight GEMM of what make_dy and make_x return when it runs. A style whose
  // operand is a tensor-parallel gather of rows it holds passes the gather, not its result, to a
  // deferred GEMM, which then holds the rank's rows until W instead of the gathered tensor.
  using MakeOperand = std::function<Tensor()>;
  virtual void grad_weight_of(const Tensor& dw, MakeOperand make_dy, MakeOperand make_x) {
    grad_weight(dw, make_dy(), make_x());
  }

 private:
  void whole(GemmKind gemm, const Tensor& out, const Tensor& a, const Tensor& b) {
    const GemmOperand pa = prepare_a(gemm, a);  // a before b on every rank (collectives)
    const GemmOperand pb = prepare_b(gemm, b);
    run(gemm, out, pa, pb);
  }
};

// The three GEMMs in the operands' own dtype (f32 or f64 on the CPU), through core/gemm.
// With bf16_operands, f32 operands are first rounded to bf16 (round to nearest even) and the
// GEMM accumulates in fp32: the CPU's emulation of a bf16 GEMM, the baseline FP8 is judged by.
class HighPrecisionGemms final : public LinearGemms {
 public:
  explicit HighPrecisionGemms(bool bf16_operands = false) : bf16_operands_(bf16_operands) {}
  GemmOperand prepare_a(GemmKind gemm, const Tensor& t) override;
  GemmOperand prepare_b(GemmKind gemm, const Tensor& t) override;
  void run(GemmKind gemm, const Tensor& out, const GemmOperand& a, const GemmOperand& b) override;
  std::string name() const override {
    return bf16_operands_ ? "bf16 (emulated)" : "high precision";
  }

 private:
  Tensor operand(const Tensor& t) const;  // t, or its bf16-rounded copy
  bool bf16_operands_;
};

// The high-precision GEMM of `gemm` on plain tensors (a and b as the table above).
void high_precision_gemm(GemmKind gemm, const Tensor& out, const Tensor& a, const Tensor& b);

class LinearStyle {
 public:
  virtual ~LinearStyle() = default;
  // x: this rank's input (rows and columns as the style distributes them); returns this rank's y.
  virtual Tensor forward(const Tensor& x, const Tensor& w, LinearGemms& gemms) = 0;
  // Returns dx, distributed like x; accumulates this rank's weight gradient into dw.
  virtual Tensor backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                          LinearGemms& gemms) = 0;
  virtual std::string name() const = 0;
};

// Every rank holds the whole input and the whole weight.
class LocalLinear final : public LinearStyle {
 public:
  Tensor forward(const Tensor& x, const Tensor& w, LinearGemms& gemms) override;
  Tensor backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                  LinearGemms& gemms) override;
  std::string name() const override { return "local"; }
};

class WeightGradQueue;
struct LowRankAdapter;

class Linear {
 public:
  // `fqn` is the layer's name in the parallelism plan and the FP8 filter
  // ("layers.0.attention.wqkv").
  Linear(std::string fqn, Parameter* weight);

  // x [T, in] -> y [T, out]. `produced`: x's operands as the op that wrote x prepared them
  // (model/producer_fusion.h), used in place of preparing x again; null: none.
  Tensor forward(const Tensor& x, const ProducedOperands* produced = nullptr) const;
  // -> dx [T, in]; weight grad +=. `produced`: dy's operands, as in forward.
  Tensor backward(const Tensor& dy, const Tensor& x,
                  const ProducedOperands* produced = nullptr) const;

  const std::string& fqn() const { return fqn_; }
  Parameter& weight() const { return *weight_; }
  LinearStyle& style() const { return *style_; }
  LinearGemms& gemms() const { return *gemms_; }
  // Its GEMMs' fused producers for a producer writing `output` (LinearGemms::producer_fusion).
  ProducerFusion* producer_fusion(const Tensor& output) const {
    return gemms_->producer_fusion(output);
  }
  void set_style(std::shared_ptr<LinearStyle> style);
  void set_gemms(std::shared_ptr<LinearGemms> gemms);
  // The low-rank adapter added to its output (model/lora.h), or null. A linear with a frozen
  // weight computes no weight gradient: its backward trains its adapter, if any, and nothing
  // else.
  void set_adapter(std::shared_ptr<LowRankAdapter> adapter) { adapter_ = std::move(adapter); }
  LowRankAdapter* adapter() const { return adapter_.get(); }
  // While set, backward() leaves its grad-weight GEMM in the queue instead of running it (the
  // split backward of the zero-bubble pipeline schedules, weight_grad_queue.h); null: run it.
  void set_weight_grad_queue(WeightGradQueue* queue) { weight_grad_queue_ = queue; }

 private:
  std::string fqn_;
  Parameter* weight_;
  std::shared_ptr<LinearStyle> style_;
  std::shared_ptr<LinearGemms> gemms_;
  std::shared_ptr<LowRankAdapter> adapter_;
  WeightGradQueue* weight_grad_queue_ = nullptr;
};

}  // namespace titan::model
