// cuDNN's graph (backend) API, as the attention's cuDNN backend uses it: one handle per device,
// a check on every call, and CudnnGraph, which holds one operation graph — its tensors, its
// operations, the execution plan of the first engine that takes it — built once and run many
// times. It is a thin layer over cudnn_graph.h's C API (cudnn-frontend is not used): each
// method sets the attributes cudnn-frontend's graph nodes set for the same operation.
//
// Diagnostics come first, because a graph is only ever checked on a GPU: every failing call
// throws an Error naming the call, file:line, cuDNN's status and its own last error message,
// and the graph (its name and shape) being built or run; a graph that no engine takes adds the
// whole graph, tensor by tensor and operation by operation, and each engine's refusal.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace titan::cuda {

// TT_CUDNN_CHECK(call): throws an Error naming the call, the status and cuDNN's message.
[[noreturn]] void cudnn_check_failed(const char* call, cudnnStatus_t status, const char* file,
                                     int line);
#define TT_CUDNN_CHECK(call)                                                         \
  do {                                                                               \
    cudnnStatus_t tt_cudnn_status = (call);                                          \
    if (tt_cudnn_status != CUDNN_STATUS_SUCCESS) [[unlikely]]                        \
      ::titan::cuda::cudnn_check_failed(#call, tt_cudnn_status, __FILE__, __LINE__); \
  } while (0)

// The handle of the current device, bound to current_stream(). Needs a device.
cudnnHandle_t cudnn_handle();

// An owned backend descriptor of one type.
class CudnnDescriptor {
 public:
  explicit CudnnDescriptor(cudnnBackendDescriptorType_t type);
  ~CudnnDescriptor();
  CudnnDescriptor(CudnnDescriptor&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}
  CudnnDescriptor& operator=(CudnnDescriptor&&) = delete;
  CudnnDescriptor(const CudnnDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values);
  void set(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t desc) {
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc);
  }
  void finalize();

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// One operation graph and its plan. Tensors are numbered by the graph (their cuDNN unique ids);
// virtual ones live only inside the fused kernel, by-value ones are host scalars the graph keeps.
class CudnnGraph {
 public:
  using Uid = int64_t;
  using Dims = std::vector<int64_t>;

  // `name` says which graph and shape, for every error about it ("sdpa forward causal B 2 …").
  explicit CudnnGraph(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  // A tensor in device memory, bound at execute(); `alignment` is its pointer's, in bytes.
  Uid tensor(const std::string& what, const Dims& dims, const Dims& strides, cudnnDataType_t type,
             int64_t alignment = 16);
  // A tensor only the fused kernel holds.
  Uid virtual_tensor(const std::string& what, const Dims& dims, const Dims& strides,
                     cudnnDataType_t type);
  // A host scalar passed by value, of `rank` dims of 1 (the rank of the tensors it meets).
  Uid scalar(const std::string& what, float value, int rank);
  Uid scalar(const std::string& what, int32_t value, int rank);
  const Dims& dims(Uid t) const { return tensors_.at(index(t)).dims; }
  const Dims& strides(Uid t) const { return tensors_.at(index(t)).strides; }

  // y = mode(x[, b[, t]]) computed in `math`. `axis` is GEN_INDEX's.
  void pointwise(const std::string& what, cudnnPointwiseMode_t mode, cudnnDataType_t math, Uid x,
                 Uid y, Uid b = -1, Uid t = -1, int64_t axis = -1);
  // y = op over the dims where y has extent 1, in f32.
  void reduction(const std::string& what, cudnnReduceTensorOp_t op, Uid x, Uid y);
  // c = a·b over the last two dims, batched over the others, in f32. A batch dim of b may divide
  // a's (b's kv heads under a's query heads: grouped-query attention).
  void matmul(const std::string& what, Uid a, Uid b, Uid c);
  // y = x seen with y's dims and strides.
  void reshape(const std::string& what, Uid x, Uid y);

  // The operation graph, cuDNN's heuristics (mode A, then fallback) and the first engine config
  // whose plan finalizes. Throws naming the graph, what each engine said, and the whole graph.
  void build(cudnnHandle_t handle);
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // Engines tried and the one chosen, for logs: "engine 8 of 3 configs (heuristics mode A)".
  const std::string& plan_note() const { return plan_note_; }

  // Runs the plan on the handle's stream with `pointers` bound to the non-virtual, non-scalar
  // tensors (every one of them, by uid) and `workspace` of workspace_bytes().
  void execute(cudnnHandle_t handle, const std::vector<std::pair<Uid, void*>>& pointers,
               void* workspace) const;

  // The tensors and operations, one a line, for an error.
  std::string describe() const;

 private:
  struct TensorInfo {
    std::string what;
    Dims dims, strides;
    cudnnDataType_t type;
    bool is_virtual = false;
    bool by_value = false;
    int64_t alignment = 16;
    CudnnDescriptor desc;
  };
  union ScalarValue {
    float f;
    int32_t i;
  };

  Uid add_tensor(TensorInfo info);
  // A by-value tensor and the host value its pointer in the variant pack points at.
  ScalarValue& add_scalar(const std::string& what, cudnnDataType_t type, int rank);
  size_t index(Uid t) const;
  cudnnBackendDescriptor_t desc(Uid t) const { return tensors_.at(index(t)).desc.get(); }
  void add_operation(std::string line, CudnnDescriptor op);

  std::string name_;
  std::deque<TensorInfo> tensors_;   // uid = index + 1
  std::deque<ScalarValue> scalars_;  // stable addresses: the variant pack points at them
  std::vector<std::pair<Uid, void*>> scalar_pointers_;
  std::vector<CudnnDescriptor> op_descs_;  // the pointwise, reduction and matmul descriptors
  std::vector<CudnnDescriptor> ops_;
  std::vector<std::string> op_lines_;
  std::vector<CudnnDescriptor> keep_;  // op graph, heuristics, engine configs, plan
  cudnnBackendDescriptor_t plan_ = nullptr;
  int64_t workspace_bytes_ = 0;
  std::string plan_note_;
};

// "bf16", "f32", "i32", "bool" for an error.
const char* cudnn_type_name(cudnnDataType_t type);

}  // namespace titan::cuda
