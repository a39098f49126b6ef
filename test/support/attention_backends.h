// Runs a GPU attention check once per backend this build has
// (model/ops/attention/attention_backend.h): the native kernels always, cuDNN's fused attention
// where it is compiled in. A build with cuDNN on a machine where it cannot run fails the check with
// cuDNN's reason (the one line of choose_attention_backend), rather than testing native twice. Each
// run prints the backend, and cuDNN's the plans (engines) its graphs got, so one GPU run tells what
// ran.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "model/ops/attention/attention_backend.h"
#if TITAN_CUDNN
#include "model/ops/attention/attention_cudnn.h"
#endif

namespace titan::testing {

// f(backend) for each backend in turn; the check puts it in the shapes it runs.
template <class F>
void for_each_attention_backend(F&& f) {
  using model::AttentionBackend;
  std::printf("-- attention backend native\n");
  f(AttentionBackend::Native);
  if (!model::cudnn_attention_compiled()) {
    std::printf("-- attention backend cudnn: not compiled in (no cuDNN 9 headers at build)\n");
    return;
  }
  const model::AttentionBackendChoice choice =
      model::choose_attention_backend(AttentionBackend::Cudnn, {1, 2, 1, 1, 64});
  if (!choice.error.empty()) {
    FAIL_CHECK("the cuDNN attention backend cannot run here: " << choice.error);
    return;
  }
  std::printf("-- %s\n", choice.line.c_str());
  f(AttentionBackend::Cudnn);
#if TITAN_CUDNN
  std::printf("-- cuDNN plans built:\n%s", model::cudnn_attention_plans().c_str());
#endif
}

}  // namespace titan::testing
