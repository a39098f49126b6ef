#include "model/ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dispatch.h"
#include "core/thread_pool.h"

namespace titan::model {

namespace {

// Per-row tensors: the logits' dtype on the CPU, f32 on CUDA.
void check_row_stat(const Tensor& t, const char* what, const Tensor& logits) {
  check_tensor(t, what, {logits.size(0)}, logits.device().is_cuda() ? DType::F32 : logits.dtype());
}

void check_logits(const Tensor& logits) {
  TT_CHECK(logits.ndim() == 2, "cross_entropy: logits must be [T, V], got ", logits);
  check_tensor(logits, "cross_entropy logits", logits.shape(), logits.dtype());
}

bool owns(int64_t target, int64_t vocab_start, int64_t vocab_local) {
  return target >= vocab_start && target < vocab_start + vocab_local;
}

}  // namespace

void cross_entropy_row_max(const Tensor& row_max, const Tensor& logits) {
  check_logits(logits);
  check_row_stat(row_max, "cross_entropy row_max", logits);
  [[maybe_unused]] Device device = common_device("cross_entropy_row_max", {row_max, logits});
#if TITAN_CUDA
  if (device.is_cuda()) return cross_entropy_row_max_cuda(row_max, logits);
#endif
  require_cpu("cross_entropy_row_max", {row_max, logits});
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  visit_floating(logits.dtype(), "cross_entropy_row_max", [&]<class T>() {
    const T* x = logits.data<T>();
    T* m = row_max.data<T>();
    parallel_for_rows(rows, vocab, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        m[t] = *std::max_element(x + t * vocab, x + (t + 1) * vocab);
      }
    });
  });
}

void cross_entropy_row_sums(const Tensor& sum_exp, const Tensor& target_logit, const Tensor& logits,
                            const Tensor& targets, const Tensor& row_max, int64_t vocab_start) {
  check_logits(logits);
  check_row_stat(sum_exp, "cross_entropy sum_exp", logits);
  check_row_stat(target_logit, "cross_entropy target_logit", logits);
  check_row_stat(row_max, "cross_entropy row_max", logits);
  check_tensor(targets, "cross_entropy targets", {logits.size(0)}, DType::I32);
  [[maybe_unused]] Device device =
      common_device("cross_entropy_row_sums", {sum_exp, target_logit, logits, targets, row_max});
#if TITAN_CUDA
  if (device.is_cuda()) {
    return cross_entropy_row_sums_cuda(sum_exp, target_logit, logits, targets, row_max,
                                       vocab_start);
  }
#endif
  require_cpu("cross_entropy_row_sums", {sum_exp, target_logit, logits, targets, row_max});
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  visit_floating(logits.dtype(), "cross_entropy_row_sums", [&]<class T>() {
    const T* x = logits.data<T>();
    const int32_t* y = targets.data<int32_t>();
    parallel_for_rows(rows, vocab, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const T* row = x + t * vocab;
        const T m = row_max.data<T>()[t];
        double sum = 0;
        for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - m));
        sum_exp.data<T>()[t] = static_cast<T>(sum);
        target_logit.data<T>()[t] =
            owns(y[t], vocab_start, vocab) ? row[y[t] - vocab_start] : T(0);
      }
    });
  });
}

void cross_entropy_loss_and_grad(const Tensor& losses, const Tensor& dlogits, const Tensor& logits,
                                 const Tensor& targets, const Tensor& row_max,
                                 const Tensor& sum_exp, const Tensor& target_logit,
                                 int64_t vocab_start, double grad_scale) {
  check_logits(logits);
  check_tensor(dlogits, "cross_entropy dlogits", logits.shape(), logits.dtype());
  check_row_stat(losses, "cross_entropy losses", logits);
  check_row_stat(row_max, "cross_entropy row_max", logits);
  check_row_stat(sum_exp, "cross_entropy sum_exp", logits);
  check_row_stat(target_logit, "cross_entropy target_logit", logits);
  check_tensor(targets, "cross_entropy targets", {logits.size(0)}, DType::I32);
  [[maybe_unused]] Device device =
      common_device("cross_entropy_loss_and_grad",
                    {losses, dlogits, logits, targets, row_max, sum_exp, target_logit});
#if TITAN_CUDA
  if (device.is_cuda()) {
    return cross_entropy_loss_and_grad_cuda(losses, dlogits, logits, targets, row_max, sum_exp,
                                            target_logit, vocab_start, grad_scale);
  }
#endif
  require_cpu("cross_entropy_loss_and_grad",
              {losses, dlogits, logits, targets, row_max, sum_exp, target_logit});
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  visit_floating(logits.dtype(), "cross_entropy_loss_and_grad", [&]<class T>() {
    const T* x = logits.data<T>();
    T* dx = dlogits.data<T>();
    const int32_t* y = targets.data<int32_t>();
    parallel_for_rows(rows, vocab, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const T m = row_max.data<T>()[t];
        const double log_sum = std::log(static_cast<double>(sum_exp.data<T>()[t]));
        losses.data<T>()[t] =
            static_cast<T>(log_sum + m - static_cast<double>(target_logit.data<T>()[t]));
        const double inv_sum = 1.0 / static_cast<double>(sum_exp.data<T>()[t]);
        for (int64_t v = 0; v < vocab; ++v) {
          double p = std::exp(static_cast<double>(x[t * vocab + v] - m)) * inv_sum;
          dx[t * vocab + v] = static_cast<T>(p * grad_scale);
        }
        if (owns(y[t], vocab_start, vocab)) {
          dx[t * vocab + (y[t] - vocab_start)] -= static_cast<T>(grad_scale);
        }
      }
    });
  });
}

void cross_entropy_zero_untrained(const Tensor& losses, const Tensor& dlogits,
                                  const Tensor& trained) {
  check_logits(dlogits);
  check_row_stat(losses, "cross_entropy losses", dlogits);
  check_tensor(trained, "cross_entropy trained", {dlogits.size(0)}, DType::U8);
  [[maybe_unused]] Device device =
      common_device("cross_entropy_zero_untrained", {losses, dlogits, trained});
#if TITAN_CUDA
  if (device.is_cuda()) return cross_entropy_zero_untrained_cuda(losses, dlogits, trained);
#endif
  require_cpu("cross_entropy_zero_untrained", {losses, dlogits, trained});
  const int64_t rows = dlogits.size(0), vocab = dlogits.size(1);
  const uint8_t* keep = trained.data<uint8_t>();
  visit_floating(dlogits.dtype(), "cross_entropy_zero_untrained", [&]<class T>() {
    T* dx = dlogits.data<T>();
    T* loss = losses.data<T>();
    parallel_for_rows(rows, vocab, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        if (keep[t] != 0) continue;
        loss[t] = T(0);
        std::fill(dx + t * vocab, dx + (t + 1) * vocab, T(0));
      }
    });
  });
}

}  // namespace titan::model
