// Tensor shapes, printed the way this project writes them in comments and errors: [B, S, D].
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>

namespace titan {

class Shape {
 public:
  static constexpr int kMaxDims = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int d) const { return dims_[d]; }
  int64_t& operator[](int d) { return dims_[d]; }
  int64_t numel() const;
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }
  void push_back(int64_t dim);
  std::string str() const;  // "[4, 256, 256]"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& shape);

}  // namespace titan
