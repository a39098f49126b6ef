// Tensor: a typed, shaped view of bytes on one device.
//
// A Tensor is a cheap handle (like at::Tensor): copying it shares the storage, and views
// (view, narrow, rows) share it too. Shapes and strides count elements. Ops in this project
// work on contiguous tensors and say so when they get anything else; views exist so that a
// fused buffer (wqkv's output, a sharded parameter's slice, a micro-batch of a batch) can be
// handed to an op without a copy.
//
// Constness is that of the handle, not of the bytes: data<T>() on a const Tensor& returns a
// mutable pointer, because an op's output is routinely passed as `const Tensor&`.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/memory_tag.h"
#include "core/shape.h"

namespace titan {

// Bytes owned by one allocation. Freed (and counted free) when the last Tensor drops it.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  MemoryTag tag() const { return tag_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  MemoryTag tag_;  // what the bytes are for (core/memory_tag.h), as counted by the allocator
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds nothing

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A CPU tensor holding `values` (tests and small tables).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  const Shape& strides() const { return strides_; }
  bool is_contiguous() const;

  void* raw_data() const;
  // The same view of the same storage (offset, shape, strides and dtype), as PyTorch's
  // is_set_to asks: whether two handles are one tensor, never decided by comparing addresses,
  // which a freed and reused block or a view of another shape would satisfy.
  bool is_same(const Tensor& other) const {
    return storage_ == other.storage_ && offset_ == other.offset_ && shape_ == other.shape_ &&
           strides_ == other.strides_ && dtype_ == other.dtype_;
  }
  template <class T>
  T* data() const {
    TT_CHECK(dtype_of<T>() == dtype_, "tensor ", dtype_name(dtype_), shape_, " read as ",
             dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw_data());
  }

  // Views sharing this tensor's storage.
  Tensor view(const Shape& shape) const;  // same numel; needs a contiguous tensor
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  Tensor rows(int64_t start, int64_t end) const { return narrow(0, start, end - start); }

  // Copies.
  Tensor clone() const;                     // contiguous deep copy on the same device
  Tensor contiguous() const;                // this tensor if already contiguous, else clone()
  Tensor to(Device device) const;           // this tensor if already there, else a copy
  void copy_from(const Tensor& src) const;  // same shape and dtype, any pair of devices
  void zero_() const;
  void fill_(double value) const;  // f32, f64, i32, i64, u8 (and bf16 on CUDA)

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  Shape strides_;  // in elements
  DType dtype_ = DType::F32;
};

// "f32[4, 256]" for error messages.
std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

// Throws an Error naming `what` unless `t` has exactly `shape` and `dtype`.
void check_tensor(const Tensor& t, const char* what, const Shape& shape, DType dtype);

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  TT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
           " values for shape ", shape);
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace titan
