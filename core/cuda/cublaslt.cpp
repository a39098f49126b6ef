#include "core/cuda/cublaslt.h"

#include <mutex>
#include <unordered_map>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"

namespace titan::cuda {

namespace {

// Hopper's recommended cuBLASLt workspace (NVIDIA's cuBLAS docs; TransformerEngine uses 32 MiB).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t h = 0;
    for (int64_t field : key.fields) h = h * 1000003u ^ std::hash<int64_t>{}(field);
    return h;
  }
};

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  Workspace workspace;
  std::unordered_map<PlanKey, std::unique_ptr<MatmulPlan>, PlanKeyHash> plans;
};

// Lives as long as the process (handles may be in use during static destruction).
DeviceState& state(int device) {
  static auto* states = new DeviceState[kMaxDevices];
  TT_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " out of range");
  return states[device];
}

std::mutex mutex;

}  // namespace

void cublas_check_failed(const char* call, int status, const char* file, int line) {
  throw Error(detail::concat(file, ":", line, ": ", call, " failed: ",
                             cublasLtGetStatusName(static_cast<cublasStatus_t>(status)), " (",
                             cublasLtGetStatusString(static_cast<cublasStatus_t>(status)), ")"));
}

cublasLtHandle_t cublaslt_handle() {
  std::lock_guard lock(mutex);
  DeviceState& s = state(current_device());
  if (s.handle == nullptr) TT_CUBLAS_CHECK(cublasLtCreate(&s.handle));
  return s.handle;
}

Workspace cublaslt_workspace() {
  std::lock_guard lock(mutex);
  DeviceState& s = state(current_device());
  if (s.workspace.ptr == nullptr) {
    TT_CUDA_CHECK(cudaMalloc(&s.workspace.ptr, kWorkspaceBytes));
    s.workspace.bytes = kWorkspaceBytes;
  }
  return s.workspace;
}

MatmulPlan::~MatmulPlan() {
  for (cublasLtMatrixLayout_t layout : {a, b, c, d}) {
    if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
  }
  if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
}

uint32_t pointer_alignment(const void* ptr) {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

void choose_algorithm(MatmulPlan& plan, const std::string& problem, OperandAlignment alignment) {
  Workspace workspace = cublaslt_workspace();
  cublasLtMatmulPreference_t preference = nullptr;
  TT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  auto set = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
    TT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
  };
  set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace.bytes);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment.a);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment.b);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment.c);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment.d);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      cublaslt_handle(), plan.desc, plan.a, plan.b, plan.c, plan.d, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    throw Error(
        detail::concat("cuBLASLt has no algorithm for ", problem,
                       " (heuristic: ", cublasLtGetStatusName(status), ", ", found,
                       " results); check the device's compute capability (FP8 needs sm_89+, "
                       "block scaling sm_90+) and that dims and leading dims are multiples of 16"));
  }
  plan.algo = result.algo;
}

MatmulPlan* find_plan(const PlanKey& key) {
  std::lock_guard lock(mutex);
  auto& plans = state(current_device()).plans;
  auto it = plans.find(key);
  return it == plans.end() ? nullptr : it->second.get();
}

MatmulPlan& insert_plan(const PlanKey& key, std::unique_ptr<MatmulPlan> plan) {
  std::lock_guard lock(mutex);
  auto& slot = state(current_device()).plans[key];
  slot = std::move(plan);
  return *slot;
}

cublasLtMatrixLayout_t row_major_layout(cudaDataType_t type, int64_t rows, int64_t cols,
                                        int64_t ld) {
  // Row-major [rows, cols] with row stride ld is column-major [cols, rows] with leading dim ld.
  cublasLtMatrixLayout_t layout = nullptr;
  TT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(cols),
                                             static_cast<uint64_t>(rows), ld));
  return layout;
}

}  // namespace titan::cuda
