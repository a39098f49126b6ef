// Loading onto a GPU against loading onto the CPU: the stored bytes cross as they are and core's
// cast kernel converts them on the device (checkpoint/load_staging.h), so the values must be the
// CPU's conversion bit for bit: bf16 widened to f32 and f64, f32 rounded to bf16, and the same
// dtype copied, from pinned staging memory and from plain; and a Hugging Face folder, bf16 and
// f32, loaded into CUDA parameters of each dtype equals the same folder loaded on the CPU.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <memory>
#include <vector>

#include "checkpoint/hf_llama.h"
#include "checkpoint/load_staging.h"
#include "core/bf16.h"
#include "core/cast.h"
#include "model/transformer.h"
#include "support/gpu.h"
#include "support/process.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::checkpoint;

namespace {

const Device kLoadDevice = Device::cuda(0);

// Every finite bf16 pattern (both zeros, subnormals, the largest): what a load can hold, since
// the reader refuses NaN and infinities before anything is converted.
Tensor finite_bf16_patterns() {
  std::vector<bf16_t> values;
  for (uint32_t b = 0; b < (1u << 16); ++b) {
    if ((b & 0x7F80u) != 0x7F80u) values.push_back(bf16_t{static_cast<uint16_t>(b)});
  }
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::BF16);
  std::copy(values.begin(), values.end(), t.data<bf16_t>());
  return t;
}

// Finite f32 values whose low halves round to bf16 every way: exact, below, at and above the
// tie, and up to the largest finite f32 (which rounds to bf16's infinity, as on the CPU).
Tensor finite_f32_patterns() {
  std::vector<float> values;
  for (uint32_t high = 0; high < (1u << 16); high += 3) {
    if ((high & 0x7F80u) == 0x7F80u) continue;
    for (uint32_t low : {0x0000u, 0x1234u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      values.push_back(std::bit_cast<float>((high << 16) | low));
    }
  }
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
}

// `staged` moved into a `dtype` tensor on the GPU and on the CPU: the same bits.
void check_moves_like_the_cpu(const Tensor& staged, DType dtype, bool pinned) {
  CAPTURE(dtype_name(staged.dtype()));
  CAPTURE(dtype_name(dtype));
  CAPTURE(pinned);
  HostStaging staging;
  const Tensor host = staging.take(staged.shape(), staged.dtype(), pinned);
  host.copy_from(staged);
  const Tensor on_gpu = Tensor::empty(staged.shape(), dtype, kLoadDevice);
  move_into(on_gpu, host);
  const Tensor on_cpu = Tensor::empty(staged.shape(), dtype);
  move_into(on_cpu, staged);
  CHECK(testing::bitwise_equal(on_gpu.to(Device::cpu()), on_cpu));
}

model::ModelArgs load_model_args() {
  return testing::small_model_args(
      {.dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 96, .vocab_size = 50});
}

// A model's parameters declared, for a load to fill (storage given by the caller).
struct DeclaredModel {
  std::unique_ptr<model::Transformer> model;
  std::vector<model::Parameter*> params;
};

DeclaredModel declare_model(const model::ModelArgs& args) {
  DeclaredModel d;
  d.model = std::make_unique<model::Transformer>(args, DType::F32);
  d.params = d.model->parameters();
  return d;
}

void whole_local_slice(const model::Parameter& p, const Tensor& local,
                       const std::function<void(const model::LocalRun&)>& visit) {
  model::for_each_local_run(p, 0, local.size(0), visit);
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: stored bytes converted on the device equal the CPU conversion bit for bit") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const Tensor bf16 = finite_bf16_patterns();
    const Tensor f32 = finite_f32_patterns();
    for (bool pinned : {false, true}) {
      check_moves_like_the_cpu(bf16, DType::F32, pinned);
      check_moves_like_the_cpu(bf16, DType::F64, pinned);
      check_moves_like_the_cpu(bf16, DType::BF16, pinned);
      check_moves_like_the_cpu(f32, DType::BF16, pinned);
      check_moves_like_the_cpu(f32, DType::F32, pinned);
      check_moves_like_the_cpu(f32, DType::F64, pinned);
    }
  }

  TEST_CASE("gpu: a Hugging Face folder loads onto the GPU as it loads onto the CPU") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const model::ModelArgs args = load_model_args();
    const std::string dir = testing::scratch_dir("hf_on_gpu");
    // The folder: a model's initial weights, exported in each dtype.
    DeclaredModel original = declare_model(args);
    for (model::Parameter* p : original.params) {
      model::allocate_parameter(*p);
      model::init_parameter(*p, 17);
    }
    const ParamRowReader rows_of = [&](const std::string& param, int64_t row_begin, int64_t rows,
                                       const Tensor& dst) {
      for (const model::Parameter* p : original.params) {
        if (p->name == param) {
          dst.copy_from(p->value.rows(row_begin, row_begin + rows).contiguous().view(dst.shape()));
        }
      }
    };
    for (DType stored : {DType::BF16, DType::F32}) {
      const std::string folder = dir + "/" + std::string(dtype_name(stored));
      export_hf_part(args, rows_of, folder, stored, 0, 1);
      finish_hf_export(args, folder, stored, 1);
      DeclaredModel on_cpu = declare_model(args);
      for (model::Parameter* p : on_cpu.params)
        p->value = Tensor::empty(p->local_shape(), DType::F32);
      load_hf_weights(folder, args, on_cpu.params, whole_local_slice);
      for (DType dtype : {DType::F32, DType::BF16}) {
        CAPTURE(dtype_name(stored));
        CAPTURE(dtype_name(dtype));
        DeclaredModel on_gpu = declare_model(args);
        for (model::Parameter* p : on_gpu.params) {
          p->value = Tensor::empty(p->local_shape(), dtype, kLoadDevice);
        }
        load_hf_weights(folder, args, on_gpu.params, whole_local_slice);
        for (size_t i = 0; i < on_cpu.params.size(); ++i) {
          // The CPU's f32 load, cast on the CPU as a CPU parameter of `dtype` would hold it.
          const Tensor expected = cast(on_cpu.params[i]->value, dtype);
          CHECK_MESSAGE(testing::bitwise_equal(on_gpu.params[i]->value.to(Device::cpu()), expected),
                        on_cpu.params[i]->name);
        }
      }
    }
  }
}
