#include "parallel/parallelize.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "core/check.h"
#include "fp8/float8_all_gather.h"
#include "model/lora.h"
#include "parallel/amax_reduction.h"
#include "parallel/fsdp.h"
#include "parallel/replicated.h"
#include "parallel/tensor_parallel.h"

namespace titan::parallel {

namespace {

// "layers.3.attention.wo" matches "attention.wo"; "output" matches only itself.
bool names_layer(std::string_view fqn, std::string_view layer) {
  if (!fqn.ends_with(layer)) return false;
  return fqn.size() == layer.size() || fqn[fqn.size() - layer.size() - 1] == '.';
}

void apply_tensor_parallel(model::Transformer& model, const DeviceMesh& tp_mesh, bool async,
                           const std::shared_ptr<CommWaits>& waits) {
  auto group = std::make_shared<TensorParallelGroup>(tp_mesh.shared_comm(), waits);
  const int64_t tp = tp_mesh.size(), rank = tp_mesh.rank();
  auto column = std::make_shared<ColumnParallelLinear>(group, async);
  auto row = std::make_shared<RowParallelLinear>(group, async);
  slice_for_tensor_parallel(model, rank, tp);
  for (model::Linear* linear : model.linears()) {
    const bool columns = tp_plan_entry(linear->fqn()).style == TpStyle::ColumnParallel;
    linear->set_style(columns ? std::static_pointer_cast<model::LinearStyle>(column)
                              : std::static_pointer_cast<model::LinearStyle>(row));
  }
  model.set_tensor_parallel(group);
  model.set_vocab_start(rank * model.args().vocab_size / tp);
}

}  // namespace

void slice_for_tensor_parallel(model::Transformer& model, int64_t rank, int64_t tp) {
  for (model::Linear* linear : model.linears()) {
    const bool columns = tp_plan_entry(linear->fqn()).style == TpStyle::ColumnParallel;
    // Column-parallel splits the output features, the weight's rows; row-parallel the inputs.
    linear->weight().slice = {columns ? 0 : 1, rank, tp};
    if (model::LowRankAdapter* adapter = linear->adapter()) {
      model::follow_base_slice(*adapter, linear->weight().slice);
    }
  }
  // The embedding table is split by vocab rows like the output projection; the norms stay
  // whole (sequence parallel) and their gradients are summed over tp by the data-parallel side.
  for (model::Parameter* p : model.parameters()) {
    if (p->name == "tok_embeddings.weight") p->slice = {0, rank, tp};
  }
}

const TpPlanEntry& tp_plan_entry(std::string_view fqn) {
  for (const TpPlanEntry& entry : kLlamaTpPlan) {
    if (names_layer(fqn, entry.layer)) return entry;
  }
  throw Error(detail::concat("tensor parallel plan has no entry for linear '", fqn, "'"));
}

std::vector<std::string> tp_overlap_table(const std::vector<model::Transformer*>& parts) {
  std::vector<const model::Linear*> linears;
  for (model::Transformer* part : parts) {
    for (const model::Linear* linear : part->linears()) linears.push_back(linear);
  }
  std::vector<std::string> lines;
  auto pad = [](std::string s, size_t width) {
    // Width in code points, so that the table lines up with its arrows.
    size_t chars = 0;
    for (unsigned char c : s) chars += (c & 0xC0) != 0x80;
    if (chars < width) s.append(width - chars, ' ');
    return s;
  };
  lines.push_back(pad("linear", 34) + pad("style", 26) + pad("overlapped", 12) +
                  "forward | backward");
  for (const TpPlanEntry& entry : kLlamaTpPlan) {
    int64_t count = 0;
    const model::Linear* first = nullptr;
    for (const model::Linear* linear : linears) {
      if (!names_layer(linear->fqn(), entry.layer)) continue;
      if (first == nullptr) first = linear;
      ++count;
    }
    if (first == nullptr) continue;
    TpPattern pattern;
    if (const auto* c = dynamic_cast<const ColumnParallelLinear*>(&first->style())) {
      pattern = c->pattern();
    } else if (const auto* r = dynamic_cast<const RowParallelLinear*>(&first->style())) {
      pattern = r->pattern();
    }
    const std::string name =
        count > 1 ? detail::concat("layers.*.", entry.layer, " (×", count, ")") : first->fqn();
    lines.push_back(pad(name, 34) + pad(first->style().name(), 26) +
                    pad(pattern.overlapped ? "yes" : "no", 12) + pattern.forward + " | " +
                    pattern.backward);
  }
  lines.push_back(
      "never overlapped: tok_embeddings' sequence split (a reduce-scatter after a table lookup, no "
      "GEMM to hide it) and loss parallel's all-reduces (a few floats per token)");
  return lines;
}

void check_tensor_parallel_fit(const model::ModelArgs& args, int64_t tp,
                               const std::string& tp_key) {
  auto require = [&](const char* what, int64_t value) {
    if (value % tp != 0) {
      input_error(tp_key, ": ", tp, " does not divide the model's ", what, " (", value,
                  "); each tp rank must get an equal share, choose a tp that divides ", value);
    }
  };
  require("n_heads", args.n_heads);
  require("n_kv_heads", args.n_kv_heads);
  require("ffn_dim", args.ffn_dim);
  require("vocab_size", args.vocab_size);
}

ParallelModel parallelize(model::Transformer& model, const DeviceMesh& mesh,
                          const ParallelizeOptions& options) {
  return parallelize(std::vector<model::Transformer*>{&model}, mesh, options);
}

namespace {

// What the steps of parallelize() share: their inputs, what each leaves for the next, the result.
struct Parallelizing {
  const std::vector<model::Transformer*>& parts;
  const DeviceMesh& mesh;
  const ParallelizeOptions& options;
  ParallelModel& result;
  bool fsdp = false;                                // the parameters are sharded over dp_shard × cp
  std::shared_ptr<fp8::Float8WeightCache> fp8_cache;  // the fp8 step's, for FSDP's float8 codec
};

// Each step applies one thing to every part and returns the one line that says what.

std::string apply_tp_step(Parallelizing& p) {
  const int64_t tp = p.mesh.degree(MeshDim::Tp);
  if (tp == 1) return "tensor parallel: off (tp 1)";
  for (model::Transformer* part : p.parts) {
    apply_tensor_parallel(*part, p.mesh[MeshDim::Tp], p.options.async_tensor_parallel,
                          p.result.tp_waits);
  }
  p.result.tp_table = tp_overlap_table(p.parts);
  return detail::concat("applied tensor parallel to the model (tp ", tp,
                        p.options.async_tensor_parallel ? ", async" : "", ")");
}

std::string apply_bf16_operands_step(Parallelizing& p) {
  if (!p.options.bf16_gemm_operands) return "bf16 GEMM operands: off";
  auto bf16 = std::make_shared<model::HighPrecisionGemms>(/*bf16_operands=*/true);
  for (model::Transformer* part : p.parts) {
    for (model::Linear* linear : part->linears()) linear->set_gemms(bf16);
  }
  return "applied bf16 GEMM operands (emulated) to every linear";
}

std::string apply_fp8_step(Parallelizing& p) {
  const DeviceMesh& mesh = p.mesh;
  fp8::Float8Options float8 = p.options.float8;
  if (float8.enabled && p.options.float8_all_gather && p.fsdp) {
    // One scale per weight, known before the gather: the caller refuses other recipes first,
    // naming its own options. The linears read the cache the FSDP codec will fill.
    TT_CHECK(float8.recipe == fp8::RecipeKind::Tensorwise,
             "parallelize: the FSDP float8 all-gather needs the tensorwise recipe, got ",
             fp8::recipe_name(float8.recipe));
    p.fp8_cache = std::make_shared<fp8::Float8WeightCache>();
    float8.weight_cache = p.fp8_cache;
  }
  std::shared_ptr<fp8::AmaxReduction> tp_amax;
  if (mesh.degree(MeshDim::Tp) > 1) {
    tp_amax = std::make_shared<CommAmaxReduction>(mesh[MeshDim::Tp].shared_comm());
  }
  // Under cp the tokens of each sequence are split over the cp group too: a tensorwise amax of
  // an activation is the max over cp × tp, one collective (fp8/float8_linear.h).
  std::shared_ptr<fp8::AmaxReduction> activation_amax;
  if (mesh.degree(MeshDim::Cp) > 1) {
    activation_amax =
        std::make_shared<CommAmaxReduction>(mesh.slice({MeshDim::Cp, MeshDim::Tp}).shared_comm());
  }
  for (model::Transformer* part : p.parts) {
    fp8::Float8Conversion converted =
        fp8::convert_to_float8(*part, float8, tp_amax, activation_amax);
    auto append = [](auto& to, const auto& from) { to.insert(to.end(), from.begin(), from.end()); };
    append(p.result.float8.converted, converted.converted);
    append(p.result.float8.weights, converted.weights);
    append(p.result.float8.auto_filtered, converted.auto_filtered);
  }
  if (!float8.enabled) return "float8: off";
  return detail::concat("applied float8 to ", p.result.float8.converted.size(), " linears");
}

std::string apply_cp_step(Parallelizing& p) {
  const int64_t cp_degree = p.mesh.degree(MeshDim::Cp);
  if (cp_degree == 1) return "context parallel: off (cp 1)";
  // One group for the parts of this rank: its stages hold the same tokens' positions.
  auto cp = std::make_shared<ContextParallelGroup>(p.mesh[MeshDim::Cp].shared_comm(),
                                                   p.options.cp_method, p.result.cp_waits);
  for (model::Transformer* part : p.parts) part->set_context_parallel(cp);
  return detail::concat("applied context parallel to the model's attention (cp ", cp_degree, ")");
}

// FSDP's float8 all-gather codec: over the weights the fp8 step converted, into its cache.
CodedGather float8_gather_codec(const Parallelizing& p) {
  CodedGather coded;
  if (p.fp8_cache == nullptr) return coded;
  // A weight's scale is the max over its own shard group: its FSDP shards and tp slices,
  // never the replicas (which hold the same values).
  const DeviceMesh owners = p.mesh.slice({kDpShardCp, MeshDim::Tp});
  coded.codec = std::make_shared<fp8::Float8AllGatherCodec>(
      std::make_shared<CommAmaxReduction>(owners.shared_comm()), p.fp8_cache);
  coded.update_after_step = p.options.precompute_float8_scales;
  coded.params = p.result.float8.weights;
  return coded;
}

std::string apply_data_parallel_step(Parallelizing& p) {
  const DeviceMesh& mesh = p.mesh;
  // One DataParallel for every part this rank holds (a pipeline rank's stages), its groups in
  // the model's order.
  std::vector<model::ParamGroup> groups;
  std::vector<model::Parameter*> params;
  for (model::Transformer* part : p.parts) {
    for (model::ParamGroup& group : part->param_groups()) groups.push_back(std::move(group));
  }
  std::sort(groups.begin(), groups.end(),
            [](const model::ParamGroup& a, const model::ParamGroup& b) { return a.id < b.id; });
  for (const model::ParamGroup& group : groups) {
    params.insert(params.end(), group.params.begin(), group.params.end());
  }
  std::shared_ptr<DataParallel> dp;
  std::string line;
  if (p.fsdp) {
    const CodedGather coded = float8_gather_codec(p);
    // A pipeline stage runs each group's backward once per micro-batch: its gradients are
    // reduced after each, or once at the end of the step (fsdp.h).
    dp = std::make_shared<FullyShardedDataParallel>(
        std::move(groups), mesh, p.options.reshard_after_forward, coded, p.options.placement,
        mesh.degree(MeshDim::Pp) > 1 &&
            p.options.pipeline_gradient_reduction == PipelineGradientReduction::Step);
    line = detail::concat("applied FSDP to the model (", mesh[kDpShardCp].size(), " shards",
                          coded.codec ? ", float8 all-gather" : "", ")");
  } else {
    dp = std::make_shared<ReplicatedDataParallel>(params, mesh, p.options.placement);
    line = "applied DDP to the model (parameters whole on every rank)";
  }
  for (model::Transformer* part : p.parts) part->set_param_hooks(dp);
  p.result.data_parallel = std::move(dp);
  return line;
}

struct ParallelizeStep {
  const char* name;
  std::string (*apply)(Parallelizing&);
  std::vector<const char*> after;  // the steps that must have run before this one
};

// The order, torchtitan's: the linears' styles before their GEMMs are chosen, FP8 on the
// GEMMs that result, data parallelism last over the parameters and the float8 weights as
// they then are.
const std::vector<ParallelizeStep>& parallelize_steps() {
  static const std::vector<ParallelizeStep> steps = {
      {"tp", apply_tp_step, {}},
      {"bf16 operands", apply_bf16_operands_step, {"tp"}},
      {"fp8", apply_fp8_step, {"tp", "bf16 operands"}},
      {"cp", apply_cp_step, {}},
      {"fsdp/ddp", apply_data_parallel_step, {"fp8", "cp"}},
  };
  return steps;
}

// Each step after the ones it needs; checked once, the first time parallelize() runs.
void check_step_order(const std::vector<ParallelizeStep>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    for (std::string_view needed : steps[i].after) {
      const bool before = std::any_of(steps.begin(), steps.begin() + static_cast<ptrdiff_t>(i),
                                      [&](const ParallelizeStep& s) { return s.name == needed; });
      TT_CHECK(before, "parallelize: step '", steps[i].name, "' runs before '", needed,
               "', which it needs");
    }
  }
}

}  // namespace

ParallelModel parallelize(const std::vector<model::Transformer*>& parts, const DeviceMesh& mesh,
                          const ParallelizeOptions& options) {
  TT_CHECK(!parts.empty(), "parallelize: no model part");
  // A caller reading tp from its user checked it first under its own name; this is the mesh's.
  check_tensor_parallel_fit(parts.front()->args(), mesh.degree(MeshDim::Tp),
                            "the mesh's tp degree");
  TT_CHECK(!options.async_tensor_parallel || mesh.degree(MeshDim::Tp) > 1,
           "async tensor parallel on a mesh without tp");
  static const bool order_checked = (check_step_order(parallelize_steps()), true);
  (void)order_checked;
  ParallelModel result;
  Parallelizing p{parts, mesh, options, result};
  p.fsdp = mesh[kDpShardCp].size() > 1;
  for (const ParallelizeStep& step : parallelize_steps()) {
    result.steps.push_back(detail::concat(step.name, ": ", step.apply(p)));
  }
  return result;
}

}  // namespace titan::parallel
