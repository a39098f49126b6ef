#include "model/config.h"

#include <cstdio>
#include <optional>
#include <string>

#include "core/check.h"

namespace titan::model {

namespace {

ModelArgs make(std::string flavor, int64_t dim, int64_t n_layers, int64_t n_heads,
               int64_t n_kv_heads, int64_t ffn_dim, int64_t vocab_size) {
  ModelArgs args;
  args.flavor = std::move(flavor);
  args.dim = dim;
  args.n_layers = n_layers;
  args.n_heads = n_heads;
  args.n_kv_heads = n_kv_heads;
  args.ffn_dim = ffn_dim;
  args.vocab_size = vocab_size;
  return args;
}

// Llama 3.2 1B and 3B (their Hugging Face config.json): tied embeddings, and the 3.1 frequency
// scaling with factor 32 instead of 8.
ModelArgs llama3_2(std::string flavor, int64_t dim, int64_t n_layers, int64_t n_heads) {
  ModelArgs args = make(std::move(flavor), dim, n_layers, n_heads, 8, 8192, 128256);
  args.rope_scaling.factor = 32.0;
  args.tie_word_embeddings = true;
  return args;
}

// torchtitan's Llama 3 flavors. The FFN sizes are what torchtitan derives from
// ffn_dim_multiplier and multiple_of, written out so they can be read off.
const std::vector<ModelArgs>& flavors() {
  static const std::vector<ModelArgs> table = {
      make("debugmodel", 256, 6, 16, 16, 768, 2048),
      llama3_2("llama3_2_1b", 2048, 16, 32),
      llama3_2("llama3_2_3b", 3072, 28, 24),
      make("llama3_8b", 4096, 32, 32, 8, 14336, 128256),
      make("llama3_70b", 8192, 80, 64, 8, 28672, 128256),
      make("llama3_405b", 16384, 126, 128, 8, 53248, 128256),
  };
  return table;
}

}  // namespace

std::vector<std::string> model_flavor_names() {
  std::vector<std::string> names;
  for (const ModelArgs& args : flavors()) names.push_back(args.flavor);
  return names;
}

ModelArgs model_flavor(std::string_view name) {
  for (const ModelArgs& args : flavors()) {
    if (args.flavor == name) return args;
  }
  std::string known;
  for (const std::string& n : model_flavor_names()) known += (known.empty() ? "" : ", ") + n;
  input_error("model.flavor: unknown flavor '", name, "'; use one of ", known);
}

namespace {

// The parameter count, or nullopt when it passes 2^63. Every product and sum is checked: dims a
// user typed must not wrap around to a small count that would pass the memory check.
std::optional<int64_t> checked_parameter_count(const ModelArgs& a) {
  bool overflowed = false;
  auto mul = [&](int64_t x, int64_t y) {
    int64_t r = 0;
    overflowed |= __builtin_mul_overflow(x, y, &r);
    return r;
  };
  auto add = [&](int64_t x, int64_t y) {
    int64_t r = 0;
    overflowed |= __builtin_add_overflow(x, y, &r);
    return r;
  };
  const int64_t qkv_dim = mul(add(a.n_heads, mul(2, a.n_kv_heads)), a.head_dim());
  const int64_t per_layer = add(add(add(add(mul(qkv_dim, a.dim),                        // wqkv
                                            mul(a.dim, mul(a.n_heads, a.head_dim()))),  // wo
                                        mul(2, mul(a.ffn_dim, a.dim))),                 // w13
                                    mul(a.dim, a.ffn_dim)),                             // w2
                                mul(2, a.dim));        // attention_norm, ffn_norm
  const int64_t embedding = mul(a.vocab_size, a.dim);  // tok_embeddings, and output
  const int64_t output = a.tie_word_embeddings ? 0 : embedding;
  const int64_t count = add(add(add(embedding, mul(a.n_layers, per_layer)), a.dim), output);
  if (overflowed) return std::nullopt;
  return count;
}

// "dim 4096, n_layers 32, …": the dims that set the parameter count.
std::string describe_dims(const ModelArgs& a) {
  return detail::concat("dim ", a.dim, ", n_layers ", a.n_layers, ", n_heads ", a.n_heads,
                        ", n_kv_heads ", a.n_kv_heads, ", ffn_dim ", a.ffn_dim, ", vocab_size ",
                        a.vocab_size);
}

}  // namespace

void validate_model_args(const ModelArgs& a, std::string_view section) {
  const std::string s(section);
  auto positive = [&s](const char* field, int64_t value) {
    if (value <= 0) input_error(s, ".", field, ": must be positive, got ", value);
  };
  positive("dim", a.dim);
  positive("n_layers", a.n_layers);
  positive("n_heads", a.n_heads);
  positive("n_kv_heads", a.n_kv_heads);
  positive("ffn_dim", a.ffn_dim);
  positive("vocab_size", a.vocab_size);
  if (a.dim % a.n_heads != 0) {
    input_error(s, ".n_heads: ", a.n_heads, " heads do not divide ", s, ".dim ", a.dim,
                "; choose n_heads so that dim / n_heads is a whole head dim");
  }
  if (a.head_dim() % 2 != 0) {
    input_error(
        s, ".n_heads: head dim ", a.dim, " / ", a.n_heads, " = ", a.head_dim(),
        " is odd, but rotary embeddings rotate pairs; choose n_heads giving an even head dim");
  }
  if (a.n_heads % a.n_kv_heads != 0) {
    input_error(s, ".n_kv_heads: ", a.n_kv_heads, " kv heads do not divide ", s, ".n_heads ",
                a.n_heads, "; grouped-query attention needs n_heads % n_kv_heads == 0");
  }
  if (!(a.norm_eps > 0)) input_error(s, ".norm_eps: must be positive, got ", a.norm_eps);
  if (!(a.rope_theta > 0)) input_error(s, ".rope_theta: must be positive, got ", a.rope_theta);
  if (!checked_parameter_count(a)) {
    input_error(s, ": ", describe_dims(a), " give more than 2^63 parameters; choose a smaller ",
                "model (a flavor, or smaller ", s, ".* dims)");
  }
}

int64_t count_parameters(const ModelArgs& a) {
  const std::optional<int64_t> count = checked_parameter_count(a);
  if (!count) input_error(describe_dims(a), " give more than 2^63 parameters");
  return *count;
}

int64_t count_adapter_parameters(const ModelArgs& a) {
  const LoraConfig& l = a.lora;
  if (!l.enabled()) return 0;
  const int64_t attn = a.n_heads * a.head_dim(), kv = a.n_kv_heads * a.head_dim();
  struct Shape {
    const char* name;
    int64_t in, out;  // the whole fused weight's
  };
  const Shape linears[] = {{"wqkv", a.dim, attn + 2 * kv},
                           {"wo", attn, a.dim},
                           {"w13", a.dim, 2 * a.ffn_dim},
                           {"w2", a.ffn_dim, a.dim}};
  int64_t per_layer = 0;
  for (const Shape& s : linears) {
    if (l.targets_linear(s.name)) per_layer += l.rank * (lora_target_parts(s.name) * s.in + s.out);
  }
  return per_layer * a.n_layers;
}

std::string describe_lora(const ModelArgs& a) {
  if (!a.lora.enabled()) return "";
  std::string targets;
  for (const std::string& t : a.lora.targets) targets += (targets.empty() ? "" : ", ") + t;
  char figures[160];
  std::snprintf(figures, sizeof figures,
                ": %.3fM adapter parameters trained, the model's %.2fM frozen",
                static_cast<double>(count_adapter_parameters(a)) / 1e6,
                static_cast<double>(count_parameters(a)) / 1e6);
  char head[96];
  std::snprintf(head, sizeof head, "LoRA rank %lld (alpha %g) on ",
                static_cast<long long>(a.lora.rank), a.lora.alpha);
  return head + targets + figures;
}

double training_flops_per_token(const ModelArgs& a, double attention_keys) {
  const double embedding = static_cast<double>(a.vocab_size) * static_cast<double>(a.dim);
  const double non_embedding =
      static_cast<double>(count_parameters(a)) - (a.tie_word_embeddings ? 0.0 : embedding);
  const double per_weight = a.lora.enabled() ? 4.0 : 6.0;
  return per_weight * non_embedding +
         6.0 * static_cast<double>(count_adapter_parameters(a)) +
         12.0 * static_cast<double>(a.n_layers) *
                                   static_cast<double>(a.n_heads) *
                                   static_cast<double>(a.head_dim()) * attention_keys;
}

}  // namespace titan::model
