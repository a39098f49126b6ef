#include "model/parameter.h"

#include <algorithm>
#include <functional>

#include "core/memory_tag.h"
#include "core/rng.h"
#include "model/ops/init_values.h"

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

Shape Parameter::local_shape() const {
  Shape local = shape;
  if (slice.dim < 0 || slice.count == 1) return local;
  TT_CHECK(slice.dim < shape.ndim() && shape[slice.dim] % slice.count == 0, name,
           ": cannot split dim ", slice.dim, " of ", shape, " in ", slice.count);
  for (const ParamPart& part : parts) {
    TT_CHECK(slice.dim != 0 || part.rows % slice.count == 0, name, ": part ", part.name, " has ",
             part.rows, " rows, not divisible by ", slice.count);
  }
  local[slice.dim] = shape[slice.dim] / slice.count;
  return local;
}

void allocate_parameter(Parameter& param, Device device) {
  {
    MemoryTagScope tag(MemoryCategory::Parameters);
    param.value = Tensor::empty(param.local_shape(), param.dtype, device);
  }
  if (param.frozen) return;
  MemoryTagScope tag(MemoryCategory::Gradients);
  param.grad = Tensor::zeros(param.local_shape(), param.dtype, device);
}

Tensor gradient_sink(const Parameter& param) {
  if (param.trained()) return param.grad;
  return Tensor::zeros(param.value.shape(), param.value.dtype(), param.value.device());
}

namespace {

// dst [rows, width] = rows [row_begin, +rows), columns [col_begin, +width) of `part`, whose
// full rows have `cols` columns.
void init_part_block(const Tensor& dst, const ParamPart& part, int64_t cols, int64_t width,
                     int64_t row_begin, int64_t col_begin, uint64_t seed) {
  TT_CHECK(dst.is_contiguous() && dst.numel() % std::max<int64_t>(width, 1) == 0, "init of ",
           part.name, ": destination ", dst, " is not whole rows of ", width);
  const int64_t rows = dst.numel() / std::max<int64_t>(width, 1);
  TT_CHECK(row_begin >= 0 && row_begin + rows <= part.rows, "init of ", part.name, ": rows [",
           row_begin, ", ", row_begin + rows, ") outside the part's ", part.rows, " rows");
  TT_CHECK(col_begin >= 0 && col_begin + width <= cols, "init of ", part.name, ": columns [",
           col_begin, ", ", col_begin + width, ") outside ", cols);
  init_values(dst, part.init, CounterRng(seed, part.name), {cols, width, row_begin, col_begin});
}

}  // namespace

void init_part_rows(const Tensor& dst, const ParamPart& part, int64_t cols, int64_t row_begin,
                    uint64_t seed) {
  init_part_block(dst, part, cols, cols, row_begin, 0, seed);
}

void for_each_local_run(const Parameter& param, int64_t row_begin, int64_t rows,
                        const std::function<void(const LocalRun&)>& visit) {
  const Shape local = param.local_shape();
  const bool row_split = param.slice.dim == 0 && param.slice.count > 1;
  const bool col_split = param.slice.dim == 1 && param.slice.count > 1;
  LocalRun run;
  run.width = local.ndim() == 2 ? local[1] : 1;
  run.col_begin = col_split ? param.slice.index * run.width : 0;
  TT_CHECK(row_begin >= 0 && rows >= 0 && row_begin + rows <= local[0], param.name, ": rows [",
           row_begin, ", ", row_begin + rows, ") outside the slice's ", local[0], " rows");
  // Walk the parts in local row order; a row-split part contributes its block `index` only.
  int64_t local_part_begin = 0;  // first local row of the current part
  int64_t full_part_begin = 0;   // first row of the current part in the full parameter
  for (const ParamPart& part : param.parts) {
    const int64_t local_rows = row_split ? part.rows / param.slice.count : part.rows;
    const int64_t part_offset = row_split ? param.slice.index * local_rows : 0;
    const int64_t begin = std::max(row_begin, local_part_begin);
    const int64_t end = std::min(row_begin + rows, local_part_begin + local_rows);
    if (begin < end) {
      run.part = &part;
      run.local_offset = begin - row_begin;
      run.part_row = part_offset + begin - local_part_begin;
      run.full_row = full_part_begin + run.part_row;
      run.rows = end - begin;
      visit(run);
    }
    local_part_begin += local_rows;
    full_part_begin += part.rows;
  }
}

void init_local_rows(const Tensor& dst, const Parameter& param, int64_t row_begin, uint64_t seed) {
  const Shape local = param.local_shape();
  const int64_t width = local.ndim() == 2 ? local[1] : 1;
  TT_CHECK(dst.is_contiguous() && dst.numel() % width == 0, "init of ", param.name,
           ": destination ", dst, " is not whole rows of ", width);
  Tensor flat = dst.view({dst.numel()});
  for_each_local_run(param, row_begin, dst.numel() / width, [&](const LocalRun& run) {
    init_part_block(flat.narrow(0, run.local_offset * width, run.rows * width), *run.part,
                    param.cols(), width, run.part_row, run.col_begin, seed);
  });
}

void init_parameter(Parameter& param, uint64_t seed) {
  TT_CHECK(param.allocated(), "init_parameter(", param.name, "): no storage; allocate it first");
  TT_CHECK(param.value.shape() == param.local_shape(), "init_parameter(", param.name, "): values ",
           param.value, " are not the slice ", param.local_shape(),
           "; initialise FSDP shards with init_local_rows");
  init_local_rows(param.value, param, 0, seed);
}

}  // namespace titan::model
