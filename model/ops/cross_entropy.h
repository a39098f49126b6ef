// Cross-entropy of logits against targets, with the gradient computed in the same pass, split
// into three phases so that the vocabulary can be sharded (loss parallel):
//
//   1. row_max       local max of each row           -> caller all-reduces (max) over vocab shards
//   2. row_sums      Σ exp(logit − max) and the      -> caller all-reduces (sum) over vocab shards
//                    target's logit (0 if the target
//                    is another shard's)
//   3. loss_and_grad loss[t] = log Σ + max − target logit, and
//                    dlogits = (softmax − onehot) · grad_scale
//
// On one rank the all-reduces are identities and the three phases are the usual fused
// softmax-cross-entropy; under tensor parallelism the logits [T, V/tp] are never gathered.
// Each rank holds vocab ids [vocab_start, vocab_start + V_local); targets are global ids.
// grad_scale is 1 / (tokens in the global batch), so the gradient is that of the mean loss.
//
// Dtypes: on the CPU every floating tensor has the logits' dtype (f32 or f64). On CUDA the
// logits and dlogits are f32 or bf16 and the per-row tensors (row_max, sum_exp, target_logit,
// losses) are f32.
#pragma once

#include "core/tensor.h"

namespace titan::model {

// logits [T, V_local] -> row_max [T]
void cross_entropy_row_max(const Tensor& row_max, const Tensor& logits);

// -> sum_exp [T], target_logit [T]; targets [T] i32
void cross_entropy_row_sums(const Tensor& sum_exp, const Tensor& target_logit, const Tensor& logits,
                            const Tensor& targets, const Tensor& row_max, int64_t vocab_start);

// -> losses [T], dlogits [T, V_local] (may be `logits` itself: computed in place)
void cross_entropy_loss_and_grad(const Tensor& losses, const Tensor& dlogits, const Tensor& logits,
                                 const Tensor& targets, const Tensor& row_max,
                                 const Tensor& sum_exp, const Tensor& target_logit,
                                 int64_t vocab_start, double grad_scale);

// A negative target is one no loss reaches (a prompt's token in a fine-tune on conversations,
// data/token_file.h's kUntrainedTarget): the model replaces it by id 0 for the three phases,
// then zeroes what they made of its row with the op below.

// losses [T] and dlogits [T, V_local] zeroed in the rows where trained [T] (u8) is 0: those
// tokens add nothing to the loss nor to any gradient.
void cross_entropy_zero_untrained(const Tensor& losses, const Tensor& dlogits,
                                  const Tensor& trained);

// The CUDA twins (cross_entropy.cu); the three phases above call them for CUDA tensors.
void cross_entropy_row_max_cuda(const Tensor& row_max, const Tensor& logits);
void cross_entropy_row_sums_cuda(const Tensor& sum_exp, const Tensor& target_logit,
                                 const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                                 int64_t vocab_start);
void cross_entropy_loss_and_grad_cuda(const Tensor& losses, const Tensor& dlogits,
                                      const Tensor& logits, const Tensor& targets,
                                      const Tensor& row_max, const Tensor& sum_exp,
                                      const Tensor& target_logit, int64_t vocab_start,
                                      double grad_scale);
void cross_entropy_zero_untrained_cuda(const Tensor& losses, const Tensor& dlogits,
                                       const Tensor& trained);

}  // namespace titan::model
