// model.attention_backend meets the model and the mesh: the attention each rank runs has the
// local heads (H/tp, Hkv/tp) and the local sequence (S/cp, in blocks of S/(2·cp)); whether cuDNN
// takes it is a pure function of that shape (model/ops/attention/attention_backend.h), checked
// before anything is allocated, and on a GPU the backend is chosen once and said once in the log.
#pragma once

#include <string>

#include "app/config.h"
#include "model/config.h"
#include "model/ops/attention/attention.h"

namespace titan::app {

// The attention one rank runs for a micro-batch of `config`'s training.
model::AttentionShape local_attention_shape(const JobConfig& config, const model::ModelArgs& args,
                                            int64_t tp, int64_t cp);

// model.attention_backend: cudnn or hopper on a shape that backend cannot take (hopper also
// under context parallelism, whose blocks it has no kernel for): InputError naming the key, the
// shape and what the backend takes.
void check_attention_backend(const JobConfig& config, const model::ModelArgs& args, int64_t tp,
                             int64_t cp);

// The backend the model's attention runs on, for Transformer::run_attention_on, and the line
// that says so in the log.
struct AttentionRun {
  model::AttentionBackend backend = model::AttentionBackend::Native;
  std::string line;  // empty on the CPU
};

// On a GPU: resolves model.attention_backend (loading libcudnn for auto and cudnn); InputError
// when cudnn or hopper was asked for and cannot run here (no library, too old; no sm_90a code,
// not a Hopper GPU). On the CPU: native, and an empty line.
AttentionRun pick_attention_backend(const JobConfig& config, const model::ModelArgs& args,
                                    int64_t tp, int64_t cp, Device device);

}  // namespace titan::app
