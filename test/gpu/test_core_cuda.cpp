// core/ on CUDA against the CPU: the caching allocator, copies, fill and cast, streams and
// events, and the cuBLASLt GEMM against OpenBLAS on the same inputs.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>

#include "core/cast.h"
#include "core/cuda/backend.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/stream.h"
#include "core/device_moment.h"
#include "core/gemm.h"
#include "core/peer_work.h"
#include "core/wait_clock.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using namespace titan;
using titan::testing::random_tensor;
using titan::testing::relative_l2_error;

namespace {

const Device kGpu = Device::cuda(0);

// A host function on a stream: the stream does not go on until it returns, 60 ms later.
constexpr double kHeldSeconds = 0.060;
void CUDART_CB hold_stream(void*) {
  std::this_thread::sleep_for(std::chrono::duration<double>(kHeldSeconds));
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: the caching allocator reuses freed blocks and counts live and peak bytes") {
    SKIP_WITHOUT_CUDA_DEVICE();
    Allocator& allocator = allocator_for(kGpu);
    // Warm the cache with the sizes of a "step", then repeat the step: no new cudaMalloc.
    auto step = [&] {
      Tensor a = Tensor::empty({1024, 1024}, DType::F32, kGpu);
      Tensor b = Tensor::empty({333}, DType::BF16, kGpu);
      Tensor c = Tensor::empty({4 << 20}, DType::U8, kGpu);
      c.zero_();
    };
    step();
    int64_t mallocs = cuda::cache_stats().device_mallocs;
    allocator.reset_peak();
    int64_t live_before = allocator.stats().live_bytes;
    for (int i = 0; i < 5; ++i) step();
    CHECK(cuda::cache_stats().device_mallocs == mallocs);
    CHECK(allocator.stats().live_bytes == live_before);
    CHECK(allocator.stats().peak_bytes - live_before == 1024 * 1024 * 4 + 333 * 2 + (4 << 20));
    CHECK(cuda::cache_stats().reserved_bytes >= cuda::cache_stats().cached_bytes);
    cuda::empty_cache();
    CHECK(cuda::cache_stats().cached_bytes == 0);
  }

  TEST_CASE("gpu: out of memory with peer operations in flight keeps the cache and says why") {
    SKIP_WITHOUT_CUDA_DEVICE();
    { Tensor cached = Tensor::empty({8 << 20}, DType::U8, kGpu); }  // a block in the cache
    const int64_t cached = cuda::cache_stats().cached_bytes;
    REQUIRE(cached > 0);
    const int64_t too_big = int64_t{1} << 50;  // a petabyte: no device has it
    std::string message;
    {
      const PeerWorkScope peer_work;
      try {
        (void)Tensor::empty({too_big}, DType::U8, kGpu);
      } catch (const OutOfMemory& e) {
        message = e.what();
      }
      // Returning the cache would synchronize the device: refused too.
      CHECK_THROWS_WITH(cuda::empty_cache(), doctest::Contains("messages are in flight"));
    }
    MESSAGE(message);
    CHECK(message.find("CUDA out of memory") != std::string::npos);
    CHECK(message.find("kept: the pipeline's messages are in flight") != std::string::npos);
    CHECK(cuda::cache_stats().cached_bytes == cached);  // nothing was returned to the driver
    // Outside the scope the retry returns the cache first, as always.
    CHECK_THROWS_AS((void)Tensor::empty({too_big}, DType::U8, kGpu), OutOfMemory);
    CHECK(cuda::cache_stats().cached_bytes == 0);
  }

  TEST_CASE("gpu: tensors round-trip between host and device and device copies are exact") {
    SKIP_WITHOUT_CUDA_DEVICE();
    Tensor host = random_tensor({37, 129}, DType::F32, 1);
    Tensor device = host.to(kGpu);
    CHECK(device.device() == kGpu);
    Tensor copy = Tensor::empty(host.shape(), DType::F32, kGpu);
    copy.copy_from(device);
    CHECK(testing::bitwise_equal(copy.to(Device::cpu()), host));
    // A column block of a 2-D device buffer (the k heads of wqkv's output) copies as one 2-D copy.
    Tensor block = device.narrow(1, 40, 64);
    Tensor block_host = Tensor::empty({37, 64}, DType::F32);
    block_host.copy_from(block);
    CHECK(testing::bitwise_equal(block_host, host.narrow(1, 40, 64).contiguous()));
  }

  TEST_CASE("gpu: fill and casts match the CPU bit for bit") {
    SKIP_WITHOUT_CUDA_DEVICE();
    Tensor filled = Tensor::empty({1000}, DType::BF16, kGpu);
    filled.fill_(1.1);
    Tensor expected =
        cast(Tensor::from_vector(std::vector<float>(1000, 1.1f), {1000}), DType::BF16);
    CHECK(testing::bitwise_equal(filled.to(Device::cpu()), expected));
    // The backend's own entry point, as Tensor::fill_ calls it, on the other dtypes it takes.
    for (DType dtype : {DType::F32, DType::I32, DType::I64, DType::U8}) {
      CAPTURE(dtype_name(dtype));
      Tensor t = Tensor::empty({777}, dtype, kGpu);
      cuda_backend::fill(t, 7.0);
      Tensor on_cpu = Tensor::empty({777}, dtype);
      on_cpu.fill_(7.0);
      CHECK(testing::bitwise_equal(t.to(Device::cpu()), on_cpu));
    }
    // f32 -> bf16 rounds to nearest even on both sides, including NaN and overflow to infinity.
    Tensor x = random_tensor({4099}, DType::F32, 2, 1e3);
    x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    x.data<float>()[1] = 3.4e38f;
    x.data<float>()[2] = -0.0f;
    Tensor on_gpu = cast(x.to(kGpu), DType::BF16).to(Device::cpu());
    Tensor on_cpu = cast(x, DType::BF16);
    CHECK(std::isnan(cast(on_gpu, DType::F32).data<float>()[0]));
    CHECK(testing::bitwise_equal(on_gpu.narrow(0, 1, 4098).contiguous(),
                                 on_cpu.narrow(0, 1, 4098).contiguous()));
    CHECK(testing::bitwise_equal(cast(cast(x, DType::BF16).to(kGpu), DType::F32).to(Device::cpu()),
                                 cast(on_cpu, DType::F32)));
  }

  TEST_CASE("gpu: an event orders a side stream after the compute stream") {
    SKIP_WITHOUT_CUDA_DEVICE();
    Tensor x = Tensor::empty({1 << 22}, DType::F32, kGpu);
    x.fill_(3.0);  // on the current (compute) stream
    cuda::Event filled;
    filled.record();
    cuda::Stream side;
    Tensor y = Tensor::empty({1 << 22}, DType::F32, Device::cpu());
    {
      cuda::StreamGuard guard(side.get());
      filled.wait();  // the side stream waits for the fill, the host does not
      y.copy_from(x);
    }
    CHECK(y.data<float>()[0] == 3.0f);
    CHECK(y.data<float>()[(1 << 22) - 1] == 3.0f);
  }

  // What NCCL's Work::wait does, with a side stream standing in for the communication stream:
  // the compute stream waits on an event of a stream that is held. The host returns at once;
  // the wait clock must read the time the compute stream stood still, and not the time it was
  // busy with its own work before the wait.
  TEST_CASE(
      "gpu: the wait clock reads how long the stream stood behind a transfer and not the host") {
    SKIP_WITHOUT_CUDA_DEVICE();
    cuda::Stream transfer;
    cuda::Event transferred;
    WaitClock clock;

    // Stalled: the "transfer" is held, the compute stream has nothing of its own to do.
    cudaLaunchHostFunc(transfer.get(), hold_stream, nullptr);
    transferred.record(transfer.get());
    const auto host_start = std::chrono::steady_clock::now();
    clock.begin(kGpu);
    transferred.wait();
    clock.end();
    const double host_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
    CHECK(clock.take_seconds() == 0.0);  // never blocks: the stream has not passed the wait yet
    cuda::synchronize_stream();
    const double stalled = clock.take_seconds();
    MESSAGE("host " << host_seconds * 1e3 << " ms, stream stood " << stalled * 1e3 << " ms");
    CHECK(host_seconds < 0.5 * kHeldSeconds);
    CHECK(stalled >= 0.8 * kHeldSeconds);
    CHECK(stalled < 10 * kHeldSeconds);
    CHECK(clock.take_seconds() == 0.0);  // taken once

    // Hidden: the compute stream is itself held as long, so the transfer is done when it comes
    // to the wait.
    cudaLaunchHostFunc(transfer.get(), hold_stream, nullptr);
    transferred.record(transfer.get());
    cudaLaunchHostFunc(cuda::current_stream(), hold_stream, nullptr);
    cudaLaunchHostFunc(cuda::current_stream(), hold_stream, nullptr);  // and then some
    clock.begin(kGpu);
    transferred.wait();
    clock.end();
    cuda::synchronize_stream();
    const double hidden = clock.take_seconds();
    MESSAGE("behind 120 ms of the stream's own work, it stood " << hidden * 1e3 << " ms");
    CHECK(hidden >= 0.0);
    CHECK(hidden < 0.2 * kHeldSeconds);
  }

  // What the pipeline executor times a compute with: the host queues work and goes on, and the
  // time between two moments is the stream's, read once the stream has passed the second.
  TEST_CASE("gpu: two device moments read the stream's time between them and not the host's") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // The process's first CUDA call makes its context (0.17 s on an H200): before the host clock.
    DeviceMoment::now(kGpu);
    cuda::synchronize_stream();
    const auto host_start = std::chrono::steady_clock::now();
    const DeviceMoment before = DeviceMoment::now(kGpu);
    cudaLaunchHostFunc(cuda::current_stream(), hold_stream, nullptr);  // "a compute" of 60 ms
    const DeviceMoment after = DeviceMoment::now(kGpu);
    const double host_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
    CHECK(host_seconds < 0.5 * kHeldSeconds);
    CHECK_FALSE(after.passed());                         // the stream is still held
    const double seconds = after.seconds_since(before);  // waits for the stream
    CHECK(after.passed());
    MESSAGE("host " << host_seconds * 1e3 << " ms, stream " << seconds * 1e3 << " ms");
    CHECK(seconds >= 0.8 * kHeldSeconds);
    CHECK(seconds < 10 * kHeldSeconds);
    // Nothing queued between two moments: the stream takes no time to pass from one to the next.
    const DeviceMoment a = DeviceMoment::now(kGpu);
    const DeviceMoment b = DeviceMoment::now(kGpu);
    CHECK(b.seconds_since(a) >= 0.0);
    CHECK(b.seconds_since(a) < 0.1 * kHeldSeconds);
  }

  // Every transpose combination of C = alpha·op(A)·op(B) + beta·C, against OpenBLAS in f32 on
  // the same values. f32 on CUDA is exact fp32 (no TF32): only the summation order differs, so
  // 1e-6 relative L2. bf16 operands are rounded once on both sides and both accumulate in fp32;
  // a bf16 C adds one rounding of the output (2⁻⁹ relative): 1e-2.
  TEST_CASE("gpu: cuBLASLt GEMMs match OpenBLAS for every transpose and dtype") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t m = 272, n = 200, k = 384;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (DType ab : {DType::F32, DType::BF16}) {
          for (DType c_type : {DType::F32, DType::BF16}) {
            if (ab == DType::F32 && c_type == DType::BF16) continue;
            CAPTURE(ta);
            CAPTURE(tb);
            CAPTURE(dtype_name(ab));
            CAPTURE(dtype_name(c_type));
            Tensor a =
                testing::bf16_values(random_tensor(ta ? Shape{k, m} : Shape{m, k}, DType::F32, 3));
            Tensor b =
                testing::bf16_values(random_tensor(tb ? Shape{n, k} : Shape{k, n}, DType::F32, 4));
            Tensor c = testing::bf16_values(random_tensor({m, n}, DType::F32, 5));
            Tensor c_gpu = cast(c.to(kGpu), c_type);
            gemm(cast(a.to(kGpu), ab), ta, cast(b.to(kGpu), ab), tb, c_gpu, 0.5, 1.0);
            gemm(a, ta, b, tb, c, 0.5, 1.0);
            double tolerance = c_type == DType::BF16 ? 1e-2 : 1e-6;
            CHECK(relative_l2_error(c_gpu, c) < tolerance);
          }
        }
      }
    }
  }

  TEST_CASE("gpu: a GEMM reads and writes column blocks of fused buffers") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // y[:, 64:192] = x · w[128:256, :]ᵀ with x a column block too: row strides exceed the widths.
    Tensor x_all = random_tensor({96, 320}, DType::F32, 6);
    Tensor w_all = random_tensor({384, 256}, DType::F32, 7);
    Tensor y_all = random_tensor({96, 256}, DType::F32, 8);
    Tensor x_gpu = x_all.to(kGpu), w_gpu = w_all.to(kGpu), y_gpu = y_all.to(kGpu);
    gemm(x_gpu.narrow(1, 64, 256), false, w_gpu.rows(128, 256), true, y_gpu.narrow(1, 64, 128));
    gemm(x_all.narrow(1, 64, 256), false, w_all.rows(128, 256), true, y_all.narrow(1, 64, 128));
    CHECK(relative_l2_error(y_gpu, y_all) < 1e-6);
  }

}  // TEST_SUITE
