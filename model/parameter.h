// A model parameter: its name, its full shape, how it is initialised, and its local values.
//
// Initialisation is a pure function of (seed, name, element index)
// (docs/architecture.md#decision-6). A fused parameter (wqkv, w13) is made of row segments
// ("parts") that are separate weights in torchtitan and in HF checkpoints — wq, wk, wv; w1, w3 —
// and each part is initialised under its own name, with its own std. Tensor parallelism shards each
// part separately (a rank's wqkv holds its q heads, its k heads and its v heads), so drawing by
// part keeps every shard's values equal to the matching slice of the unsharded weights.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/ops/init_spec.h"  // defines: InitSpec, InitKind

namespace titan::model {

// Rows [first row of this part, + rows) of a parameter, initialised as the weight `name`.
struct ParamPart {
  std::string name;  // "layers.0.attention.wk.weight"
  int64_t rows = 0;  // rows of the full (unsharded) part
  InitSpec init;
};

// Which slice of the full parameter this rank computes with, as tensor parallelism places it
// (parallel/'s plan sets it before allocation; a DTensor placement, in PyTorch's terms).
//   dim -1  the whole parameter (replicated)
//   dim 0   rows: every part is split into `count` equal row blocks and the rank keeps block
//           `index` of each (a wqkv shard holds its q heads, its k heads and its v heads)
//   dim 1   columns: block `index` of `count` equal column blocks
struct ParamSlice {
  int dim = -1;
  int64_t index = 0;
  int64_t count = 1;
};

// Declared without storage, as torchtitan builds its model on the meta device: the model's
// constructor only describes its parameters, so a model far larger than one rank can be
// declared, sharded by parallel/, and then given storage for its shards alone.
struct Parameter {
  std::string name;  // "layers.0.attention.wqkv.weight"
  Shape shape;       // the full, unsharded shape: [rows, cols] or [rows]
  DType dtype = DType::F32;
  std::vector<ParamPart> parts;
  ParamSlice slice;  // the tensor-parallel slice `value` holds
  Tensor value;      // this rank's slice (local_shape()), or unset while FSDP holds only a shard
  Tensor grad;       // same shape as value; backward accumulates into it
  // Set on a copy of another parameter that this rank's part holds apart from it: a pipeline's
  // last stage's output projection when the embeddings are tied ("tok_embeddings.weight"). The
  // copy starts equal (its one part is initialised under that name) and stays equal (their
  // gradients are summed before every step, parallel/tied_weights.h); checkpoints store and
  // load it under that name, once, and the gradient norm counts it once.
  std::string tied_to;
  // Frozen: computed with, never trained — no gradient, no optimizer state (the base weights of
  // a LoRA run, model/lora.h). The gradient norm, data parallelism and the optimizers pass it by.
  bool frozen = false;
  // A LoRA factor (model/lora.h): trained while the base weights are frozen; checkpoints of the
  // base model have none, Hugging Face folders hold them merged or in PEFT's own files.
  bool adapter = false;

  int64_t cols() const { return shape.ndim() == 2 ? shape[1] : 1; }
  bool allocated() const { return value.defined(); }
  bool trained() const { return !frozen; }
  // The name its values are stored and loaded under: its own, or the one it is a copy of.
  const std::string& stored_name() const { return tied_to.empty() ? name : tied_to; }
  // Whole on every tp rank: under sequence parallelism its gradient on one rank covers only
  // that rank's tokens, and across ranks it must be counted once.
  bool tp_replicated() const { return slice.dim < 0 || slice.count == 1; }
  // The shape of this rank's tensor-parallel slice.
  Shape local_shape() const;
};

// A declared parameter on the heap, where the model's layers keep it: its address is its
// identity to FSDP and the optimizer, so it never moves.
inline std::unique_ptr<Parameter> own_parameter(Parameter p) {
  return std::make_unique<Parameter>(std::move(p));
}

// A parameter with one part of the same name.
Parameter declare_parameter(std::string name, const Shape& shape, InitSpec init, DType dtype);
// A fused parameter of stacked parts, [Σ part rows, cols].
Parameter declare_fused_parameter(std::string name, std::vector<ParamPart> parts, int64_t cols,
                                  DType dtype);

// Storage for this rank's slice: values uninitialised, gradient zero (none when frozen).
void allocate_parameter(Parameter& param, Device device = Device::cpu());

// Where a backward writes the gradient of `param`: its own, or when it is frozen a zeroed
// scratch tensor of its value's shape that nothing reads (the norm backwards compute their
// weight's gradient together with the input's).
Tensor gradient_sink(const Parameter& param);

// Writes rows [row_begin, row_begin + dst.size(0)) of `part` into dst ([rows, cols], any dtype
// and device model/ops/init_values.h takes). Element (r, c) of the part is drawn at index
// r·cols + c of stream (seed, part.name).
void init_part_rows(const Tensor& dst, const ParamPart& part, int64_t cols, int64_t row_begin,
                    uint64_t seed);

// A run of consecutive rows of this rank's slice and where they sit in the full parameter:
// local rows [local_offset, +rows) (counted from the row_begin passed below) are full rows
// [full_row, +rows), columns [col_begin, +width), which are rows [part_row, +rows) of `part`.
struct LocalRun {
  const ParamPart* part = nullptr;
  int64_t local_offset = 0;
  int64_t part_row = 0;
  int64_t full_row = 0;
  int64_t col_begin = 0;
  int64_t width = 0;
  int64_t rows = 0;
};

// Visits rows [row_begin, row_begin + rows) of this rank's slice as runs, in order. Everything
// that moves between a slice (or an FSDP shard of it) and the full parameter — initialisation,
// a full-state checkpoint — goes through this one mapping.
void for_each_local_run(const Parameter& param, int64_t row_begin, int64_t rows,
                        const std::function<void(const LocalRun&)>& visit);

// Writes rows [row_begin, row_begin + dst.size(0)) of this rank's slice (local_shape()) into
// dst, every element equal to the same element of the unsliced parameter's initialisation.
// This is how each FSDP shard of a tensor-parallel slice initialises itself.
// dst may be on the CPU or a CUDA device: a kernel draws it there, with the CPU's bits.
void init_local_rows(const Tensor& dst, const Parameter& param, int64_t row_begin, uint64_t seed);

// Initialises this rank's whole slice (param.value).
void init_parameter(Parameter& param, uint64_t seed);

}  // namespace titan::model
