// Weight-gradient GEMMs held back to run later: the W step of the zero-bubble pipeline schedules
// (docs/pipeline.md). A backward split in two computes the input gradient first (I: what the
// previous pipeline stage is waiting for) and leaves each linear's grad-weight GEMM,
// dw += dyᵀ · x, for a W step that fills what would otherwise be a bubble.
//
// The split costs no second pass over the block: a linear whose backward runs while a queue is
// set (Linear::set_weight_grad_queue) prepares the grad-weight operands as always — collectives
// included, such as a tensorwise amax over tp, so every tp rank still prepares in the same order
// — and hands them here instead of running the GEMM. The operands hold the tensors they read (dy,
// and x or its gathered or quantized copy), so those live until run(); the norms' weight
// gradients, which cost nothing next to a GEMM, are computed in I.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/linear.h"

namespace titan::model {

class WeightGradQueue {
 public:
  // dw += the grad-weight GEMM of a and b, when run() comes. `gemms` runs it then.
  void defer(std::shared_ptr<LinearGemms> gemms, std::string fqn, Tensor dw, GemmOperand a,
             GemmOperand b);
  // Runs every deferred GEMM, in the order deferred, and empties the queue.
  void run();
  bool empty() const { return pending_.empty(); }
  size_t size() const { return pending_.size(); }

 private:
  struct Pending {
    std::shared_ptr<LinearGemms> gemms;
    std::string fqn;  // "layers.3.attention.wqkv": the profiler span's name
    Tensor dw;
    GemmOperand a, b;
  };
  std::vector<Pending> pending_;
};

}  // namespace titan::model
