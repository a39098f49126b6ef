#include "model/ops/rope.h"

#include <cmath>
#include <numbers>

#include "core/dispatch.h"
#include "core/thread_pool.h"

namespace titan::model {

namespace {

// Llama 3.1: keep high frequencies, divide low ones by `factor`, interpolate in between.
double scale_frequency(double freq, const RopeScaling& s) {
  double wavelen = 2.0 * std::numbers::pi / freq;
  double low_freq_wavelen = s.original_max_position / s.low_freq_factor;
  double high_freq_wavelen = s.original_max_position / s.high_freq_factor;
  if (wavelen < high_freq_wavelen) return freq;
  if (wavelen > low_freq_wavelen) return freq / s.factor;
  double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                  (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * freq / s.factor + smooth * freq;
}

// sign = +1 rotates forward, -1 applies the transpose (backward).
template <class T>
void rope_rotate_cpu(T* x, const T* cos, const T* sin, int64_t rows, int64_t row_stride,
                     int64_t seq_len, int64_t n_heads, int64_t head_dim, T sign) {
  int64_t half = head_dim / 2;
  parallel_for_rows(rows, n_heads * head_dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* c = cos + (t % seq_len) * half;
      const T* s = sin + (t % seq_len) * half;
      for (int64_t h = 0; h < n_heads; ++h) {
        T* head = x + t * row_stride + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          T x0 = head[2 * i], x1 = head[2 * i + 1];
          T si = sign * s[i];
          head[2 * i] = x0 * c[i] - x1 * si;
          head[2 * i + 1] = x0 * si + x1 * c[i];
        }
      }
    }
  });
}

void rope_apply(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin,
                int64_t seq_len, int64_t n_heads, int64_t head_dim, double sign) {
  DType dt = x.dtype();
  TT_CHECK(x.ndim() == 2 && x.is_contiguous(), op, ": x must be a contiguous [B·S, W], got ", x);
  TT_CHECK(x.size(0) % seq_len == 0, op, ": ", x.size(0), " rows are not whole sequences of ",
           seq_len);
  TT_CHECK(x.size(1) >= n_heads * head_dim, op, ": rows of ", x.size(1), " hold fewer than ",
           n_heads, " heads of ", head_dim);
  TT_CHECK(head_dim % 2 == 0, op, ": head dim ", head_dim, " must be even");
  // On CUDA the tables are f32 whatever x is (rope_tables builds them on the CPU; move them).
  DType table_dt = x.device().is_cuda() ? DType::F32 : dt;
  check_tensor(cos, "rope cos", {cos.size(0), head_dim / 2}, table_dt);
  check_tensor(sin, "rope sin", {cos.size(0), head_dim / 2}, table_dt);
  TT_CHECK(cos.size(0) >= seq_len, op, ": tables cover ", cos.size(0), " positions, need ",
           seq_len);
  [[maybe_unused]] Device device = common_device(op, {x, cos, sin});
#if TITAN_CUDA
  if (device.is_cuda()) {
    return sign > 0 ? rope_forward_cuda(x, cos, sin, seq_len, n_heads, head_dim)
                    : rope_backward_cuda(x, cos, sin, seq_len, n_heads, head_dim);
  }
#endif
  require_cpu(op, {x, cos, sin});
  visit_floating(dt, op, [&]<class T>() {
    rope_rotate_cpu<T>(x.data<T>(), cos.data<T>(), sin.data<T>(), x.size(0), x.size(1), seq_len,
                       n_heads, head_dim, static_cast<T>(sign));
  });
}

}  // namespace

void rope_tables(const Tensor& cos, const Tensor& sin, int64_t head_dim, double theta,
                 const RopeScaling& scaling) {
  TT_CHECK(head_dim % 2 == 0, "rope_tables: head dim ", head_dim, " must be even");
  int64_t positions = cos.size(0), half = head_dim / 2;
  check_tensor(cos, "rope cos", {positions, half}, cos.dtype());
  check_tensor(sin, "rope sin", {positions, half}, cos.dtype());
  require_cpu("rope_tables", {cos, sin});
  visit_floating(cos.dtype(), "rope_tables", [&]<class T>() {
    for (int64_t i = 0; i < half; ++i) {
      double freq =
          1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
      if (scaling.enabled) freq = scale_frequency(freq, scaling);
      for (int64_t s = 0; s < positions; ++s) {
        double angle = static_cast<double>(s) * freq;
        cos.data<T>()[s * half + i] = static_cast<T>(std::cos(angle));
        sin.data<T>()[s * half + i] = static_cast<T>(std::sin(angle));
      }
    }
  });
}

void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t seq_len,
                  int64_t n_heads, int64_t head_dim) {
  rope_apply("rope_forward", x, cos, sin, seq_len, n_heads, head_dim, +1.0);
}

void rope_backward(const Tensor& dx, const Tensor& cos, const Tensor& sin, int64_t seq_len,
                   int64_t n_heads, int64_t head_dim) {
  rope_apply("rope_backward", dx, cos, sin, seq_len, n_heads, head_dim, -1.0);
}

}  // namespace titan::model
