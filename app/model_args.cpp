#include "app/model_args.h"

namespace titan::app {

model::ModelArgs model_args(const JobConfig& config) {
  const JobConfig::Model& c = config.model;
  model::ModelArgs args = model::model_flavor(c.flavor);
  auto override_with = [](int64_t& field, int64_t value) {
    if (value > 0) field = value;
  };
  override_with(args.dim, c.dim);
  override_with(args.n_layers, c.n_layers);
  override_with(args.n_heads, c.n_heads);
  override_with(args.n_kv_heads, c.n_kv_heads);
  override_with(args.ffn_dim, c.ffn_dim);
  override_with(args.vocab_size, c.vocab_size);
  args.norm_eps = c.norm_eps;
  args.rope_theta = c.rope_theta;
  args.rope_scaling.enabled = c.rope_scaling;
  args.tie_word_embeddings = args.tie_word_embeddings || c.tie_word_embeddings;
  args.lora = config.lora;
  return args;
}

}  // namespace titan::app
