// Tied embeddings across a pipeline: the first stage's tok_embeddings.weight and the last
// stage's copy of it (model::Parameter::tied_to) stay one weight.
//
// A part that holds both ends computes its output with the embedding itself (model/transformer.h),
// and has nothing to do here. Under pipeline parallelism the first and last stages are different
// parts, on different pp ranks (1F1B, interleaved) or on the same one (ZBV's V): each holds its
// copy, both start equal (the copy is initialised, and loaded, under the embedding's name), and
// after every step's gradients are complete each copy's gradient is replaced by their sum, added in
// one order (embedding + copy) on both sides, so the two optimizer steps see the same bits and
// the copies never drift — Megatron-LM's embedding group, as a pair of point-to-point messages.
// The gradient norm counts the sum once (the copy is left out of it).
#pragma once

#include <string>
#include <vector>

#include "model/parameter.h"
#include "parallel/device_mesh.h"

namespace titan::parallel {

class TiedWeights {
 public:
  // params: what this rank's optimizer steps; tied: model::ModelArgs::tie_word_embeddings.
  // embedding_pp and head_pp: the pp coordinates of the ranks holding the first and the last
  // stage.
  TiedWeights(const std::vector<model::Parameter*>& params, const DeviceMesh& mesh, bool tied,
              int64_t embedding_pp, int64_t head_pp);

  // After finish_gradients: both copies' gradients replaced by their sum. Every rank of the pp
  // group that holds one of them takes part; the others return at once.
  void sum_gradients();

  bool empty() const { return embedding_ == nullptr && copy_ == nullptr; }

  // Whether this rank's piece of the two copies holds the same bits: the CRC32C of each, the
  // peer's received. Collective over the pp group like sum_gradients; "" where this rank holds
  // no copy, else one line for the log saying which and both checksums.
  std::string compare_copies();

 private:
  model::Parameter* embedding_ = nullptr;  // tok_embeddings.weight, where this rank holds it
  model::Parameter* copy_ = nullptr;       // its copy, where this rank holds the last stage
  DeviceMesh mesh_;
  int64_t embedding_pp_ = 0, head_pp_ = 0;
};

// Whether `p` counts in the gradient norm: a tied copy's gradient is its original's.
inline bool counts_in_grad_norm(const model::Parameter& p) { return p.tied_to.empty(); }

}  // namespace titan::parallel
