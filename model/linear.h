// Linear layer y = x·Wᵀ on 2-D [tokens, features] operands, and the two seams where the rest
// of the system changes how it computes (ARCHITECTURE.md decisions 2 and 4):
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

#include <memory>
#include <string>

#include "core/tensor.h"
#include "model/parameter.h"

namespace titan::model {

class LinearGemms {
 public:
  virtual ~LinearGemms() = default;
  // y[T, out] = x[T, in] · w[out, in]ᵀ
  virtual void output(const Tensor& y, const Tensor& x, const Tensor& w) = 0;
  // dx[T, in] = dy[T, out] · w[out, in]
  virtual void grad_input(const Tensor& dx, const Tensor& dy, const Tensor& w) = 0;
  // dw[out, in] += dy[T, out]ᵀ · x[T, in]
  virtual void grad_weight(const Tensor& dw, const Tensor& dy, const Tensor& x) = 0;
  virtual std::string name() const = 0;
};

// The three GEMMs in the operands' own dtype (f32 or f64 on the CPU), through core/gemm.
// With bf16_operands, f32 operands are first rounded to bf16 (round to nearest even) and the
// GEMM accumulates in fp32: the CPU's emulation of a bf16 GEMM, the baseline FP8 is judged by.
class HighPrecisionGemms final : public LinearGemms {
 public:
  explicit HighPrecisionGemms(bool bf16_operands = false) : bf16_operands_(bf16_operands) {}
  void output(const Tensor& y, const Tensor& x, const Tensor& w) override;
  void grad_input(const Tensor& dx, const Tensor& dy, const Tensor& w) override;
  void grad_weight(const Tensor& dw, const Tensor& dy, const Tensor& x) override;
  std::string name() const override { return bf16_operands_ ? "bf16 (emulated)" : "high precision"; }

 private:
  Tensor operand(const Tensor& t) const;  // t, or its bf16-rounded copy
  bool bf16_operands_;
};

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

class Linear {
 public:
  // `fqn` is the layer's name in the parallelism plan and the FP8 filter
  // ("layers.0.attention.wqkv").
  Linear(std::string fqn, Parameter* weight);

  Tensor forward(const Tensor& x) const;                     // x [T, in] -> y [T, out]
  Tensor backward(const Tensor& dy, const Tensor& x) const;  // -> dx [T, in]; weight grad +=

  const std::string& fqn() const { return fqn_; }
  Parameter& weight() const { return *weight_; }
  LinearStyle& style() const { return *style_; }
  LinearGemms& gemms() const { return *gemms_; }
  void set_style(std::shared_ptr<LinearStyle> style);
  void set_gemms(std::shared_ptr<LinearGemms> gemms);

 private:
  std::string fqn_;
  Parameter* weight_;
  std::shared_ptr<LinearStyle> style_;
  std::shared_ptr<LinearGemms> gemms_;
};

}  // namespace titan::model
