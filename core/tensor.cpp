#include "core/tensor.h"

#include <cstring>

#include "core/allocator.h"
#include "core/cuda/backend.h"

namespace titan {

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), tag_(current_memory_tag()) {
  data_ = allocator_for(device).allocate(nbytes, tag_);
}

Storage::~Storage() { allocator_for(device_).deallocate(data_, nbytes_, tag_); }

namespace {

Shape contiguous_strides(const Shape& shape) {
  Shape strides = shape;
  int64_t stride = 1;
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

// Copies a strided tensor of `elem` bytes per element into contiguous `dst`, one innermost row
// at a time.
void gather_strided(char* dst, const char* src, const Shape& shape, const Shape& strides,
                    size_t elem) {
  int nd = shape.ndim();
  if (shape.numel() == 0) return;
  if (nd == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  std::vector<int64_t> index(nd, 0);
  int64_t inner = shape[nd - 1];
  int64_t inner_stride = strides[nd - 1];
  int64_t outer = shape.numel() / inner;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t offset = 0;
    for (int d = 0; d < nd - 1; ++d) offset += index[d] * strides[d];
    const char* row = src + offset * static_cast<int64_t>(elem);
    if (inner_stride == 1) {
      std::memcpy(dst, row, inner * elem);
      dst += inner * elem;
    } else {
      for (int64_t i = 0; i < inner; ++i, dst += elem) {
        std::memcpy(dst, row + i * inner_stride * static_cast<int64_t>(elem), elem);
      }
    }
    for (int d = nd - 2; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.storage_ =
      std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

int64_t Tensor::size(int dim) const {
  int d = dim < 0 ? dim + ndim() : dim;
  TT_CHECK(d >= 0 && d < ndim(), "dim ", dim, " out of range for tensor ", shape_);
  return shape_[d];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

void* Tensor::raw_data() const {
  TT_CHECK(defined(), "data of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(const Shape& shape) const {
  TT_CHECK(is_contiguous(), "view ", shape, " of a non-contiguous tensor ", *this);
  TT_CHECK(shape.numel() == numel(), "view ", shape, " of ", *this, ": element counts differ");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
  int d = dim < 0 ? dim + ndim() : dim;
  TT_CHECK(d >= 0 && d < ndim(), "narrow: dim ", dim, " out of range for ", *this);
  TT_CHECK(start >= 0 && length >= 0 && start + length <= shape_[d], "narrow of ", *this,
           " along dim ", d, " to [", start, ", ", start + length, ") is out of range");
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = length;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::to(Device device) const {
  if (this->device() == device) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) const {
  TT_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: ", src, " into ", *this);
  if (device().is_cuda() || src.device().is_cuda()) return cuda_backend::copy(*this, src);
  TT_CHECK(is_contiguous(), "copy_from into a non-contiguous tensor ", *this);
  gather_strided(static_cast<char*>(raw_data()), static_cast<const char*>(src.raw_data()),
                 src.shape_, src.strides_, dtype_size(dtype_));
}

void Tensor::zero_() const {
  if (device().is_cuda()) return cuda_backend::zero(*this);
  TT_CHECK(is_contiguous(), "zero_ of a non-contiguous tensor ", *this);
  std::memset(raw_data(), 0, nbytes());
}

void Tensor::fill_(double value) const {
  if (device().is_cuda()) return cuda_backend::fill(*this, value);
  TT_CHECK(is_contiguous(), "fill_ of a non-contiguous tensor ", *this);
  auto fill = [&](auto* p) {
    std::fill(p, p + numel(), static_cast<std::remove_pointer_t<decltype(p)>>(value));
  };
  switch (dtype_) {
    case DType::F32: fill(data<float>()); break;
    case DType::F64: fill(data<double>()); break;
    case DType::I32: fill(data<int32_t>()); break;
    case DType::I64: fill(data<int64_t>()); break;
    case DType::U8: fill(data<uint8_t>()); break;
    default: TT_CHECK(false, "fill_ of a ", dtype_name(dtype_), " tensor is not supported");
  }
}

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) {
  if (!tensor.defined()) return os << "undefined";
  return os << dtype_name(tensor.dtype()) << tensor.shape();
}

void check_tensor(const Tensor& t, const char* what, const Shape& shape, DType dtype) {
  TT_CHECK(t.defined(), what, ": tensor is undefined; expected ", dtype_name(dtype), shape);
  TT_CHECK(t.shape() == shape && t.dtype() == dtype, what, ": expected ", dtype_name(dtype), shape,
           ", got ", t);
  TT_CHECK(t.is_contiguous(), what, ": expected a contiguous tensor, got a strided view of ", t);
}

}  // namespace titan
