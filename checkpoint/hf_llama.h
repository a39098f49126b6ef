// Hugging Face Llama 3 in and out: the only place that knows HF's tensor names, its RoPE row
// layout and that wqkv/w13 are separate tensors there (docs/architecture.md#decision-13).
//
// Names (N: layer). titan_train's fused parameters are stacks of parts (model/parameter.h);
// each part is one HF tensor, same shape, same layout ([out features, in features]):
//
//   tok_embeddings.weight               model.embed_tokens.weight
//   layers.N.attention_norm.weight      model.layers.N.input_layernorm.weight
//   layers.N.attention.wqkv.weight  wq  model.layers.N.self_attn.q_proj.weight   (rows permuted)
//                                   wk  model.layers.N.self_attn.k_proj.weight   (rows permuted)
//                                   wv  model.layers.N.self_attn.v_proj.weight
//   layers.N.attention.wo.weight        model.layers.N.self_attn.o_proj.weight
//   layers.N.ffn_norm.weight            model.layers.N.post_attention_layernorm.weight
//   layers.N.feed_forward.w13.weight w1 model.layers.N.mlp.gate_proj.weight
//                                    w3 model.layers.N.mlp.up_proj.weight
//   layers.N.feed_forward.w2.weight     model.layers.N.mlp.down_proj.weight
//   norm.weight                         model.norm.weight
//   output.weight                       lm_head.weight (model.embed_tokens.weight when the
//                                       config ties them and the file has no lm_head)
//
// RoPE: titan_train rotates adjacent pairs (x[2i], x[2i+1]) of a head (model/ops/rope.h); HF
// rotates half-split pairs (x[i], x[i + Dh/2]). So within each head of Dh rows of q_proj and
// k_proj, our row 2i+j is HF's row j·Dh/2 + i (j ∈ {0, 1}, i < Dh/2): the `permute` of
// transformers' convert_llama_weights_to_hf.py. Scores q·k are unchanged because q and k get the
// same permutation, and wv/wo are untouched.
//
// Exporting is parallel and atomic:
//   1. every rank k of `parts` calls export_hf(step, out, dtype, k, parts): it creates
//      <out>.tmp/ (if absent) and writes the HF file k there as <name>.partial, fsynced, then
//      renamed to <name> (model-0000K-of-0000M.safetensors, K = k + 1). The HF tensors are cut
//      into M = min(parts, tensors) files of about equal bytes, in HF order; a rank k ≥ M
//      writes nothing. Each file is streamed: no rank holds more than one chunk (≤ 64 MiB) of
//      one tensor.
//   2. the caller barriers (every export_hf has returned, on every rank);
//   3. one rank calls finish_hf_export(step, out, dtype, parts): it checks that every file of
//      the plan is in <out>.tmp/ and complete (each parses and holds exactly its tensors),
//      removes anything else there (a stale .partial, files of an earlier plan), writes
//      model.safetensors.index.json and config.json (fsynced), then renames <out>.tmp to <out>
//      (an existing <out> is moved aside first and removed after), and fsyncs the parent.
// So <out> is only ever absent, the previous complete export, or this complete one; a crash
// leaves at worst <out>.tmp, which the next export reuses.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/hf_files.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/optim/optimizer.h"
#include "model/parameter.h"
#include "parallel/device_mesh.h"

namespace titan::checkpoint {

// ---- the mapping ------------------------------------------------------------------------------

// The HF tensor name of one of our part names (or unfused parameter names); InputError for a
// name that has none.
std::string hf_tensor_name(const std::string& part_name);

// Whether a part's rows carry the RoPE permutation (wq and wk).
bool hf_rope_permuted(const std::string& part_name);

// Our row `row` of a RoPE-permuted part (heads of `head_dim` rows) is HF's row hf_row(row).
int64_t hf_row(int64_t row, int64_t head_dim);

// One HF tensor and where it sits in our parameters.
struct HfTensor {
  std::string hf_name;
  std::string param;      // our parameter
  int64_t param_row = 0;  // the part's first row in the parameter
  int64_t rows = 0;       // HF shape [rows, cols], or [rows] when `vector`
  int64_t cols = 1;
  bool vector = false;
  bool rope_permuted = false;
};

// Every HF tensor of the model, in HF order (embeddings, layer by layer, norm, lm_head).
std::vector<HfTensor> hf_tensors(const model::ModelArgs& args);

// ---- import -----------------------------------------------------------------------------------

// The caller's names, for the messages, of the option that named the Hugging Face folder and of
// the options that chose the model it must match (titan_train: checkpoint.initial_load_path and
// its "model" section). The defaults name the functions' own arguments.
struct HfFolderKeys {
  std::string folder = "hf_folder";
  std::string model_section;  // empty: a config.json mismatch names no option to change
};

// Checks a HF Llama folder before anything is allocated: config.json against `args` (every
// mismatch one line), the index and every shard it names, and every tensor the model needs
// present with its shape. InputError naming the file otherwise. Reads headers only. Returns
// config.json's reading, whose `assumed` the caller logs.
HfConfig check_hf_folder(const std::string& hf_folder, const model::ModelArgs& args,
                         const HfFolderKeys& keys = {});

// Collective-free: loads a HF Llama folder into this rank's parameters (optimizer.params(), the
// values it owns per parallel::for_each_owned_run; FSDP padding rows zero). Runs are read as
// row blocks (q/k: whole heads as a block permuted in memory, rows of a head held in part one
// by one); bf16 or fp32 files; model.safetensors or shards with model.safetensors.index.json.
// config.json is checked against `args` first. A CPU parameter is read into directly; a GPU's
// through one host buffer in the stored dtype, converted on the device (load_staging.h).
void load_hf_weights(const std::string& hf_folder, const model::ModelArgs& args,
                     model::Optimizer& optimizer, const parallel::DeviceMesh& mesh,
                     const HfFolderKeys& keys = {});

// The same with the ownership rule passed in (what load_hf_weights passes is
// parallel::for_each_owned_run on `mesh`; a test passes "the whole slice").
using OwnedRuns = std::function<void(const model::Parameter&, const Tensor& local,
                                     const std::function<void(const model::LocalRun&)>&)>;
void load_hf_weights(const std::string& hf_folder, const model::ModelArgs& args,
                     const std::vector<model::Parameter*>& params, const OwnedRuns& owned_runs,
                     const HfFolderKeys& keys = {});

// ---- export -----------------------------------------------------------------------------------

// See the protocol above. `dtype` is F32 or BF16 (f32 → bf16 rounds to nearest even).
void export_hf(const std::string& step_folder, const std::string& out_folder, DType dtype, int part,
               int parts);
void finish_hf_export(const std::string& step_folder, const std::string& out_folder, DType dtype,
                      int parts);

// The same from any source of parameter rows: read(param, row_begin, rows, dst) fills dst
// [rows, cols] (f32; [rows, 1] for a vector) with full-parameter rows. export_hf passes a
// CheckpointReader's read_region.
using ParamRowReader = std::function<void(const std::string& param, int64_t row_begin, int64_t rows,
                                          const Tensor& dst)>;
void export_hf_part(const model::ModelArgs& args, const ParamRowReader& read,
                    const std::string& out_folder, DType dtype, int part, int parts);
void finish_hf_export(const model::ModelArgs& args, const std::string& out_folder, DType dtype,
                      int parts);

// Replaces out_folder with the finished (synced) tmp_folder: the old one is moved aside, the
// new one renamed in, the old one removed, the parent synced. A reader sees the old folder or the
// new one, never a mix.
void move_export_into_place(const std::string& tmp_folder, const std::string& out_folder);

// The files of an export: which HF tensors (indices into hf_tensors(args)) each one holds.
std::vector<std::vector<size_t>> hf_export_plan(const model::ModelArgs& args, DType dtype,
                                                int parts);

}  // namespace titan::checkpoint
