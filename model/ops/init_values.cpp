#include "model/ops/init_values.h"

#include <algorithm>
#include <functional>
#include <thread>
#include <vector>

#include "core/cast.h"
#include "core/dispatch.h"
#include "core/philox.h"
#include "core/unverified_gpu_paths.h"

namespace titan::model {

namespace {

// Calls visit(begin, end) over [0, n) in one chunk per hardware thread (one chunk when n is
// small enough that starting threads would cost more than it saves).
void for_each_chunk(int64_t n, const std::function<void(int64_t, int64_t)>& visit) {
  constexpr int64_t kMinPerThread = int64_t{1} << 18;
  const int64_t threads =
      std::clamp<int64_t>(n / kMinPerThread, 1, std::max(1u, std::thread::hardware_concurrency()));
  if (threads == 1) return visit(0, n);
  std::vector<std::jthread> workers;
  for (int64_t t = 0; t < threads; ++t) {
    workers.emplace_back(visit, n * t / threads, n * (t + 1) / threads);
  }
}

template <class T>
void init_values_cpu(T* out, int64_t n, const InitSpec& init, const CounterRng& rng,
                     const InitBlock& b) {
  const PhiloxKey key = rng.key();
  const double lo = -init.cutoff / init.std, hi = init.cutoff / init.std;
  // Every value is a pure function of its index, so the elements split over threads freely:
  // an 8B-shaped model draws 2.8 billion values before its first step.
  for_each_chunk(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto index =
          static_cast<uint64_t>((b.row_begin + i / b.width) * b.cols + b.col_begin + i % b.width);
      double v = 1.0;
      switch (init.kind) {
        case InitKind::Zeros: v = 0.0; break;
        case InitKind::Ones: v = 1.0; break;
        case InitKind::Normal:
          v = philox::mul(init.std, philox::normal_at(key[0], key[1], index, 0));
          break;
        case InitKind::TruncatedNormal:
          v = philox::mul(init.std, philox::truncated_normal_at(key[0], key[1], index, lo, hi));
          break;
      }
      out[i] = static_cast<T>(v);
    }
  });
}

}  // namespace

void init_values(const Tensor& dst, const InitSpec& init, const CounterRng& rng,
                 const InitBlock& block) {
  TT_CHECK(dst.is_contiguous() && block.width > 0 && dst.numel() % block.width == 0,
           "init_values: destination ", dst, " is not whole rows of ", block.width);
  TT_CHECK(
      block.col_begin >= 0 && block.col_begin + block.width <= block.cols && block.row_begin >= 0,
      "init_values: columns [", block.col_begin, ", ", block.col_begin + block.width, ") from row ",
      block.row_begin, " outside rows of ", block.cols);
  if (init.kind == InitKind::TruncatedNormal) {
    check_truncation(-init.cutoff / init.std, init.cutoff / init.std);
  }
  if (dst.numel() == 0) return;
#if TITAN_CUDA
  if (dst.device().is_cuda()) {
    if (unverified_gpu_path_allowed(UnverifiedGpuPath::DeviceInit)) {
      return init_values_cuda(dst, init, rng, block);
    }
    // Drawn on the host, the same bits, and copied, until the kernel has run on a GPU
    // (core/unverified_gpu_paths.h).
    Tensor host = Tensor::empty(dst.shape(), dst.dtype());
    init_values(host, init, rng, block);
    dst.copy_from(host);
    return;
  }
#endif
  require_cpu("init_values", {dst});
  if (dst.dtype() == DType::BF16) {
    // bf16 storage gets each value rounded to f32 and then to bf16, as the kernel stores it.
    Tensor f32 = Tensor::empty(dst.shape(), DType::F32);
    init_values_cpu<float>(f32.data<float>(), f32.numel(), init, rng, block);
    return cast_into(dst, f32);
  }
  visit_floating(dst.dtype(), "init_values", [&]<class T>() {
    init_values_cpu<T>(dst.data<T>(), dst.numel(), init, rng, block);
  });
}

}  // namespace titan::model
