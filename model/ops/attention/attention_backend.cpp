#include "model/ops/attention/attention_backend.h"

#include <cstdint>

#include "core/check.h"
#include "core/unverified_gpu_paths.h"

#if TITAN_CUDNN
#include "core/cuda/cudnn_library.h"
#endif
#if TITAN_CUDA
#include "model/ops/attention/attention_hopper.h"
#endif

namespace titan::model {

namespace {

// Auto's question about the machine, asked once at the first CUDA attention run under Auto:
// whether libcudnn loads (the shape is asked each call).
bool cudnn_loads_for_auto() {
  static const bool loads =
      choose_attention_backend(AttentionBackend::Auto, {1, 2, 1, 1, 64}).backend ==
      AttentionBackend::Cudnn;
  return loads;
}

std::string cudnn_head_refusal(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  if (head_dim % 8 != 0 || head_dim < 8 || head_dim > 128) {
    return detail::concat("head dims that are multiples of 8 up to 128 (Dh ", head_dim, ")");
  }
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0) {
    return detail::concat("query heads in whole groups per kv head (H ", n_heads, ", Hkv ",
                          n_kv_heads, ")");
  }
  return {};
}

// A document mask on the native kernels, or the caller's bug when cudnn was forced.
bool cudnn_refuses_mask(AttentionBackend backend, bool block_causal, const char* what) {
  if (!block_causal) return false;
  TT_CHECK(backend != AttentionBackend::Cudnn, what,
           " on cuDNN under block_causal: ", kCudnnBlockCausalRefusal,
           "; the executable should have refused model.attention_backend cudnn");
  return true;
}

// hopper insists: it runs where the build has its sm_90a code, the device is a Hopper and the
// shape is one it takes, else it is refused with the reason.
AttentionBackendChoice choose_hopper(const AttentionShape& shape, const std::string& asked) {
  AttentionBackendChoice c;
  if (!cuda_attention_compiled()) {
    c.error = "this build has no CUDA kernels";
  } else if (std::string refusal = hopper_attention_refusal(shape); !refusal.empty()) {
    c.error = detail::concat("the Hopper kernel takes ", refusal);
  } else {
#if TITAN_CUDA
    if (std::string device = hopper_attention_device_refusal(); !device.empty()) {
      c.error = detail::concat("the Hopper kernel needs ", device);
      return c;
    }
    c.backend = AttentionBackend::Hopper;
    c.line = detail::concat(
        "attention: Hopper forward (wgmma, TMA; FlashAttention-3's design) and the native "
        "FlashAttention-2 backward (",
        asked, ")");
#endif
  }
  return c;
}

}  // namespace

std::string hopper_attention_refusal(const AttentionShape& a) {
  if (a.head_dim != 64 && a.head_dim != 128) {
    return detail::concat("head dims 64 and 128 (Dh ", a.head_dim, ")");
  }
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0) {
    return detail::concat("query heads in whole groups per kv head (H ", a.n_heads, ", Hkv ",
                          a.n_kv_heads, ")");
  }
  // Query tiles of 128 rows run along gridDim.y; B·H along gridDim.x.
  if (a.seq_len > int64_t{65535} * 128 || a.batch * a.n_heads > INT32_MAX) {
    return detail::concat("S up to ", int64_t{65535} * 128, " and B·H up to ", INT32_MAX, " (S ",
                          a.seq_len, ", B·H ", a.batch * a.n_heads, ")");
  }
  return {};
}

// cuDNN's backward refuses a single query over a single key (9.x's support checks: S_q = S_kv
// = 1 has no engine), which a sequence of one token, or a one-token chunk of context
// parallelism, would hand it.
std::string cudnn_single_token_refusal(int64_t q_len, int64_t kv_len) {
  if (q_len != 1 || kv_len != 1) return {};
  return "more than one query or key (S_q 1, S_kv 1: its backward has no engine for one token)";
}

std::string cudnn_attention_refusal(const AttentionShape& a) {
  if (std::string heads = cudnn_head_refusal(a.n_heads, a.n_kv_heads, a.head_dim); !heads.empty()) {
    return heads;
  }
  return cudnn_single_token_refusal(a.seq_len, a.seq_len);
}

std::string cudnn_block_refusal(const AttentionBlockShape& a) {
  if (std::string heads = cudnn_head_refusal(a.n_heads, a.n_kv_heads, a.head_dim); !heads.empty()) {
    return heads;
  }
  if (std::string one = cudnn_single_token_refusal(a.q_len, a.kv_len); !one.empty()) return one;
  switch (kv_block_place(a)) {
    case KvBlockPlace::Past: return {};
    case KvBlockPlace::Future: return "blocks with a key some query sees";
    case KvBlockPlace::Masked: break;
  }
  if (a.q_pos == a.kv_pos) return {};
  if (a.q_pos + a.q_len == a.kv_pos + a.kv_len && a.q_len < a.kv_len) return {};
  return detail::concat("causal blocks aligned to their first or last key (S_q ", a.q_len, " at ",
                        a.q_pos, ", S_kv ", a.kv_len, " at ", a.kv_pos, ")");
}

AttentionBackendChoice choose_attention_backend(AttentionBackend requested,
                                                const AttentionShape& shape) {
  AttentionBackendChoice c;
  const std::string asked =
      detail::concat("model.attention_backend ", kAttentionBackends.name(requested));
  if (requested == AttentionBackend::Native) {
    c.line = detail::concat("attention: native FlashAttention-2 kernels (", asked, ")");
    return c;
  }
  if (requested == AttentionBackend::Hopper) return choose_hopper(shape, asked);
  std::string why_not;
  if (!cudnn_attention_compiled()) {
    why_not = "this build has no cuDNN backend (CMake found no cudnn_graph.h)";
  } else if (std::string refusal = cudnn_attention_refusal(shape); !refusal.empty()) {
    why_not = detail::concat("cuDNN's fused attention takes ", refusal);
  } else if (requested == AttentionBackend::Auto &&
             !unverified_gpu_path_allowed(UnverifiedGpuPath::CudnnUnderAuto)) {
    // auto takes only what a GPU has run (core/unverified_gpu_paths.h), and so does not even
    // load libcudnn; cudnn asks for it anyway.
    why_not = "auto does not take cuDNN's attention until a GPU has run it (docs/status.md); "
              "cudnn asks for it";
  } else {
#if TITAN_CUDNN
    const cuda::CudnnLibrary& lib = cuda::cudnn_library();
    if (lib.usable) {
      c.backend = AttentionBackend::Cudnn;
      c.line = detail::concat("attention: cuDNN ", cuda::cudnn_version_text(lib.version),
                              " fused flash attention from ", lib.path, " (", asked, ")");
      return c;
    }
    why_not = lib.why_not;
#endif
  }
  if (requested == AttentionBackend::Cudnn) {
    c.error = why_not;
    return c;
  }
  c.line =
      detail::concat("attention: native FlashAttention-2 kernels (", asked, ": ", why_not, ")");
  return c;
}

AttentionBackend attention_backend_to_run(AttentionBackend requested, const AttentionBackendChoice& choice) {
  const bool stays_auto =
      requested == AttentionBackend::Auto && choice.backend == AttentionBackend::Cudnn;
  return stays_auto ? AttentionBackend::Auto : choice.backend;
}

bool attention_uses_cudnn(const AttentionShape& shape, bool block_causal) {
  const AttentionBackend backend = shape.backend;
  if (cudnn_refuses_mask(backend, block_causal, "attention")) return false;
  if (backend == AttentionBackend::Auto) {
    return cudnn_attention_refusal(shape).empty() && cudnn_loads_for_auto();
  }
  if (backend != AttentionBackend::Cudnn) return false;
  TT_CHECK(cudnn_attention_compiled(), "attention: the cuDNN backend was chosen but this build ",
           "has none");
  const std::string refusal = cudnn_attention_refusal(shape);
  TT_CHECK(refusal.empty(), "attention on cuDNN: B ", shape.batch, ", S ", shape.seq_len, ", H ",
           shape.n_heads, ", Hkv ", shape.n_kv_heads, ", Dh ", shape.head_dim,
           " is a shape it cannot run; cuDNN's fused attention takes ", refusal);
  return true;
}

bool attention_uses_hopper(const AttentionShape& shape, bool block_causal) {
  if (shape.backend != AttentionBackend::Hopper) return false;
  TT_CHECK(!block_causal,
           "attention on the Hopper kernel under block_causal: ", kHopperBlockCausalRefusal,
           "; the executable should have refused model.attention_backend hopper");
  const std::string refusal = hopper_attention_refusal(shape);
  TT_CHECK(refusal.empty(), "attention on the Hopper kernel: B ", shape.batch, ", S ",
           shape.seq_len, ", H ", shape.n_heads, ", Hkv ", shape.n_kv_heads, ", Dh ",
           shape.head_dim, " is a shape it cannot run; the Hopper kernel takes ", refusal);
  return true;
}

bool attention_block_uses_cudnn(const AttentionBlockShape& a, bool block_causal) {
  // A block no query sees computes nothing: the native op writes the merge's identity.
  if (kv_block_place(a) == KvBlockPlace::Future) return false;
  const AttentionBackend backend = a.backend;
  if (cudnn_refuses_mask(backend, block_causal, "attention block")) return false;
  const std::string refusal = cudnn_block_refusal(a);
  if (backend == AttentionBackend::Auto) return refusal.empty() && cudnn_loads_for_auto();
  // hopper has no block kernel yet: context parallelism's blocks run natively.
  if (backend != AttentionBackend::Cudnn) return false;
  TT_CHECK(cudnn_attention_compiled(), "attention block: the cuDNN backend was chosen but this ",
           "build has none");
  TT_CHECK(refusal.empty(), "attention block on cuDNN: B ", a.batch, ", H ", a.n_heads, ", Hkv ",
           a.n_kv_heads, ", Dh ", a.head_dim, ", S_q ", a.q_len, " at ", a.q_pos, ", S_kv ",
           a.kv_len, " at ", a.kv_pos, " is a block it cannot run; cuDNN's fused attention takes ",
           refusal);
  return true;
}

}  // namespace titan::model
