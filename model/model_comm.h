// The hooks through which model code meets parallelism, and nothing more
// (docs/architecture.md#decision-2).
//
// Two kinds of thing happen outside the model's arithmetic:
//   TensorParallelComm  the few collectives model code calls itself, all over the tp group:
//                       loss-parallel reductions, and moving the embedding output and its
//                       gradient between the full sequence and this rank's sequence shard.
//   ParamHooks          called around each parameter group's forward and backward, so that
//                       FSDP can gather a block's shards before use, prefetch the next block,
//                       free gathered copies and reduce-scatter gradients.
// On one rank both are identities. parallel/ implements them; model/ never includes parallel/.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/parameter.h"

namespace titan::model {

enum class ReduceOp { Sum, Max };

class TensorParallelComm {
 public:
  virtual ~TensorParallelComm() = default;
  virtual int64_t size() const { return 1; }
  virtual int64_t rank() const { return 0; }
  // In place over the tp group.
  virtual void all_reduce(const Tensor& t, ReduceOp op) {}
  // partial [T, D] summed over the group -> this rank's rows [T/tp, D] of the sum.
  virtual Tensor reduce_scatter_rows(const Tensor& partial) { return partial; }
  // shard [T/tp, D] -> [T, D], the ranks' rows in rank order.
  virtual Tensor all_gather_rows(const Tensor& shard) { return shard; }
};

// Parameter groups, in forward order: 0 is tok_embeddings, 1..L the blocks, L+1 the head
// (final norm and output).
//
// A split backward (the zero-bubble pipeline schedules, weight_grad_queue.h) runs a group's
// input half between before_backward_input and after_backward_input, naming the weights whose
// gradients wait for W; W then
// runs the group's grad-weight GEMMs between before_weight_gradients and after_weight_gradients,
// after which the group's gradients are complete, as after after_backward. Between the two
// halves the deferred weights' gradients may be let go: before_weight_gradients gives every
// parameter of the group a gradient again before the GEMMs add into it.
class ParamHooks {
 public:
  virtual ~ParamHooks() = default;
  virtual void before_forward(int group) {}
  virtual void after_forward(int group) {}
  virtual void before_backward(int group) {}
  virtual void after_backward(int group) {}
  // A split backward starts a group's input half: the weights named will have their gradients
  // only in W, so nothing needs to be made for them now.
  virtual void before_backward_input(int group, const std::vector<Parameter*>& deferred) {
    before_backward(group);
  }
  virtual void after_backward_input(int group, const std::vector<Parameter*>& deferred) {}
  virtual void before_weight_gradients(int group) {}
  virtual void after_weight_gradients(int group) {}
  // Whether after_weight_gradients may join a collective (FSDP's reduce-scatter per
  // microbatch): then every rank of the group must run W where its list has it, not earlier.
  virtual bool weight_gradients_collective() const { return false; }
};

}  // namespace titan::model
