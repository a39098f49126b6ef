#include "core/cuda/cudnn.h"

#include <array>
#include <mutex>
#include <sstream>

#include "core/check.h"
#include "core/cuda/cudnn_library.h"
#include "core/cuda/stream.h"

namespace titan::cuda {

// Named, not anonymous: these share a unity batch with cublaslt.cpp, whose helpers have the
// same kind of names.
namespace cudnn_detail {

std::mutex handles_mutex;

std::string last_error_string() {
  std::array<char, 4096> message{};
  cudnnGetLastErrorString(message.data(), message.size());
  return message.data();
}

const char* pointwise_name(cudnnPointwiseMode_t mode) {
  switch (mode) {
    case CUDNN_POINTWISE_ADD: return "add";
    case CUDNN_POINTWISE_SUB: return "sub";
    case CUDNN_POINTWISE_MUL: return "mul";
    case CUDNN_POINTWISE_DIV: return "div";
    case CUDNN_POINTWISE_EXP: return "exp";
    case CUDNN_POINTWISE_LOG: return "log";
    case CUDNN_POINTWISE_IDENTITY: return "identity";
    case CUDNN_POINTWISE_CMP_GE: return "cmp_ge";
    case CUDNN_POINTWISE_GEN_INDEX: return "gen_index";
    case CUDNN_POINTWISE_BINARY_SELECT: return "binary_select";
    default: return "pointwise";
  }
}

std::string dims_text(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

// The execution plan's and operation graph's handle attributes are deprecated in cuDNN 9.19's
// headers in favour of device properties, but cudnn-frontend still sets them, and they are what
// binds a plan to the handle it runs on.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

}  // namespace cudnn_detail

using cudnn_detail::dims_text;

void cudnn_check_failed(const char* call, cudnnStatus_t status, const char* file, int line) {
  throw Error(detail::concat(file, ":", line, ": ", call, " failed: ", cudnnGetErrorString(status),
                             " (", static_cast<int>(status),
                             "); cuDNN says: ", cudnn_detail::last_error_string()));
}

cudnnHandle_t cudnn_handle() {
  static auto* handles = new cudnnHandle_t[kMaxDevices]{};  // lives as long as the process
  const int device = current_device();
  TT_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " out of range");
  cudnnHandle_t handle = nullptr;
  {
    std::lock_guard lock(cudnn_detail::handles_mutex);
    if (handles[device] == nullptr) TT_CUDNN_CHECK(cudnnCreate(&handles[device]));
    handle = handles[device];
  }
  TT_CUDNN_CHECK(cudnnSetStream(handle, current_stream()));
  return handle;
}

const char* cudnn_type_name(cudnnDataType_t type) {
  switch (type) {
    case CUDNN_DATA_FLOAT: return "f32";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    case CUDNN_DATA_HALF: return "f16";
    case CUDNN_DATA_INT32: return "i32";
    case CUDNN_DATA_INT64: return "i64";
    case CUDNN_DATA_BOOLEAN: return "bool";
    default: return "?";
  }
}

// ---- CudnnDescriptor ---------------------------------------------------------------------------

CudnnDescriptor::CudnnDescriptor(cudnnBackendDescriptorType_t type) {
  TT_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc_));
}

CudnnDescriptor::~CudnnDescriptor() {
  if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
}

void CudnnDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                          int64_t count, const void* values) {
  const cudnnStatus_t status = cudnnBackendSetAttribute(desc_, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS) {
    cudnn_check_failed(detail::concat("cudnnBackendSetAttribute(attribute ", static_cast<int>(name),
                                      ", type ", static_cast<int>(type), ", count ", count, ")")
                           .c_str(),
                       status, __FILE__, __LINE__);
  }
}

void CudnnDescriptor::finalize() { TT_CUDNN_CHECK(cudnnBackendFinalize(desc_)); }

// ---- CudnnGraph: tensors -----------------------------------------------------------------------

size_t CudnnGraph::index(Uid t) const {
  TT_CHECK(t >= 1 && static_cast<size_t>(t) <= tensors_.size(), name_, ": no tensor ", t);
  return static_cast<size_t>(t - 1);
}

CudnnGraph::Uid CudnnGraph::add_tensor(TensorInfo info) {
  TT_CHECK(info.dims.size() == info.strides.size(), name_, ": tensor ", info.what, " has dims ",
           dims_text(info.dims), " but strides ", dims_text(info.strides));
  const Uid uid = static_cast<Uid>(tensors_.size()) + 1;
  // Every attribute cudnn-frontend's Tensor_v8 sets, in its order; virtual and by-value only
  // when true.
  CudnnDescriptor& d = info.desc;
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &info.type);
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(info.dims.size()),
        info.dims.data());
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(info.strides.size()),
        info.strides.data());
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &info.alignment);
  const bool yes = true;
  if (info.is_virtual) d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  if (info.by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  d.finalize();
  tensors_.push_back(std::move(info));
  return uid;
}

CudnnGraph::Uid CudnnGraph::tensor(const std::string& what, const Dims& dims, const Dims& strides,
                                   cudnnDataType_t type, int64_t alignment) {
  return add_tensor({what, dims, strides, type, false, false, alignment,
                     CudnnDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR)});
}

CudnnGraph::Uid CudnnGraph::virtual_tensor(const std::string& what, const Dims& dims,
                                           const Dims& strides, cudnnDataType_t type) {
  return add_tensor({what, dims, strides, type, true, false, 16,
                     CudnnDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR)});
}

CudnnGraph::ScalarValue& CudnnGraph::add_scalar(const std::string& what, cudnnDataType_t type,
                                                int rank) {
  const Dims ones(static_cast<size_t>(rank), 1);
  const Uid uid = add_tensor(
      {what, ones, ones, type, false, true, 16, CudnnDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR)});
  ScalarValue& value = scalars_.emplace_back();
  scalar_pointers_.emplace_back(uid, &value);
  return value;
}

CudnnGraph::Uid CudnnGraph::scalar(const std::string& what, float value, int rank) {
  add_scalar(what, CUDNN_DATA_FLOAT, rank).f = value;
  return scalar_pointers_.back().first;
}

CudnnGraph::Uid CudnnGraph::scalar(const std::string& what, int32_t value, int rank) {
  add_scalar(what, CUDNN_DATA_INT32, rank).i = value;
  return scalar_pointers_.back().first;
}

// ---- CudnnGraph: operations --------------------------------------------------------------------

void CudnnGraph::add_operation(std::string line, CudnnDescriptor op) {
  op.finalize();
  ops_.push_back(std::move(op));
  op_lines_.push_back(std::move(line));
}

void CudnnGraph::pointwise(const std::string& what, cudnnPointwiseMode_t mode, cudnnDataType_t math,
                           Uid x, Uid y, Uid b, Uid t, int64_t axis) {
  CudnnDescriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
  if (mode == CUDNN_POINTWISE_GEN_INDEX) {
    pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  }
  pw.finalize();
  CudnnDescriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get());
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, desc(x));
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, desc(y));
  if (b > 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, desc(b));
  if (t > 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, desc(t));
  const float one = 1.0f;
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  std::string line = detail::concat(what, ": ", cudnn_detail::pointwise_name(mode), " in ",
                                    cudnn_type_name(math), " of ", x);
  if (b > 0) line += detail::concat(", ", b);
  if (t > 0) line += detail::concat(", ", t);
  if (axis >= 0) line += detail::concat(" along axis ", axis);
  line += detail::concat(" -> ", y);
  op_descs_.push_back(std::move(pw));
  add_operation(std::move(line), std::move(op));
}

void CudnnGraph::reduction(const std::string& what, cudnnReduceTensorOp_t reduce, Uid x, Uid y) {
  CudnnDescriptor rd(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  rd.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math);
  rd.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
  rd.finalize();
  CudnnDescriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd.get());
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, desc(x));
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, desc(y));
  op_descs_.push_back(std::move(rd));
  add_operation(detail::concat(what, ": reduce ", reduce == CUDNN_REDUCE_TENSOR_MAX ? "max" : "add",
                               " in f32 of ", x, " -> ", y),
                std::move(op));
}

void CudnnGraph::matmul(const std::string& what, Uid a, Uid b, Uid c) {
  CudnnDescriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math);
  mm.finalize();
  CudnnDescriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, desc(a));
  op.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, desc(b));
  op.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, desc(c));
  op.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get());
  op_descs_.push_back(std::move(mm));
  add_operation(detail::concat(what, ": matmul in f32 of ", a, ", ", b, " -> ", c), std::move(op));
}

void CudnnGraph::reshape(const std::string& what, Uid x, Uid y) {
  CudnnDescriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, desc(x));
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, desc(y));
  add_operation(detail::concat(what, ": reshape ", x, " -> ", y), std::move(op));
}

// ---- CudnnGraph: plan and execution ------------------------------------------------------------

std::string CudnnGraph::describe() const {
  std::ostringstream os;
  os << "graph " << name_ << ":\n";
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorInfo& t = tensors_[i];
    os << "  tensor " << i + 1 << " " << t.what << ": " << cudnn_type_name(t.type) << " "
       << dims_text(t.dims) << " strides " << dims_text(t.strides)
       << (t.is_virtual ? " virtual" : "") << (t.by_value ? " by value" : "");
    if (!t.is_virtual && !t.by_value) os << " aligned " << t.alignment;
    os << "\n";
  }
  for (const std::string& line : op_lines_) os << "  op " << line << "\n";
  return os.str();
}

void CudnnGraph::build(cudnnHandle_t handle) {
  const auto fail = [&](const std::string& what) {
    throw Error(detail::concat("cuDNN graph ", name_, ": ", what, "\n", describe()));
  };
  std::vector<cudnnBackendDescriptor_t> op_list;
  for (const CudnnDescriptor& op : ops_) op_list.push_back(op.get());
  CudnnDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(cudnn_detail::kGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            static_cast<int64_t>(op_list.size()), op_list.data());
  if (const cudnnStatus_t s = cudnnBackendFinalize(graph.get()); s != CUDNN_STATUS_SUCCESS) {
    fail(detail::concat("the operation graph does not finalize: ", cudnnGetErrorString(s),
                        "; cuDNN says: ", cudnn_detail::last_error_string()));
  }

  std::string refusals;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "A" : "fallback";
    CudnnDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.get());
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (const cudnnStatus_t s = cudnnBackendFinalize(heur.get()); s != CUDNN_STATUS_SUCCESS) {
      refusals += detail::concat("\n  heuristics mode ", mode_name, ": ", cudnnGetErrorString(s),
                                 "; cuDNN says: ", cudnn_detail::last_error_string());
      continue;
    }
    int64_t count = 0;
    TT_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    if (count == 0) {
      refusals += detail::concat("\n  heuristics mode ", mode_name, ": no engine config");
      continue;
    }
    std::vector<CudnnDescriptor> configs;
    std::vector<cudnnBackendDescriptor_t> config_list;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      config_list.push_back(configs.back().get());
    }
    int64_t returned = 0;
    TT_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                            config_list.data()));
    for (int64_t i = 0; i < returned; ++i) {
      CudnnDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(cudnn_detail::kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config_list[static_cast<size_t>(i)]);
      if (const cudnnStatus_t s = cudnnBackendFinalize(plan.get()); s != CUDNN_STATUS_SUCCESS) {
        refusals +=
            detail::concat("\n  mode ", mode_name, " config ", i, ": ", cudnnGetErrorString(s),
                           "; cuDNN says: ", cudnn_detail::last_error_string());
        continue;
      }
      int64_t workspace = 0, n = 0;
      TT_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &n, &workspace));
      // The engine's global index names it in cuDNN's logs; reading it is best effort.
      int64_t engine_index = -1;
      CudnnDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t engine_desc = engine.get();
      if (cudnnBackendGetAttribute(config_list[static_cast<size_t>(i)], CUDNN_ATTR_ENGINECFG_ENGINE,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                   &engine_desc) == CUDNN_STATUS_SUCCESS) {
        cudnnBackendGetAttribute(engine_desc, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                 &n, &engine_index);
      }
      plan_note_ = detail::concat("engine ", engine_index, ", config ", i, " of ", returned,
                                  " (heuristics mode ", mode_name, "), workspace ", workspace, " B",
                                  refusals.empty() ? "" : "; refused before it:", refusals);
      workspace_bytes_ = workspace;
      plan_ = plan.get();
      keep_.push_back(std::move(graph));
      keep_.push_back(std::move(heur));
      for (CudnnDescriptor& c : configs) keep_.push_back(std::move(c));
      keep_.push_back(std::move(plan));
      return;
    }
  }
  fail(detail::concat("no engine of cuDNN ", cudnn_version_text(cudnnGetVersion()),
                      " takes it:", refusals,
                      "\n(CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr makes cuDNN say why)"));
}

void CudnnGraph::execute(cudnnHandle_t handle, const std::vector<std::pair<Uid, void*>>& pointers,
                         void* workspace) const {
  TT_CHECK(plan_ != nullptr, name_, ": execute before build");
  std::vector<int64_t> uids;
  std::vector<void*> data;
  for (const auto& [uid, ptr] : pointers) {
    const TensorInfo& t = tensors_.at(index(uid));
    TT_CHECK(!t.is_virtual && !t.by_value, name_, ": tensor ", uid, " (", t.what,
             ") is virtual or by value and takes no pointer");
    TT_CHECK(reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(t.alignment) == 0, name_,
             ": tensor ", uid, " (", t.what, ") at ", ptr, " is not aligned to ", t.alignment,
             " bytes as its graph was built for");
    uids.push_back(uid);
    data.push_back(ptr);
  }
  for (const auto& [uid, ptr] : scalar_pointers_) {
    uids.push_back(uid);
    data.push_back(ptr);
  }
  CudnnDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
           uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(data.size()), data.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  const cudnnStatus_t s = cudnnBackendExecute(handle, plan_, pack.get());
  if (s != CUDNN_STATUS_SUCCESS) {
    throw Error(detail::concat(
        "cuDNN graph ", name_, ": cudnnBackendExecute failed: ", cudnnGetErrorString(s),
        "; cuDNN says: ", cudnn_detail::last_error_string(), "; plan: ", plan_note_));
  }
}

}  // namespace titan::cuda
