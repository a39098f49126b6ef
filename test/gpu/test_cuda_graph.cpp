// core/cuda/cuda_graph.h: a captured graph replays its work on what its buffers hold at each
// replay, the caching allocator keeps the blocks a capture used for the graph alone until it is
// destroyed, and a capture of work a graph cannot hold fails with an error naming it.
#include <doctest/doctest.h>

#include <optional>

#include <string>

#include "core/cast.h"
#include "core/cuda/cuda_graph.h"
#include "core/gemm.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using namespace titan;

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: a CUDA graph replays a GEMM and a cast bit for bit on each replay's inputs") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const Tensor b = testing::random_tensor({32, 48}, DType::F32, 2).to(Device::cuda(0));
    Tensor a = Tensor::empty({64, 32}, DType::F32, Device::cuda(0));  // written before each replay
    Tensor out;
    cuda::CudaGraph graph("a GEMM and a cast", [&] {
      Tensor c = Tensor::empty({64, 48}, DType::F32, Device::cuda(0));
      gemm(a, false, b, false, c);
      out = cast(c, DType::BF16);
    });
    for (uint64_t seed : {3, 4}) {
      const Tensor host = testing::random_tensor({64, 32}, DType::F32, seed);
      a.copy_from(host);
      graph.replay();
      Tensor eager = Tensor::empty({64, 48}, DType::F32, Device::cuda(0));
      gemm(host.to(Device::cuda(0)), false, b, false, eager);
      CHECK(testing::bitwise_equal(out.to(Device::cpu()),
                                   cast(eager, DType::BF16).to(Device::cpu())));
    }
  }

  TEST_CASE("gpu: the blocks a capture used serve nothing else until its graph is destroyed") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // A size no other test caches, so that the two requests below find exactly two blocks of it.
    const int64_t n = (1 << 16) + 123;
    void* captured = nullptr;
    {
      cuda::CudaGraph graph("a tensor made and freed inside the capture", [&] {
        Tensor t = Tensor::empty({n}, DType::F32, Device::cuda(0));
        t.fill_(1.0);
        captured = t.raw_data();
      });
      graph.replay();
      const Tensor outside = Tensor::empty({n}, DType::F32, Device::cuda(0));
      CHECK(outside.raw_data() != captured);
    }
    // The graph is gone: its block is the cache's again, for the next two requests of its size.
    const Tensor first = Tensor::empty({n}, DType::F32, Device::cuda(0));
    const Tensor second = Tensor::empty({n}, DType::F32, Device::cuda(0));
    CHECK((first.raw_data() == captured || second.raw_data() == captured));
  }

  TEST_CASE("gpu: a block made before a capture and freed inside it is not handed out inside it") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t n = (1 << 16) + 321;  // a size no other test caches
    // The graph's input: filled before the capture, read by it on every replay, and its last
    // handle dropped inside the capture.
    std::optional<Tensor> input = Tensor::empty({n}, DType::F32, Device::cuda(0));
    input->fill_(7.0);
    void* input_block = input->raw_data();
    Tensor copied, scratch;
    cuda::CudaGraph graph("an input freed inside the capture, then a tensor of its size", [&] {
      copied = input->clone();
      input.reset();
      scratch = Tensor::empty({n}, DType::F32, Device::cuda(0));  // must not be the input's block
      scratch.fill_(-1.0);
    });
    CHECK(scratch.raw_data() != input_block);
    for (int replay = 0; replay < 2; ++replay) {
      graph.replay();
      const Tensor host = copied.to(Device::cpu());
      CHECK(host.data<float>()[0] == 7.0f);
      CHECK(host.data<float>()[n - 1] == 7.0f);
    }
  }

  TEST_CASE("gpu: capturing a copy to the host fails naming the graph and the stream goes on") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const Tensor t = Tensor::zeros({16}, DType::F32, Device::cuda(0));
    std::string message;
    try {
      cuda::CudaGraph graph("a copy to the host", [&] { (void)t.to(Device::cpu()); });
    } catch (const Error& e) {
      message = e.what();
    }
    MESSAGE(message);
    CHECK(message.find("capturing a CUDA graph of a copy to the host failed") != std::string::npos);
    CHECK(message.find("--cuda-graph off") != std::string::npos);
    // Nothing of the failed capture is left on the stream.
    Tensor ones = Tensor::empty({16}, DType::F32, Device::cuda(0));
    ones.fill_(1.0);
    CHECK(ones.to(Device::cpu()).data<float>()[15] == 1.0f);
  }
}
