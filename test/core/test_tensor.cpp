// Tensor handles, views and copies (core/tensor.h), with the small types around them: Shape,
// DType, Device and the allocator's accounting.
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "support/tensor_testing.h"

namespace titan {
namespace {

// [rows, cols] f32 holding 0, 1, 2, … in row-major order, so an element's value is its index.
Tensor iota_matrix(int64_t rows, int64_t cols) {
  std::vector<float> values(static_cast<size_t>(rows * cols));
  std::iota(values.begin(), values.end(), 0.0f);
  return Tensor::from_vector(values, {rows, cols});
}

template <class T>
std::string streamed(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("Shape: dims and numel and equality and printing") {
    Shape s{4, 256};
    CHECK(s.ndim() == 2);
    CHECK(s[0] == 4);
    CHECK(s[1] == 256);
    CHECK(s.numel() == 1024);
    CHECK(s.str() == "[4, 256]");
    CHECK(streamed(s) == "[4, 256]");
    CHECK(Shape{2, 3, 4}.str() == "[2, 3, 4]");
    CHECK(Shape{}.str() == "[]");
    CHECK(Shape{}.numel() == 1);  // a scalar
    CHECK(Shape{3, 0, 5}.numel() == 0);
    CHECK(s == Shape{4, 256});
    CHECK_FALSE(s == Shape{256, 4});
    CHECK_FALSE(s == Shape{4, 256, 1});
    Shape grown;
    grown.push_back(7);
    grown.push_back(8);
    CHECK(grown == Shape{7, 8});
  }

  TEST_CASE("Shape: more than six dims or a negative dim throws titan::Error") {
    Shape six{1, 2, 3, 4, 5, 6};
    CHECK_THROWS_AS(six.push_back(7), Error);
    Shape s{2};
    CHECK_THROWS_AS(s.push_back(-1), Error);
  }

  TEST_CASE("Shape: an element count past int64 throws titan::Error instead of wrapping") {
    // [2^62, 5] would wrap to 2^62 elements (and a 2^60-element [2^60, 16] to 0).
    CHECK_THROWS_WITH_AS(Shape({int64_t{1} << 62, 5}).numel(),
                         doctest::Contains("has more elements than int64 holds"), Error);
    CHECK_THROWS_AS(Shape({int64_t{1} << 60, 16}).numel(), Error);
    CHECK(Shape({int64_t{1} << 31, int64_t{1} << 31}).numel() == int64_t{1} << 62);
  }

  TEST_CASE("DType: sizes and names and parse_dtype's spellings") {
    CHECK(dtype_size(DType::F32) == 4);
    CHECK(dtype_size(DType::F64) == 8);
    CHECK(dtype_size(DType::BF16) == 2);
    CHECK(dtype_size(DType::E4M3) == 1);
    CHECK(dtype_size(DType::E5M2) == 1);
    CHECK(dtype_size(DType::I32) == 4);
    CHECK(dtype_size(DType::I64) == 8);
    CHECK(dtype_size(DType::U8) == 1);
    CHECK(is_floating(DType::BF16));
    CHECK(is_floating(DType::E4M3));
    CHECK_FALSE(is_floating(DType::I32));
    CHECK_FALSE(is_floating(DType::U8));

    const struct {
      const char* name;
      const char* alias;
      DType dtype;
    } spellings[] = {
        {"f32", "float32", DType::F32},       {"f64", "float64", DType::F64},
        {"bf16", "bfloat16", DType::BF16},    {"e4m3", "float8_e4m3fn", DType::E4M3},
        {"e5m2", "float8_e5m2", DType::E5M2}, {"i32", "int32", DType::I32},
        {"i64", "int64", DType::I64},         {"u8", "uint8", DType::U8},
    };
    for (const auto& s : spellings) {
      CAPTURE(s.name);
      CHECK(parse_dtype(s.name) == s.dtype);
      CHECK(parse_dtype(s.alias) == s.dtype);
      CHECK(dtype_name(s.dtype) == s.name);  // the short name is the canonical one
    }
    CHECK_THROWS_AS(parse_dtype("fp32"), InputError);
    CHECK_THROWS_AS(parse_dtype("F32"), InputError);
    CHECK_THROWS_AS(parse_dtype(""), InputError);
    CHECK_THROWS_WITH_AS(parse_dtype("half"), doctest::Contains("'half'"), InputError);
  }

  TEST_CASE("Device: parse_device accepts cpu or cuda or cuda:N and nothing else") {
    CHECK(parse_device("cpu") == Device::cpu());
    CHECK(parse_device("cuda") == Device::cuda(0));
    CHECK(parse_device("cuda:0") == Device::cuda(0));
    CHECK(parse_device("cuda:3") == Device::cuda(3));
    CHECK(parse_device("cuda:12").index == 12);
    CHECK(Device::cpu().is_cpu());
    CHECK(Device::cuda(1).is_cuda());
    CHECK(Device::cpu().str() == "cpu");
    CHECK(Device::cuda(2).str() == "cuda:2");
    CHECK(streamed(Device::cuda(5)) == "cuda:5");
    for (const char* junk : {"cuda:x", "tpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", "cuda0", ""}) {
      CAPTURE(junk);
      CHECK_THROWS_AS(parse_device(junk), InputError);
    }
    CHECK_THROWS_WITH_AS(parse_device("tpu"), doctest::Contains("'tpu'"), InputError);
  }

  TEST_CASE(
      "Tensor: empty and zeros have the shape and numel and bytes and contiguous strides asked "
      "for") {
    Tensor undefined;
    CHECK_FALSE(undefined.defined());
    CHECK_THROWS_AS(undefined.raw_data(), Error);

    Tensor t = Tensor::empty({2, 3, 4}, DType::F32);
    CHECK(t.defined());
    CHECK(t.device() == Device::cpu());
    CHECK(t.dtype() == DType::F32);
    CHECK(t.ndim() == 3);
    CHECK(t.shape() == Shape{2, 3, 4});
    CHECK(t.numel() == 24);
    CHECK(t.nbytes() == 96);
    CHECK(t.strides() == Shape{12, 4, 1});
    CHECK(t.is_contiguous());
    CHECK(t.size(0) == 2);
    CHECK(t.size(-1) == 4);
    CHECK(t.size(-3) == 2);
    CHECK_THROWS_AS(t.size(3), Error);
    CHECK_THROWS_AS(t.size(-4), Error);
    CHECK(streamed(t) == "f32[2, 3, 4]");

    Tensor z = Tensor::zeros({5, 7}, DType::F64);
    CHECK(z.nbytes() == 5 * 7 * 8);
    for (int64_t i = 0; i < z.numel(); ++i) CHECK(z.data<double>()[i] == 0.0);

    Tensor b = Tensor::zeros({3}, DType::BF16);
    CHECK(b.nbytes() == 6);
    CHECK(b.data<bf16_t>()[2].bits == 0);

    Tensor none = Tensor::zeros({0, 5}, DType::F32);
    CHECK(none.numel() == 0);
    CHECK(none.nbytes() == 0);
  }

  TEST_CASE("Tensor: copying the handle and view() share storage") {
    Tensor t = iota_matrix(4, 6);
    Tensor alias = t;
    alias.data<float>()[0] = -1.0f;
    CHECK(t.data<float>()[0] == -1.0f);

    Tensor v = t.view({2, 3, 4});
    CHECK(v.shape() == Shape{2, 3, 4});
    CHECK(v.strides() == Shape{12, 4, 1});
    CHECK(v.raw_data() == t.raw_data());
    v.data<float>()[13] = 100.0f;  // v[1, 0, 1] is t[2, 1]
    CHECK(t.data<float>()[2 * 6 + 1] == 100.0f);
    t.data<float>()[23] = 200.0f;
    CHECK(v.data<float>()[23] == 200.0f);

    CHECK_THROWS_AS(t.view({5, 5}), Error);  // numel differs
  }

  TEST_CASE("Tensor: narrow along dim 0 is a contiguous block of rows at the right offset") {
    Tensor t = iota_matrix(5, 4);
    Tensor r = t.narrow(0, 1, 3);
    CHECK(r.shape() == Shape{3, 4});
    CHECK(r.strides() == Shape{4, 1});
    CHECK(r.is_contiguous());
    CHECK(r.data<float>()[0] == 4.0f);
    CHECK(r.data<float>()[11] == 15.0f);
    r.data<float>()[0] = -4.0f;  // shares storage
    CHECK(t.data<float>()[4] == -4.0f);

    Tensor rows = t.rows(2, 5);
    CHECK(rows.shape() == Shape{3, 4});
    CHECK(rows.data<float>()[0] == 8.0f);
    CHECK(t.rows(5, 5).numel() == 0);

    // A narrow of a narrow adds the offsets.
    CHECK(r.narrow(0, 1, 1).data<float>()[0] == 8.0f);
  }

  TEST_CASE("Tensor: narrow along dim 1 is a strided view that contiguous() copies in order") {
    Tensor t = iota_matrix(3, 5);
    Tensor c = t.narrow(1, 2, 2);  // [[2, 3], [7, 8], [12, 13]]
    CHECK(c.shape() == Shape{3, 2});
    CHECK(c.strides() == Shape{5, 1});
    CHECK_FALSE(c.is_contiguous());
    CHECK(c.data<float>()[0] == 2.0f);
    CHECK(c.data<float>()[5] == 7.0f);  // next row through the row stride

    Tensor packed = c.contiguous();
    CHECK(packed.is_contiguous());
    CHECK(packed.shape() == Shape{3, 2});
    CHECK(packed.raw_data() != t.raw_data());
    const std::vector<float> expected = {2, 3, 7, 8, 12, 13};
    for (int64_t i = 0; i < 6; ++i) CHECK(packed.data<float>()[i] == expected[i]);

    // A contiguous tensor's contiguous() is the tensor itself.
    CHECK(t.contiguous().raw_data() == t.raw_data());

    CHECK(t.narrow(-1, 4, 1).data<float>()[0] == 4.0f);
    CHECK_THROWS_AS(t.narrow(1, 4, 2), Error);
    CHECK_THROWS_AS(t.narrow(1, -1, 2), Error);
    CHECK_THROWS_AS(t.narrow(2, 0, 1), Error);
  }

  TEST_CASE("Tensor: contiguous() of a 3-D view narrowed along two dims") {
    std::vector<int32_t> values(2 * 4 * 5);
    std::iota(values.begin(), values.end(), 0);
    Tensor t = Tensor::from_vector(values, {2, 4, 5});
    Tensor v = t.narrow(1, 1, 2).narrow(2, 1, 3);  // [2, 2, 3]
    CHECK_FALSE(v.is_contiguous());
    Tensor packed = v.contiguous();
    CHECK(packed.shape() == Shape{2, 2, 3});
    int64_t k = 0;
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        for (int64_t l = 0; l < 3; ++l, ++k) {
          CHECK(packed.data<int32_t>()[k] == (i * 4 + (j + 1)) * 5 + (l + 1));
        }
      }
    }
  }

  TEST_CASE("Tensor: view of a non-contiguous tensor throws titan::Error") {
    Tensor t = iota_matrix(4, 4);
    CHECK_THROWS_AS(t.narrow(1, 0, 2).view({8}), Error);
    CHECK_NOTHROW(t.narrow(0, 0, 2).view({8}));  // a row block is contiguous
  }

  TEST_CASE("Tensor: clone is a deep copy") {
    Tensor t = iota_matrix(3, 3);
    Tensor c = t.clone();
    CHECK(testing::bitwise_equal(c, t));
    CHECK(c.raw_data() != t.raw_data());
    c.data<float>()[4] = 99.0f;
    CHECK(t.data<float>()[4] == 4.0f);
    t.data<float>()[0] = -7.0f;
    CHECK(c.data<float>()[0] == 0.0f);

    Tensor scalar = Tensor::from_vector<double>({2.5}, Shape{});
    CHECK(scalar.clone().data<double>()[0] == 2.5);
  }

  TEST_CASE("Tensor: copy_from copies values and checks shape and dtype and contiguity") {
    Tensor src = iota_matrix(2, 3);
    Tensor dst = Tensor::zeros({2, 3}, DType::F32);
    dst.copy_from(src);
    CHECK(testing::bitwise_equal(dst, src));
    CHECK(dst.raw_data() != src.raw_data());

    // From a strided view.
    Tensor wide = iota_matrix(2, 6);
    dst.copy_from(wide.narrow(1, 3, 3));
    const std::vector<float> expected = {3, 4, 5, 9, 10, 11};
    for (int64_t i = 0; i < 6; ++i) CHECK(dst.data<float>()[i] == expected[i]);

    CHECK_THROWS_AS(dst.copy_from(iota_matrix(3, 2)), Error);                  // shape
    CHECK_THROWS_AS(dst.copy_from(Tensor::zeros({2, 3}, DType::F64)), Error);  // dtype
    CHECK_THROWS_AS(wide.narrow(1, 0, 3).copy_from(src), Error);  // strided destination
  }

  TEST_CASE("Tensor: data<T>() with the wrong element type throws titan::Error") {
    Tensor t = Tensor::zeros({4}, DType::F32);
    CHECK_NOTHROW(t.data<float>());
    CHECK_THROWS_AS(t.data<double>(), Error);
    CHECK_THROWS_AS(t.data<int32_t>(), Error);  // same size, still refused
    Tensor b = Tensor::zeros({4}, DType::BF16);
    CHECK_THROWS_AS(b.data<float>(), Error);
    CHECK_NOTHROW(b.data<bf16_t>());
    CHECK_THROWS_WITH_AS(t.data<double>(), doctest::Contains("read as f64"), Error);
  }

  TEST_CASE("Tensor: fill_ and zero_") {
    Tensor f = Tensor::empty({3, 4}, DType::F32);
    f.fill_(1.5);
    for (int64_t i = 0; i < f.numel(); ++i) CHECK(f.data<float>()[i] == 1.5f);
    f.zero_();
    for (int64_t i = 0; i < f.numel(); ++i) CHECK(f.data<float>()[i] == 0.0f);

    Tensor d = Tensor::empty({5}, DType::F64);
    d.fill_(-0.25);
    CHECK(d.data<double>()[4] == -0.25);
    Tensor i32 = Tensor::empty({5}, DType::I32);
    i32.fill_(7);
    CHECK(i32.data<int32_t>()[0] == 7);
    CHECK(i32.data<int32_t>()[4] == 7);
    Tensor i64 = Tensor::empty({2}, DType::I64);
    i64.fill_(-3);
    CHECK(i64.data<int64_t>()[1] == -3);
    Tensor u8 = Tensor::empty({2}, DType::U8);
    u8.fill_(200);
    CHECK(u8.data<uint8_t>()[1] == 200);

    // fill_ on a row block touches only that block.
    Tensor m = Tensor::zeros({3, 2}, DType::F32);
    m.rows(1, 2).fill_(9.0);
    const std::vector<float> expected = {0, 0, 9, 9, 0, 0};
    for (int64_t k = 0; k < 6; ++k) CHECK(m.data<float>()[k] == expected[k]);

    CHECK_THROWS_AS(Tensor::zeros({2}, DType::BF16).fill_(1.0), Error);
    CHECK_THROWS_AS(iota_matrix(2, 4).narrow(1, 0, 2).fill_(1.0), Error);
    CHECK_THROWS_AS(iota_matrix(2, 4).narrow(1, 0, 2).zero_(), Error);
  }

  TEST_CASE("check_tensor: passes the expected tensor and throws on anything else") {
    Tensor t = Tensor::zeros({4, 8}, DType::F32);
    CHECK_NOTHROW(check_tensor(t, "x", {4, 8}, DType::F32));
    CHECK_THROWS_AS(check_tensor(t, "x", {8, 4}, DType::F32), Error);
    CHECK_THROWS_AS(check_tensor(t, "x", {4, 8}, DType::BF16), Error);
    CHECK_THROWS_AS(check_tensor(Tensor(), "x", {4, 8}, DType::F32), Error);
    CHECK_THROWS_AS(
        check_tensor(Tensor::zeros({4, 16}, DType::F32).narrow(1, 0, 8), "x", {4, 8}, DType::F32),
        Error);
    CHECK_THROWS_WITH_AS(check_tensor(t, "attention.wq", {4, 16}, DType::F32),
                         doctest::Contains("attention.wq: expected f32[4, 16], got f32[4, 8]"),
                         Error);
  }

  TEST_CASE("Allocator: live bytes follow tensors and peak tracks the maximum since reset_peak") {
    Allocator& cpu = allocator_for(Device::cpu());
    MemoryStats before = cpu.stats();
    {
      Tensor t = Tensor::empty({1000}, DType::F32);
      MemoryStats held = cpu.stats();
      CHECK(held.live_bytes - before.live_bytes == 4000);
      CHECK(held.allocations - before.allocations == 1);
      CHECK(held.peak_bytes >= held.live_bytes);
      {
        Tensor shared = t;  // a handle, not an allocation
        Tensor view = t.view({10, 100});
        CHECK(cpu.stats().live_bytes == held.live_bytes);
        CHECK(cpu.stats().allocations == held.allocations);
      }
      CHECK(cpu.stats().live_bytes == held.live_bytes);
    }
    CHECK(cpu.stats().live_bytes == before.live_bytes);

    // A view keeps the storage alive after the original handle is gone.
    Tensor survivor;
    {
      Tensor t = Tensor::empty({256}, DType::F64);
      survivor = t.rows(0, 1);
    }
    CHECK(cpu.stats().live_bytes - before.live_bytes == 256 * 8);
    survivor = Tensor();
    CHECK(cpu.stats().live_bytes == before.live_bytes);

    cpu.reset_peak();
    int64_t base = cpu.stats().live_bytes;
    CHECK(cpu.stats().peak_bytes == base);
    { Tensor big = Tensor::empty({1 << 16}, DType::F32); }
    CHECK(cpu.stats().peak_bytes == base + (int64_t{1} << 18));
    {
      Tensor small = Tensor::empty({1 << 10}, DType::F32);
      CHECK(cpu.stats().peak_bytes == base + (int64_t{1} << 18));  // the big one was the peak
    }
    cpu.reset_peak();
    CHECK(cpu.stats().peak_bytes == base);
    {
      Tensor a = Tensor::empty({100}, DType::F64);
      Tensor b = Tensor::empty({50}, DType::F64);
      CHECK(cpu.stats().peak_bytes == base + 1200);
    }
    CHECK(cpu.stats().peak_bytes == base + 1200);
    CHECK(cpu.stats().live_bytes == base);
  }

  TEST_CASE("Allocator: bytes are counted under the innermost MemoryTagScope") {
    Allocator& cpu = allocator_for(Device::cpu());
    auto bytes_of = [](const MemoryBreakdown& b, const std::string& name) {
      for (const auto& [tag, bytes] : b.by_tag) {
        if (tag == name) return bytes;
      }
      return int64_t{0};
    };
    const MemoryBreakdown before = cpu.live_breakdown();
    CHECK(before.total_bytes == cpu.stats().live_bytes);
    {
      MemoryTagScope params(MemoryCategory::Parameters);
      Tensor w = Tensor::empty({100}, DType::F32);
      Tensor block;
      {
        MemoryTagScope act(MemoryTag::activations(3));
        block = Tensor::empty({50}, DType::F32);
        MemoryTagScope gathered(MemoryCategory::GatheredParameters);  // the inner scope wins
        Tensor g = Tensor::empty({10}, DType::F64);
        CHECK(bytes_of(cpu.live_breakdown(), "gathered_parameters") -
                  bytes_of(before, "gathered_parameters") ==
              80);
      }
      CHECK(current_memory_tag().category == MemoryCategory::Parameters);
      const MemoryBreakdown held = cpu.live_breakdown();
      CHECK(bytes_of(held, "parameters") - bytes_of(before, "parameters") == 400);
      CHECK(bytes_of(held, "activations.block.3") - bytes_of(before, "activations.block.3") == 200);
      CHECK(held.total_bytes == cpu.stats().live_bytes);
      // The bytes go back to the tag they were taken under, wherever the tensor dies.
      MemoryTagScope other(MemoryCategory::Other);
      block = Tensor();
      CHECK(bytes_of(cpu.live_breakdown(), "activations.block.3") ==
            bytes_of(before, "activations.block.3"));
    }
    CHECK(current_memory_tag().category == MemoryCategory::Other);
    CHECK(cpu.live_breakdown().total_bytes == before.total_bytes);
  }

  TEST_CASE("Allocator: the breakdown at the tracked peak adds up to the peak") {
    Allocator& cpu = allocator_for(Device::cpu());
    cpu.track_peak_breakdown();
    const int64_t base = cpu.stats().live_bytes;
    {
      MemoryTagScope act(MemoryTag::activations(0));
      Tensor a = Tensor::empty({1000}, DType::F32);
      MemoryTagScope grads(MemoryCategory::Gradients);
      Tensor b = Tensor::empty({500}, DType::F32);
    }
    { Tensor small = Tensor::empty({10}, DType::F32); }  // below the peak: no new breakdown
    const MemoryBreakdown peak = cpu.peak_breakdown();
    CHECK(peak.total_bytes == base + 6000);
    int64_t sum = 0;
    for (const auto& [tag, bytes] : peak.by_tag) sum += bytes;
    CHECK(sum == peak.total_bytes);
    CHECK(memory_tag_name(MemoryTag::activations(-1)) == "activations.outside_blocks");
    CHECK(memory_tag_name(MemoryTag{MemoryCategory::Fp8Cache, -1}) == "fp8_cache");
  }

  TEST_CASE("Allocator: the CPU allocator is built in and cannot be replaced") {
    CHECK_THROWS_AS(register_allocator(DeviceType::CPU, nullptr), Error);
  }

}  // TEST_SUITE("fast")

}  // namespace titan
