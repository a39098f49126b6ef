#include "model/ops/embedding.h"

#include <algorithm>

#include "core/dispatch.h"

namespace titan::model {

namespace {

template <class T>
void embedding_forward_cpu(T* out, const T* weight, const int32_t* tokens, int64_t n_tokens,
                           int64_t dim, int64_t vocab_start, int64_t vocab_local) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    int64_t row = static_cast<int64_t>(tokens[t]) - vocab_start;
    T* dst = out + t * dim;
    if (row >= 0 && row < vocab_local) {
      std::copy(weight + row * dim, weight + (row + 1) * dim, dst);
    } else {
      std::fill(dst, dst + dim, T(0));
    }
  }
}

// Serial over tokens: two tokens may share a row, and a fixed order keeps the sum deterministic.
template <class T>
void embedding_backward_cpu(T* dweight, const T* dout, const int32_t* tokens, int64_t n_tokens,
                            int64_t dim, int64_t vocab_start, int64_t vocab_local) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    int64_t row = static_cast<int64_t>(tokens[t]) - vocab_start;
    if (row < 0 || row >= vocab_local) continue;
    T* dst = dweight + row * dim;
    const T* src = dout + t * dim;
    for (int64_t d = 0; d < dim; ++d) dst[d] += src[d];
  }
}

}  // namespace

void embedding_forward(const Tensor& out, const Tensor& weight, const Tensor& tokens,
                       int64_t vocab_start) {
  int64_t n_tokens = tokens.numel(), dim = weight.size(1);
  check_tensor(tokens, "embedding tokens", {n_tokens}, DType::I32);
  check_tensor(out, "embedding out", {n_tokens, dim}, weight.dtype());
  check_tensor(weight, "embedding weight", weight.shape(), weight.dtype());
  [[maybe_unused]] Device device = common_device("embedding_forward", {out, weight, tokens});
#if TITAN_CUDA
  if (device.is_cuda()) return embedding_forward_cuda(out, weight, tokens, vocab_start);
#endif
  require_cpu("embedding_forward", {out, weight, tokens});
  visit_floating(weight.dtype(), "embedding_forward", [&]<class T>() {
    embedding_forward_cpu<T>(out.data<T>(), weight.data<T>(), tokens.data<int32_t>(), n_tokens, dim,
                             vocab_start, weight.size(0));
  });
}

void embedding_backward(const Tensor& dweight, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_start) {
  int64_t n_tokens = tokens.numel(), dim = dweight.size(1);
  check_tensor(tokens, "embedding tokens", {n_tokens}, DType::I32);
  if (dweight.device().is_cuda()) {
    TT_CHECK(dweight.dtype() == DType::F32, "embedding_backward: dweight is ", dweight,
             "; on CUDA the embedding gradient must be f32 (fp32 atomic adds accumulate into it)");
    check_tensor(dout, "embedding dout", {n_tokens, dim}, dout.dtype());
  } else {
    check_tensor(dout, "embedding dout", {n_tokens, dim}, dweight.dtype());
  }
  check_tensor(dweight, "embedding dweight", dweight.shape(), dweight.dtype());
  [[maybe_unused]] Device device = common_device("embedding_backward", {dweight, dout, tokens});
#if TITAN_CUDA
  if (device.is_cuda()) return embedding_backward_cuda(dweight, dout, tokens, vocab_start);
#endif
  require_cpu("embedding_backward", {dweight, dout, tokens});
  visit_floating(dweight.dtype(), "embedding_backward", [&]<class T>() {
    embedding_backward_cpu<T>(dweight.data<T>(), dout.data<T>(), tokens.data<int32_t>(), n_tokens,
                              dim, vocab_start, dweight.size(0));
  });
}

}  // namespace titan::model
