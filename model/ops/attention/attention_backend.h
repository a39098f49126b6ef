// Which implementation runs attention on a GPU: the native FlashAttention-2 kernels
// (attention.cu, attention_block.cu), cuDNN's fused flash attention (attention_cudnn.cpp), or
// the Hopper forward (attention_hopper.cu, FlashAttention-3's design; the backward stays native).
// The CPU twins are the oracle of both and the only path on the CPU, whatever is chosen here.
//
// The choice is a value: an executable makes it once, from its config, before the first
// attention (titan_train from model.attention_backend), and hands it to the model, which puts it
// in every AttentionShape it runs; the default is native, so a tool or test that says nothing
// runs the kernels it always ran. auto resolves, on a GPU, to cuDNN where
// libcudnn loads and takes the model's shape, else native; cudnn insists and refuses what it
// cannot run. Nothing here loads libcudnn except choose_attention_backend(). hopper is opt-in
// (auto never picks it until a GPU has measured it) and insists as cudnn does.
#pragma once

#include <string>

#include "core/enum_names.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_block.h"

namespace titan::model {

// Whether this build has the cuDNN backend: CMake found cuDNN's headers (cudnn_graph.h, 9.x) in
// a CUDA build. Without it, cudnn is refused and auto is native. Inline, so that a reader of the
// config (app/config_validate.cpp, linked alone into the fuzz targets) asks without the ops;
// TITAN_CUDNN comes with titan_core to every file of a build, so every file gets one answer.
constexpr bool cudnn_attention_compiled() {
#if TITAN_CUDNN
  return true;
#else
  return false;
#endif
}

// Whether this build has CUDA kernels at all, for the config's checks (inline, as above). Whether
// they include the Hopper kernel's sm_90a code only the ops' CUDA objects know
// (hopper_attention_compiled, attention_hopper.h); choose_attention_backend asks them.
constexpr bool cuda_attention_compiled() {
#if TITAN_CUDA
  return true;
#else
  return false;
#endif
}

// What the Hopper forward takes, as a pure function of the shape: empty when it takes it
// (Dh 64 or 128, whole GQA groups, S up to 65535 tiles of 128), else one phrase saying what.
std::string hopper_attention_refusal(const AttentionShape& shape);

// What cuDNN's fused attention takes, as a pure function of the shape: empty when it takes
// attention of `shape` (causal over the whole sequence, and every block context parallelism
// cuts of it), else one phrase saying what it takes instead, for an error that names the key.
std::string cudnn_attention_refusal(const AttentionShape& shape);

// The same for one block of attention_block.h: its heads and head dim as above, and a mask
// cuDNN expresses: none (keys all before the queries), causal from the first key (q_pos ==
// kv_pos) or causal aligned to the last key (q_pos + S_q == kv_pos + S_kv, S_q < S_kv): the
// blocks of context parallelism's ring and all-gather.
std::string cudnn_block_refusal(const AttentionBlockShape& shape);

// What a shape's backend means when it runs: under Auto each CUDA attention asks whether cuDNN
// takes its shape (libcudnn is loaded at the first) and runs natively where it does not, or where
// cuDNN builds no plan for it (attention_cudnn.h); under Cudnn either is an error. Executables
// call choose_attention_backend() first, to log what runs and why.

struct AttentionBackendChoice {
  AttentionBackend backend = AttentionBackend::Native;  // cudnn, hopper or native, never auto
  std::string line;                                     // what runs and why, for the log: one line
  std::string error;  // set when cudnn or hopper was asked for and cannot run here: why, one line
};

// Resolves `requested` for attention of `shape` on the current GPU, loading libcudnn for auto
// and cudnn (and only then); hopper asks the build and the device. Sets nothing; the caller
// hands .backend to the model, or Auto where auto found cuDNN (so that the shapes cuDNN refuses
// fall back): attention_backend_to_run() says which.
AttentionBackendChoice choose_attention_backend(AttentionBackend requested,
                                                const AttentionShape& shape);

// The backend the model runs on after `choice` resolved `requested`: auto that found cuDNN stays
// auto, so that a shape or block cuDNN does not take, or has no plan for, runs natively (said
// once) instead of stopping the job as forced cudnn does; anything else runs as chosen.
AttentionBackend attention_backend_to_run(AttentionBackend requested, const AttentionBackendChoice& choice);

// Whether a CUDA attention of this shape runs on cuDNN under shape.backend. Throws
// an Error when cudnn was forced and the shape is one it cannot run (a caller's bug: the
// executable checked the model's shape before it ran).
//
// block_causal (a document mask) always runs on the native kernels: the graphs this backend
// builds mask causally or not at all. cuDNN's packed (THD) layout could express documents, but
// only as sequences of their own with ragged offsets, so a graph's batch would be each window's
// document count, up to S; docs/design.md#documents-in-a-window says what that would take.
// Under auto it goes native; forced to cudnn it is refused.
bool attention_uses_cudnn(const AttentionShape& shape, bool block_causal = false);
bool attention_block_uses_cudnn(const AttentionBlockShape& shape, bool block_causal = false);

// Whether a CUDA attention forward of this shape runs the Hopper kernel under shape.backend:
// hopper chosen and the mask causal. Throws an Error when hopper was chosen and the shape
// is one it cannot run (the executable checked the model's shape before it ran) or under
// block_causal (refused with the config). The backward under hopper is the native one.
bool attention_uses_hopper(const AttentionShape& shape, bool block_causal = false);

// The one line refusing hopper under block_causal, for the executables' config checks.
inline constexpr const char kHopperBlockCausalRefusal[] =
    "the Hopper kernel masks causally only; block_causal runs on the native kernels";

// The one line refusing cudnn under block_causal, for the executables' config checks.
inline constexpr const char kCudnnBlockCausalRefusal[] =
    "cuDNN's fused attention here masks causally only; block_causal runs on the native kernels";

}  // namespace titan::model
