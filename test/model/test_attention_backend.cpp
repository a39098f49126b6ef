// Which backend runs attention on a GPU (model/ops/attention/attention_backend.h): what cuDNN's
// fused attention takes is a pure function of the shape, and nothing about the choice loads
// libcudnn in a process that computes on the CPU. Where the cuDNN backend is compiled in, its SDPA
// graphs are built here without a device — every tensor and operation descriptor finalized by cuDNN
// on the host — which checks their attributes before a GPU ever sees them.
#include <doctest/doctest.h>

#include <string>

#include "core/unverified_gpu_paths.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_backend.h"
#include "model/ops/attention/attention_block.h"
#include "support/mapped_library.h"
#include "support/tensor_testing.h"
#if TITAN_CUDNN
#include "model/ops/attention/attention_cudnn.h"
#endif

using namespace titan;
using namespace titan::model;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("attention backend: what cuDNN's fused attention takes") {
    // {B, S, H, Hkv, Dh}
    CHECK(cudnn_attention_refusal({1, 8192, 32, 8, 128}).empty());
    CHECK(cudnn_attention_refusal({2, 200, 4, 4, 64}).empty());
    CHECK(cudnn_attention_refusal({4, 256, 16, 16, 16}).empty());  // the debug model's
    CHECK(cudnn_attention_refusal({2, 2, 16, 16, 16}).empty());
    CHECK(contains(cudnn_attention_refusal({2, 1, 16, 16, 16}), "(S_q 1, S_kv 1"));
    CHECK(cudnn_attention_refusal({1, 64, 2, 1, 20}) ==
          "head dims that are multiples of 8 up to 128 (Dh 20)");
    CHECK(cudnn_attention_refusal({1, 64, 2, 1, 256}) ==
          "head dims that are multiples of 8 up to 128 (Dh 256)");
    CHECK(cudnn_attention_refusal({1, 64, 6, 4, 64}) ==
          "query heads in whole groups per kv head (H 6, Hkv 4)");

    // {B, H, Hkv, Dh, S_q, S_kv, q_pos, kv_pos}: the blocks of the ring and the all-gather.
    CHECK(cudnn_block_refusal({1, 4, 2, 64, 32, 32, 96, 96}).empty());  // diagonal: causal
    CHECK(cudnn_block_refusal({1, 4, 2, 64, 32, 32, 96, 32}).empty());  // past: unmasked
    CHECK(cudnn_block_refusal({1, 4, 2, 64, 32, 128, 96, 0}).empty());  // all-gather's
    CHECK(cudnn_block_refusal({1, 4, 2, 64, 32, 32, 32, 96}) ==
          "blocks with a key some query sees");
    CHECK(cudnn_block_refusal({1, 4, 2, 64, 200, 300, 150, 0}) ==
          "causal blocks aligned to their first or last key (S_q 200 at 150, S_kv 300 at 0)");
    CHECK(contains(cudnn_block_refusal({1, 4, 2, 20, 32, 32, 96, 96}), "(Dh 20)"));
    // A one-token chunk's diagonal block (S = 4 tokens over cp 2): cuDNN's backward has no
    // engine for it; a one-token query over two keys is fine.
    CHECK(cudnn_block_refusal({1, 4, 2, 64, 1, 1, 3, 3}) ==
          "more than one query or key (S_q 1, S_kv 1: its backward has no engine for one token)");
    CHECK(cudnn_block_refusal({1, 4, 2, 64, 1, 1, 3, 0}) ==
          cudnn_block_refusal({1, 4, 2, 64, 1, 1, 3, 3}));
    CHECK(cudnn_block_refusal({1, 4, 2, 64, 1, 2, 3, 2}).empty());
  }

  TEST_CASE("attention backend: no CPU attention loads libcudnn whatever is chosen") {
    REQUIRE_FALSE(testing::library_mapped("libcudnn"));
    const AttentionShape shape{2, 12, 4, 2, 16};
    const int64_t T = shape.batch * shape.seq_len;
    const int64_t row = (shape.n_heads + 2 * shape.n_kv_heads) * shape.head_dim;
    const Tensor qkv = testing::random_tensor({T, row}, DType::F32, 1);
    const Tensor dout =
        testing::random_tensor({T, shape.n_heads * shape.head_dim}, DType::F32, 2);
    for (AttentionBackend backend : {AttentionBackend::Auto, AttentionBackend::Cudnn,
                                     AttentionBackend::Native, AttentionBackend::Hopper}) {
      CAPTURE(kAttentionBackends.name(backend));
      AttentionShape a = shape;
      a.backend = backend;
      Tensor out = Tensor::empty({T, a.n_heads * a.head_dim}, DType::F32);
      Tensor lse = Tensor::empty({a.batch, a.n_heads, a.seq_len}, DType::F32);
      Tensor dqkv = Tensor::empty({T, row}, DType::F32);
      attention_forward(out, lse, qkv, a);
      attention_backward(dqkv, dout, qkv, out, lse, a);
      const AttentionBlockShape b{a.batch, a.n_heads, a.n_kv_heads, a.head_dim, 6, 6, 6, 6,
                                  backend};
      const Tensor q3 = qkv.view({a.batch, a.seq_len, row}).narrow(1, 6, 6);
      const Tensor q = q3.narrow(2, 0, a.n_heads * a.head_dim);
      const Tensor k = q3.narrow(2, a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim);
      const Tensor v =
          q3.narrow(2, (a.n_heads + a.n_kv_heads) * a.head_dim, a.n_kv_heads * a.head_dim);
      Tensor out_b = Tensor::empty({a.batch, 6, a.n_heads * a.head_dim}, DType::F32);
      Tensor lse_b = Tensor::empty({a.batch, a.n_heads, 6}, DType::F32);
      attention_block_forward(out_b, lse_b, q, k, v, b);
      CHECK_FALSE(testing::library_mapped("libcudnn"));
    }
    // Choosing native says so and loads nothing either.
    const AttentionBackendChoice native =
        choose_attention_backend(AttentionBackend::Native, shape);
    CHECK(native.backend == AttentionBackend::Native);
    CHECK(native.line ==
          "attention: native FlashAttention-2 kernels (model.attention_backend "
          "native)");
    CHECK_FALSE(testing::library_mapped("libcudnn"));
  }

  TEST_CASE("attention backend: cudnn insists and auto falls back without loading anything") {
    const AttentionShape odd{1, 64, 2, 1, 20};
    const AttentionBackendChoice forced = choose_attention_backend(AttentionBackend::Cudnn, odd);
    const AttentionBackendChoice automatic = choose_attention_backend(AttentionBackend::Auto, odd);
    if (cudnn_attention_compiled()) {
      CHECK(forced.error ==
            "cuDNN's fused attention takes head dims that are multiples of 8 up to 128 (Dh 20)");
      CHECK(automatic.line ==
            "attention: native FlashAttention-2 kernels (model.attention_backend auto: cuDNN's "
            "fused attention takes head dims that are multiples of 8 up to 128 (Dh 20))");
    } else {
      CHECK(forced.error == "this build has no cuDNN backend (CMake found no cudnn_graph.h)");
      CHECK(contains(automatic.line, "auto: this build has no cuDNN backend"));
    }
    CHECK(automatic.backend == AttentionBackend::Native);
    CHECK(automatic.error.empty());
    CHECK_FALSE(testing::library_mapped("libcudnn"));

    if (!cudnn_attention_compiled()) return;
    // Forced cuDNN on a block it cannot run is a caller's bug, named; on one it can, taken.
    const AttentionBackend cudnn = AttentionBackend::Cudnn;
    CHECK(attention_block_uses_cudnn({1, 4, 2, 64, 32, 32, 96, 96, cudnn}));
    CHECK_FALSE(attention_block_uses_cudnn({1, 4, 2, 64, 32, 32, 32, 96, cudnn}));  // future
    CHECK_THROWS_WITH(attention_block_uses_cudnn({1, 4, 2, 64, 200, 300, 150, 0, cudnn}),
                      doctest::Contains("S_q 200 at 150, S_kv 300 at 0 is a block it cannot run"));
    AttentionShape odd_on_cudnn = odd;
    odd_on_cudnn.backend = cudnn;
    CHECK_THROWS_WITH(attention_uses_cudnn(odd_on_cudnn),
                      doctest::Contains("Dh 20 is a shape it cannot"));
    CHECK_FALSE(attention_uses_cudnn({1, 8, 2, 1, 64}));  // native
    CHECK_FALSE(testing::library_mapped("libcudnn"));
  }

  TEST_CASE("attention backend: auto takes cuDNN only once it is allowed and never loads it before") {
    const AttentionShape fits{1, 64, 2, 1, 64};
    allow_unverified_gpu_paths({});
    const AttentionBackendChoice automatic = choose_attention_backend(AttentionBackend::Auto, fits);
    allow_every_unverified_gpu_path();  // as the tests' main left it
    CHECK(automatic.backend == AttentionBackend::Native);
    CHECK(automatic.error.empty());
    if (cudnn_attention_compiled()) {
      CHECK(automatic.line ==
            "attention: native FlashAttention-2 kernels (model.attention_backend auto: auto "
            "does not take cuDNN's attention until a GPU has run it (docs/status.md); cudnn "
            "asks for it)");
    } else {
      CHECK(contains(automatic.line, "auto: this build has no cuDNN backend"));
    }
    CHECK_FALSE(testing::library_mapped("libcudnn"));
  }

  TEST_CASE("attention backend: what the Hopper forward takes and that hopper insists") {
    // {B, S, H, Hkv, Dh}
    CHECK(hopper_attention_refusal({1, 8192, 32, 8, 128}).empty());
    CHECK(hopper_attention_refusal({2, 77, 4, 4, 64}).empty());
    CHECK(hopper_attention_refusal({1, 64, 2, 1, 32}) == "head dims 64 and 128 (Dh 32)");
    CHECK(hopper_attention_refusal({1, 64, 6, 4, 64}) ==
          "query heads in whole groups per kv head (H 6, Hkv 4)");
    CHECK(contains(hopper_attention_refusal({1, int64_t{65535} * 128 + 1, 2, 1, 64}),
                   "S up to 8388480"));

    // Refused with its reason: the build, then a shape it does not take, then the machine.
    const AttentionBackendChoice odd =
        choose_attention_backend(AttentionBackend::Hopper, {1, 64, 2, 1, 32});
    const AttentionBackendChoice fits =
        choose_attention_backend(AttentionBackend::Hopper, {1, 64, 2, 1, 64});
    if (!cuda_attention_compiled()) {
      CHECK(odd.error == "this build has no CUDA kernels");
      CHECK(fits.error == "this build has no CUDA kernels");
    } else {
      CHECK(odd.error == "the Hopper kernel takes head dims 64 and 128 (Dh 32)");
      if (fits.error.empty()) {
        CHECK(fits.backend == AttentionBackend::Hopper);
        CHECK(contains(fits.line, "attention: Hopper forward"));
      } else {
        MESSAGE("hopper refused here: " << fits.error);
        CHECK(contains(fits.error, "the Hopper kernel needs "));
      }
    }
    CHECK(odd.backend == AttentionBackend::Native);
    if (!fits.error.empty()) CHECK(fits.backend == AttentionBackend::Native);

    // Under hopper the forward asks for it, the backward and the blocks never get cuDNN, and a
    // shape or mask it cannot run is a caller's bug, named.
    const AttentionBackend hopper = AttentionBackend::Hopper;
    CHECK(attention_uses_hopper({1, 64, 2, 1, 64, hopper}));
    CHECK_FALSE(attention_uses_cudnn({1, 64, 2, 1, 64, hopper}));
    CHECK_FALSE(attention_block_uses_cudnn({1, 4, 2, 64, 32, 32, 96, 96, hopper}));
    CHECK_THROWS_WITH(attention_uses_hopper({1, 64, 2, 1, 32, hopper}),
                      doctest::Contains("Dh 32 is a shape it cannot run"));
    CHECK_THROWS_WITH(attention_uses_hopper({1, 64, 2, 1, 64, hopper}, true),
                      doctest::Contains("block_causal"));
    CHECK_FALSE(attention_uses_hopper({1, 64, 2, 1, 64}));  // native
    CHECK_FALSE(testing::library_mapped("libcudnn"));
  }

#if TITAN_CUDNN
  TEST_CASE(
      "attention backend: cuDNN SDPA graphs finalize on the host as cudnn-frontend builds them") {
    // {B, H, Hkv, Dh, S_q, S_kv, q_pos, kv_pos}: causal GQA, unmasked MHA, causal to the last key.
    const std::string causal = cudnn_attention_graph_text({2, 8, 2, 128, 130, 130, 0, 0}, false);
    MESSAGE(causal);
    CHECK(contains(causal, "graph sdpa forward causal B 2, H 8, Hkv 2, Dh 128, S_q 130, S_kv 130"));
    CHECK(contains(causal, "k (as kᵀ): bf16 [2, 2, 128, 130] strides [66560, 128, 1, 512]"));
    CHECK(contains(causal, "stats (lse): f32 [2, 8, 130, 1] strides [1040, 130, 1, 1]"));
    CHECK(contains(causal, "binary_select: binary_select in f32 of"));
    CHECK(contains(causal, "row>=col: cmp_ge in bool of"));
    CHECK_FALSE(contains(causal, "row+skv"));
    CHECK(contains(causal, "bmm2: matmul in f32 of"));

    const std::string past = cudnn_attention_graph_text({1, 4, 4, 64, 64, 64, 128, 0}, false);
    CHECK_FALSE(contains(past, "binary_select"));
    CHECK_FALSE(contains(past, "gen_index"));

    const std::string tail = cudnn_attention_graph_text({1, 4, 2, 64, 32, 96, 64, 0}, true);
    MESSAGE(tail);
    CHECK(contains(tail, "graph sdpa backward causal from the last key B 1, H 4, Hkv 2, Dh 64"));
    CHECK(contains(tail, "row+skv-sq: sub in i32 of"));
    CHECK(contains(tail, "red_dK_head: reduce add in f32 of"));
    CHECK(contains(tail, "red_dV_head: reduce add in f32 of"));
    CHECK(contains(tail, "identity_dQ: identity in f32 of"));
    const std::string mha = cudnn_attention_graph_text({1, 4, 4, 64, 64, 64, 0, 0}, true);
    CHECK_FALSE(contains(mha, "red_dK_head"));
  }
#endif
}
