#include "model/parameter.h"

#include "core/dispatch.h"
#include "core/rng.h"

namespace titan::model {

Parameter declare_parameter(std::string name, const Shape& shape, InitSpec init, DType dtype) {
  std::vector<ParamPart> parts = {{name, shape[0], init}};
  Parameter p;
  p.name = std::move(name);
  p.shape = shape;
  p.dtype = dtype;
  p.parts = std::move(parts);
  return p;
}

Parameter declare_fused_parameter(std::string name, std::vector<ParamPart> parts, int64_t cols,
                                  DType dtype) {
  int64_t rows = 0;
  for (const ParamPart& part : parts) rows += part.rows;
  Parameter p;
  p.name = std::move(name);
  p.shape = Shape{rows, cols};
  p.dtype = dtype;
  p.parts = std::move(parts);
  return p;
}

void allocate_parameter(Parameter& param, Device device) {
  param.value = Tensor::empty(param.shape, param.dtype, device);
  param.grad = Tensor::zeros(param.shape, param.dtype, device);
}

void init_part_rows(const Tensor& dst, const ParamPart& part, int64_t cols, int64_t row_begin,
                    uint64_t seed) {
  TT_CHECK(dst.is_contiguous() && dst.numel() % std::max<int64_t>(cols, 1) == 0, "init of ",
           part.name, ": destination ", dst, " is not whole rows of ", cols);
  int64_t rows = dst.numel() / cols;
  TT_CHECK(row_begin >= 0 && row_begin + rows <= part.rows, "init of ", part.name, ": rows [",
           row_begin, ", ", row_begin + rows, ") outside the part's ", part.rows, " rows");
  CounterRng rng(seed, part.name);
  const InitSpec& init = part.init;
  visit_floating(dst.dtype(), "init_part_rows", [&]<class T>() {
    T* out = dst.data<T>();
    int64_t first = row_begin * cols;
    for (int64_t i = 0; i < rows * cols; ++i) {
      uint64_t index = static_cast<uint64_t>(first + i);
      double v = 1.0;
      switch (init.kind) {
        case InitKind::Ones: v = 1.0; break;
        case InitKind::Normal: v = init.std * rng.normal(index); break;
        case InitKind::TruncatedNormal:
          v = init.std *
              rng.truncated_normal(index, -init.cutoff / init.std, init.cutoff / init.std);
          break;
      }
      out[i] = static_cast<T>(v);
    }
  });
}

void init_parameter(Parameter& param, uint64_t seed) {
  TT_CHECK(param.allocated(), "init_parameter(", param.name, "): no storage; allocate it first");
  TT_CHECK(param.value.shape() == param.shape, "init_parameter(", param.name, "): values ",
           param.value, " are a shard; initialise shards with init_part_rows");
  int64_t cols = param.cols();
  int64_t row = 0;
  for (const ParamPart& part : param.parts) {
    init_part_rows(param.value.rows(row, row + part.rows), part, cols, 0, seed);
    row += part.rows;
  }
}

}  // namespace titan::model
