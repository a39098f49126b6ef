#include "app/attention_setup.h"

#include <algorithm>

#include "core/check.h"
#include "model/ops/attention/attention_backend.h"

namespace titan::app {

model::AttentionShape local_attention_shape(const JobConfig& c, const model::ModelArgs& args,
                                            int64_t tp, int64_t cp) {
  // A tp that does not split the heads is refused on its own (check_tensor_parallel_fit), maybe
  // after this: the whole heads stand in for it meanwhile.
  if (tp < 1 || args.n_heads % tp != 0 || args.n_kv_heads % tp != 0) tp = 1;
  return {c.training.local_batch_size, c.training.seq_len / std::max<int64_t>(cp, 1),
          args.n_heads / tp, args.n_kv_heads / tp, args.head_dim()};
}

void check_attention_backend(const JobConfig& c, const model::ModelArgs& args, int64_t tp,
                             int64_t cp) {
  if (c.model.attention_backend == model::AttentionBackend::Hopper) {
    const model::AttentionShape a = local_attention_shape(c, args, tp, cp);
    if (cp > 1) {
      input_error(
          "model.attention_backend: hopper runs the full attention only, and context "
          "parallelism (degree ",
          cp,
          ") runs attention in blocks, which the Hopper kernel does not take yet; use "
          "auto or native, or context_parallel_degree 1");
    }
    const std::string refusal = model::hopper_attention_refusal(a);
    if (refusal.empty()) return;
    input_error("model.attention_backend: hopper cannot run this model's attention (per rank H ",
                a.n_heads, ", Hkv ", a.n_kv_heads, ", Dh ", a.head_dim, ", S ", a.seq_len,
                "): the Hopper kernel takes ", refusal, "; use auto or native");
  }
  if (c.model.attention_backend != model::AttentionBackend::Cudnn) return;
  const model::AttentionShape a = local_attention_shape(c, args, tp, cp);
  std::string refusal = model::cudnn_attention_refusal(a);
  if (refusal.empty() && cp > 1) {
    // Context parallelism's head-tail split gives each rank two chunks of S / (2·cp) tokens; a
    // diagonal block of one chunk against itself stands for every block it cuts.
    const int64_t chunk = a.seq_len / 2;
    refusal = model::cudnn_block_refusal(
        {a.batch, a.n_heads, a.n_kv_heads, a.head_dim, chunk, chunk, 0, 0});
  }
  if (refusal.empty()) return;
  input_error("model.attention_backend: cudnn cannot run this model's attention (per rank H ",
              a.n_heads, ", Hkv ", a.n_kv_heads, ", Dh ", a.head_dim, ", S ", a.seq_len,
              cp > 1 ? detail::concat(" in chunks of ", a.seq_len / 2) : std::string(),
              "): cuDNN's fused attention takes ", refusal, "; use auto or native");
}

AttentionRun pick_attention_backend(const JobConfig& c, const model::ModelArgs& args, int64_t tp,
                                    int64_t cp, Device device) {
  if (!device.is_cuda()) return {};
  if (c.model.attention_mask == model::AttentionMaskKind::BlockCausal) {
    // cudnn was refused with block_causal when the config was read.
    return {model::AttentionBackend::Native, detail::concat("attention: native FlashAttention-2 kernels (model.attention_backend ",
                          model::kAttentionBackends.name(c.model.attention_backend), ": ",
                          model::kCudnnBlockCausalRefusal, ")")};
  }
  const model::AttentionBackendChoice choice = model::choose_attention_backend(
      c.model.attention_backend, local_attention_shape(c, args, tp, cp));
  if (!choice.error.empty()) {
    input_error(
        "model.attention_backend: ", model::kAttentionBackends.name(c.model.attention_backend),
        " cannot run here: ", choice.error, "; use auto or native");
  }
  return {model::attention_backend_to_run(c.model.attention_backend, choice), choice.line};
}

}  // namespace titan::app
