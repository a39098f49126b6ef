// One table of attention cases, run against every backend present: the CPU path in the fast
// tier (test/model/test_attention_cases.cpp), the GPU backends under the gpu label
// (test/gpu/test_attention_cases.cpp). Each case's reference is the plain CPU twin in f64 on
// the same bf16-representable inputs, so one relative L2 bound per backend (below, the only
// place it is written) covers forward and backward alike.
//
// The cases: MHA and GQA, head dims 64 and 128, lengths off every tile size (the CPU tiles and
// the CUDA kernels' 64 and 128), under the three masks a rank's attention meets: causal over
// the sequence, block_causal (documents), and none (a K/V block wholly before its queries, as
// context parallelism's ring hands the block op).
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/cast.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_backend.h"
#include "model/ops/attention/attention_block.h"
#include "support/tensor_testing.h"

namespace titan::testing {

enum class CaseMask { Causal, BlockCausal, None };

struct AttentionCase {
  const char* name;
  int64_t B, H, Hkv, Dh;
  int64_t S_q, S_kv;  // equal unless the mask is none
  CaseMask mask;
  std::vector<std::vector<int64_t>> documents;  // block_causal: each sequence's lengths
};

inline const std::vector<AttentionCase>& attention_cases() {
  static const std::vector<AttentionCase> cases = {
      {"MHA causal Dh 64 S 130", 2, 4, 4, 64, 130, 130, CaseMask::Causal, {}},
      {"GQA causal Dh 128 S 200", 1, 8, 2, 128, 200, 200, CaseMask::Causal, {}},
      {"GQA block_causal Dh 64 S 150", 2, 4, 2, 64, 150, 150, CaseMask::BlockCausal,
       {{40, 1, 109}, {150}}},
      {"MHA block_causal Dh 128 S 97", 1, 2, 2, 128, 97, 97, CaseMask::BlockCausal, {{30, 67}}},
      {"GQA none Dh 64 S_q 70 S_kv 90", 2, 4, 1, 64, 70, 90, CaseMask::None, {}},
      {"MHA none Dh 128 S_q 130 S_kv 65", 1, 2, 2, 128, 130, 65, CaseMask::None, {}},
  };
  return cases;
}

// A backend under test: where it runs, in which dtypes, and how close it must come.
struct AttentionRunner {
  std::string name;
  model::AttentionBackend backend = model::AttentionBackend::Native;
  Device device = Device::cpu();
  DType activations = DType::F32;  // qkv, q, k, v, out, dout, dqkv
  DType accumulators = DType::F32;  // lse, a block's out partial and dq, dk, dv
  double tolerance = 0;             // relative L2 of every output against the f64 twin
  bool runs_documents = true;       // cudnn and hopper refuse block_causal
};

// The CPU path (the tiled kernel) in f32.
inline AttentionRunner cpu_attention_runner() {
  return {"cpu", model::AttentionBackend::Native, Device::cpu(), DType::F32, DType::F32, 1e-5,
          true};
}

// The GPU backends this build and device run, each named once; one line for each that is not.
inline std::vector<AttentionRunner> gpu_attention_runners() {
  using model::AttentionBackend;
  const Device cuda = Device::cuda(0);
  // bf16 storage lands near 4e-3 (tensor_testing.h).
  constexpr double kBf16Tolerance = 1e-2;
  std::vector<AttentionRunner> runners = {
      {"native", AttentionBackend::Native, cuda, DType::BF16, DType::F32, kBf16Tolerance, true}};
  for (AttentionBackend b : {AttentionBackend::Cudnn, AttentionBackend::Hopper}) {
    const model::AttentionBackendChoice choice =
        model::choose_attention_backend(b, {1, 256, 2, 1, 64});
    const std::string name(model::kAttentionBackends.name(b));
    if (!choice.error.empty()) {
      std::printf("-- attention backend %s not run here: %s\n", name.c_str(),
                  choice.error.c_str());
      continue;
    }
    runners.push_back({name, b, cuda, DType::BF16, DType::F32, kBf16Tolerance, false});
  }
  return runners;
}

namespace attention_case_detail {

inline Tensor on(const Tensor& values, DType dtype, Device device) {
  return cast(values, dtype).to(device);
}

inline void check_close(const char* what, const Tensor& actual, const Tensor& expected,
                        const AttentionRunner& r) {
  const double error = relative_l2_error(actual, expected);
  CAPTURE(what);
  CHECK(error <= r.tolerance);
}

// Causal or block_causal over the whole sequence: attention_forward and attention_backward.
inline void check_full(const AttentionCase& c, const AttentionRunner& r) {
  const model::AttentionShape ref_shape{c.B, c.S_q, c.H, c.Hkv, c.Dh};
  model::AttentionShape shape = ref_shape;
  shape.backend = r.backend;
  const int64_t T = c.B * c.S_q, row = (c.H + 2 * c.Hkv) * c.Dh, q_cols = c.H * c.Dh;
  const Tensor qkv = bf16_values(random_tensor({T, row}, DType::F32, 1, 2.0));
  const Tensor dout = bf16_values(random_tensor({T, q_cols}, DType::F32, 2, 1.0));
  const Tensor docs =
      c.mask == CaseMask::BlockCausal ? document_starts_of(c.documents, c.S_q) : Tensor();

  const Tensor qkv64 = cast(qkv, DType::F64);
  Tensor out_ref = Tensor::empty({T, q_cols}, DType::F64);
  Tensor lse_ref = Tensor::empty({c.B, c.H, c.S_q}, DType::F64);
  Tensor dqkv_ref = Tensor::empty({T, row}, DType::F64);
  model::attention_forward_plain(out_ref, lse_ref, qkv64, ref_shape, docs);
  model::attention_backward_plain(dqkv_ref, cast(dout, DType::F64), qkv64, out_ref, lse_ref,
                                  ref_shape, docs);

  Tensor out = Tensor::empty({T, q_cols}, r.activations, r.device);
  Tensor lse = Tensor::empty({c.B, c.H, c.S_q}, r.accumulators, r.device);
  Tensor dqkv = Tensor::empty({T, row}, r.activations, r.device);
  const Tensor qkv_d = on(qkv, r.activations, r.device);
  const Tensor docs_d = docs.defined() ? docs.to(r.device) : Tensor();
  model::attention_forward(out, lse, qkv_d, shape, docs_d);
  model::attention_backward(dqkv, on(dout, r.activations, r.device), qkv_d, out, lse, shape,
                            docs_d);
  check_close("out", out, out_ref, r);
  check_close("lse", lse, lse_ref, r);
  check_close("dqkv", dqkv, dqkv_ref, r);
}

// No mask: the block op on keys wholly before the queries.
inline void check_unmasked_block(const AttentionCase& c, const AttentionRunner& r) {
  const model::AttentionBlockShape ref_shape{c.B, c.H, c.Hkv, c.Dh, c.S_q, c.S_kv, c.S_kv, 0};
  model::AttentionBlockShape shape = ref_shape;
  shape.backend = r.backend;
  const int64_t nq = c.H * c.Dh, nkv = c.Hkv * c.Dh;
  const Tensor q = bf16_values(random_tensor({c.B, c.S_q, nq}, DType::F32, 3, 2.0));
  const Tensor k = bf16_values(random_tensor({c.B, c.S_kv, nkv}, DType::F32, 4, 2.0));
  const Tensor v = bf16_values(random_tensor({c.B, c.S_kv, nkv}, DType::F32, 5, 2.0));
  const Tensor dout = bf16_values(random_tensor({c.B, c.S_q, nq}, DType::F32, 6, 1.0));

  const Tensor q64 = cast(q, DType::F64), k64 = cast(k, DType::F64), v64 = cast(v, DType::F64);
  Tensor out_ref = Tensor::empty({c.B, c.S_q, nq}, DType::F64);
  Tensor lse_ref = Tensor::empty({c.B, c.H, c.S_q}, DType::F64);
  model::attention_block_forward_plain(out_ref, lse_ref, q64, k64, v64, ref_shape);
  Tensor dq_ref = Tensor::zeros(q.shape(), DType::F64), dk_ref = Tensor::zeros(k.shape(), DType::F64);
  Tensor dv_ref = Tensor::zeros(v.shape(), DType::F64);
  model::attention_block_backward_plain(dq_ref, dk_ref, dv_ref, cast(dout, DType::F64), q64, k64,
                                        v64, out_ref, lse_ref, ref_shape);

  const DType act = r.activations, acc = r.accumulators;
  const Tensor q_d = on(q, act, r.device), k_d = on(k, act, r.device), v_d = on(v, act, r.device);
  Tensor out = Tensor::empty({c.B, c.S_q, nq}, acc, r.device);
  Tensor lse = Tensor::empty({c.B, c.H, c.S_q}, acc, r.device);
  model::attention_block_forward(out, lse, q_d, k_d, v_d, shape);
  // The backward reads out as the model keeps it, in the activations' dtype.
  const Tensor out_act = on(out.to(Device::cpu()), act, r.device);
  Tensor dq = Tensor::zeros(q.shape(), acc, r.device), dk = Tensor::zeros(k.shape(), acc, r.device);
  Tensor dv = Tensor::zeros(v.shape(), acc, r.device);
  model::attention_block_backward(dq, dk, dv, on(dout, act, r.device), q_d, k_d, v_d, out_act, lse,
                                  shape);
  check_close("out", out, out_ref, r);
  check_close("lse", lse, lse_ref, r);
  check_close("dq", dq, dq_ref, r);
  check_close("dk", dk, dk_ref, r);
  check_close("dv", dv, dv_ref, r);
}

}  // namespace attention_case_detail

// Every case of the table on `r`, forward and backward; a case the backend refuses by design
// (documents on cudnn or hopper) is said in one line and left out.
inline void check_attention_cases(const AttentionRunner& r) {
  for (const AttentionCase& c : attention_cases()) {
    CAPTURE(r.name);
    CAPTURE(c.name);
    if (c.mask == CaseMask::BlockCausal && !r.runs_documents) {
      std::printf("-- %s: %s not run (%s runs documents on the native kernels)\n", r.name.c_str(),
                  c.name, r.name.c_str());
      continue;
    }
    if (c.mask == CaseMask::None) {
      attention_case_detail::check_unmasked_block(c, r);
    } else {
      attention_case_detail::check_full(c, r);
    }
  }
}

}  // namespace titan::testing
