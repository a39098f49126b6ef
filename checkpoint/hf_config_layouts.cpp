#include "checkpoint/hf_config_layouts.h"

#include <cmath>
#include <optional>
#include <string_view>

#include "core/json_text.h"

namespace titan::checkpoint {

namespace {

// A positive finite number at `key` of `object` (`path` in messages); nullopt when absent.
std::optional<double> positive(const JsonReader& json, JsonObject object, std::string_view key,
                               const std::string& path) {
  const std::optional<JsonValue> value = json.member(object, key);
  if (!value) return std::nullopt;
  const std::optional<double> out = value->get_double();
  if (!out || !std::isfinite(*out) || *out <= 0) json.fail(path, "expected a positive number");
  return out;
}

// What one layout says, before the two are compared.
struct Layout {
  bool present = false;
  std::optional<double> theta;  // absent: LlamaConfig's default
  model::RopeScaling scaling;   // enabled false: rope_type "default"
  std::string theta_key;        // rope_theta or rope_parameters.rope_theta
  std::string scaling_key;      // rope_scaling or rope_parameters
};

// The RoPE type (rope_type, or its older spelling type) of `object` at `where`: "default", or
// "llama3" with its four factors. Without a type: "default", unless `type_required`.
model::RopeScaling read_scaling(const JsonReader& json, JsonObject object, const std::string& where,
                                bool type_required) {
  model::RopeScaling s;
  s.enabled = false;
  std::string key = "rope_type";
  std::optional<JsonValue> kind = json.member(object, key);
  if (!kind) {
    key = "type";
    kind = json.member(object, key);
  }
  if (!kind && type_required) {
    json.fail(where + ".rope_type", "missing; titan_train reads \"llama3\" frequency scaling");
  }
  std::string_view type = "default";
  if (kind) {
    const std::optional<std::string_view> text = kind->get_string();
    if (!text) json.fail(where + "." + key, "expected a string such as \"llama3\"");
    type = *text;
  }
  if (type == "default") return s;
  if (type != "llama3") {
    json.fail(where + "." + key, json_string(type),
              " is a RoPE titan_train does not implement: it implements \"default\" and "
              "\"llama3\" (Llama 3.1's frequency scaling); load a Llama 3 model");
  }
  s.enabled = true;
  auto factor = [&](std::string_view name) {
    const std::string path = where + "." + std::string(name);
    const std::optional<double> value = positive(json, object, name, path);
    if (!value) json.fail(path, "missing; rope_type \"llama3\" needs it");
    return *value;
  };
  s.factor = factor("factor");
  s.low_freq_factor = factor("low_freq_factor");
  s.high_freq_factor = factor("high_freq_factor");
  s.original_max_position = factor("original_max_position_embeddings");
  return s;
}

std::string theta_text(const Layout& layout) {
  return layout.theta ? json_number(*layout.theta)
                      : "absent (LlamaConfig's " + json_number(kLlamaConfigDefaultRopeTheta) + ")";
}

// "" when the two layouts give the same RoPE, else the first difference, both keys and values.
std::string difference(const Layout& old_layout, const Layout& new_layout) {
  auto differ = [](const std::string& a_key, const std::string& a, const std::string& b_key,
                   const std::string& b) {
    return a_key + " is " + a + " but " + b_key + " is " + b;
  };
  if (old_layout.theta.value_or(kLlamaConfigDefaultRopeTheta) !=
      new_layout.theta.value_or(kLlamaConfigDefaultRopeTheta)) {
    return differ(old_layout.theta_key, theta_text(old_layout), new_layout.theta_key,
                  theta_text(new_layout));
  }
  const model::RopeScaling& a = old_layout.scaling;
  const model::RopeScaling& b = new_layout.scaling;
  if (a.enabled != b.enabled) {
    auto type = [](const Layout& l) {
      return l.scaling.enabled                 ? std::string("\"llama3\"")
             : l.scaling_key == "rope_scaling" ? std::string("null")
                                               : std::string("\"default\"");
    };
    return differ(old_layout.scaling_key + (a.enabled ? ".rope_type" : ""), type(old_layout),
                  new_layout.scaling_key + ".rope_type", type(new_layout));
  }
  if (!a.enabled) return "";
  const std::pair<const char*, std::pair<double, double>> factors[] = {
      {"factor", {a.factor, b.factor}},
      {"low_freq_factor", {a.low_freq_factor, b.low_freq_factor}},
      {"high_freq_factor", {a.high_freq_factor, b.high_freq_factor}},
      {"original_max_position_embeddings", {a.original_max_position, b.original_max_position}}};
  for (const auto& [name, values] : factors) {
    if (values.first != values.second) {
      return differ(old_layout.scaling_key + "." + name, json_number(values.first),
                    new_layout.scaling_key + "." + name, json_number(values.second));
    }
  }
  return "";
}

}  // namespace

HfRope read_hf_rope(const JsonReader& json, JsonObject root) {
  // transformers 4: rope_theta and rope_scaling at the top level (null is absent).
  Layout old_layout{false, std::nullopt, {}, "rope_theta", "rope_scaling"};
  old_layout.scaling.enabled = false;
  old_layout.theta = positive(json, root, "rope_theta", "rope_theta");
  old_layout.present = old_layout.theta.has_value();
  if (const std::optional<JsonValue> scaling = json.member(root, "rope_scaling")) {
    const std::optional<JsonObject> object = scaling->get_object();
    if (!object) json.fail("rope_scaling", "expected an object or null");
    old_layout.scaling = read_scaling(json, *object, "rope_scaling", /*type_required=*/true);
    old_layout.present = true;
  }
  // transformers 5: both inside rope_parameters.
  Layout new_layout{false, std::nullopt, {}, "rope_parameters.rope_theta", "rope_parameters"};
  new_layout.scaling.enabled = false;
  if (const std::optional<JsonValue> parameters = json.member(root, "rope_parameters")) {
    const std::optional<JsonObject> object = parameters->get_object();
    if (!object) json.fail("rope_parameters", "expected an object");
    for (const JsonMember member : *object) {
      if (member.value.get_object()) {
        json.fail("rope_parameters." + std::string(member.key),
                  "is an object: RoPE parameters per layer type, which a Llama model does not "
                  "have; load a Llama 3 model");
      }
    }
    new_layout.theta = positive(json, *object, "rope_theta", "rope_parameters.rope_theta");
    new_layout.scaling = read_scaling(json, *object, "rope_parameters", /*type_required=*/false);
    new_layout.present = true;
  }

  if (old_layout.present && new_layout.present) {
    const std::string differs = difference(old_layout, new_layout);
    if (!differs.empty()) {
      json.fail_file(differs,
                     ": the file holds RoPE in transformers 4's layout and in 5's, and they "
                     "disagree (transformers 4 reads the first, 5 the second); keep the one the "
                     "model was trained with and delete the other");
    }
  }
  const Layout& used = new_layout.present ? new_layout : old_layout;
  HfRope rope;
  rope.theta = used.theta.value_or(kLlamaConfigDefaultRopeTheta);
  rope.scaling = used.scaling;
  if (!old_layout.present && !new_layout.present) {
    rope.assumed =
        "names no RoPE (neither rope_parameters nor rope_theta): LlamaConfig's "
        "default, rope_theta " +
        json_number(kLlamaConfigDefaultRopeTheta) + " with no frequency scaling";
  }
  return rope;
}

std::string read_hf_dtype(const JsonReader& json, JsonObject root) {
  std::optional<std::string_view> found[2];
  const char* keys[2] = {"dtype", "torch_dtype"};
  for (int k = 0; k < 2; ++k) {
    if (const std::optional<JsonValue> value = json.member(root, keys[k])) {
      found[k] = value->get_string();
      if (!found[k]) json.fail(keys[k], "expected a string such as \"bfloat16\"");
    }
  }
  if (found[0] && found[1] && *found[0] != *found[1]) {
    json.fail_file("dtype is ", json_string(*found[0]), " but torch_dtype is ",
                   json_string(*found[1]),
                   ": the two spellings (transformers 5's and 4's) disagree; keep one");
  }
  return std::string(found[0] ? *found[0] : found[1] ? *found[1] : "");
}

}  // namespace titan::checkpoint
