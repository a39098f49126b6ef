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
//
// A tensor-parallel linear's gathered operand (x of a column-parallel linear, dy of a row-parallel
// one) is not held: the queue keeps the rank's rows and the gather, made again in W, tp times
// less memory for one more all-gather over tp (parallel/tensor_parallel.h).
//
// The GEMMs are kept by parameter group (model_comm.h's ids), and each adds into its weight's
// gradient as it is when W runs, not when I deferred it: between the two, FSDP may let the
// gradient go and make it again (parallel/fsdp.h, gradient reduction per microbatch), so that a
// schedule holding many microbatches between I and W does not hold their gradients too.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/linear.h"
#include "model/model_comm.h"

namespace titan::model {

class WeightGradQueue {
 public:
  // weight->grad += the grad-weight GEMM of a and b, when run() comes. `gemms` runs it then.
  void defer(std::shared_ptr<LinearGemms> gemms, std::string fqn, Parameter* weight, GemmOperand a,
             GemmOperand b);
  // The same with operands made when W runs (LinearGemms::grad_weight_of): prepared then.
  void defer_made(std::shared_ptr<LinearGemms> gemms, std::string fqn, Parameter* weight,
                  LinearGemms::MakeOperand make_a, LinearGemms::MakeOperand make_b);
  // Closes the GEMMs deferred since the last call as parameter group `group`'s, and returns
  // their weights (none: nothing was deferred in it, and no group is recorded).
  std::vector<Parameter*> end_group(int group);
  // Runs every deferred GEMM, group by group in the order deferred, between the hooks'
  // before_weight_gradients and after_weight_gradients, and empties the queue.
  void run(ParamHooks& hooks);
  bool empty() const { return pending_.empty(); }
  size_t size() const { return pending_.size(); }

 private:
  struct Pending {
    std::shared_ptr<LinearGemms> gemms;
    std::string fqn;  // "layers.3.attention.wqkv": the profiler span's name
    Parameter* weight = nullptr;
    GemmOperand a, b;                         // prepared in I
    LinearGemms::MakeOperand make_a, make_b;  // or made (and prepared) in W
  };
  struct Group {
    int id = 0;
    size_t end = 0;  // pending_[previous end, end)
  };
  std::vector<Pending> pending_;
  std::vector<Group> groups_;
};

}  // namespace titan::model
