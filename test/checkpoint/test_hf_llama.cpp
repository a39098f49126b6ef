// Hugging Face Llama in and out: the name table, the q/k row permutation (checked against both
// RoPE conventions, not against itself), export then import bit for bit (f32, and bf16 through
// bf16), an FSDP shard reading only its rows, and every bad folder refused with one line.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "checkpoint/hf_files.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/safetensors.h"
#include "core/cast.h"
#include "core/check.h"
#include "model/ops/rope.h"
#include "model/transformer.h"
#include "support/hf_reference.h"
#include "support/process.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::checkpoint;
using titan::testing::files_equal;
using titan::testing::read_file;
namespace fs = std::filesystem;

namespace {

// Small, with grouped-query attention (Hkv < H) so q and k are permuted with different head counts.
model::ModelArgs small_args() {
  return testing::small_model_args(
      {.dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 96, .vocab_size = 50});
}

struct Weights {
  std::unique_ptr<model::Transformer> model;
  std::vector<model::Parameter*> params;
};

Weights make_weights(const model::ModelArgs& args, uint64_t seed) {
  Weights w;
  w.model = std::make_unique<model::Transformer>(args, DType::F32);
  w.params = w.model->parameters();
  for (model::Parameter* p : w.params) {
    model::allocate_parameter(*p);
    if (seed != 0) model::init_parameter(*p, seed);
  }
  return w;
}

// Rows of the full parameters (one rank holds everything): what a CheckpointReader returns.
ParamRowReader reader_of(const Weights& w) {
  return [&w](const std::string& param, int64_t row_begin, int64_t rows, const Tensor& dst) {
    for (const model::Parameter* p : w.params) {
      if (p->name != param) continue;
      dst.copy_from(p->value.rows(row_begin, row_begin + rows).contiguous().view(dst.shape()));
      return;
    }
    FAIL("no parameter ", param);
  };
}

void whole_slice(const model::Parameter& p, const Tensor& local,
                 const std::function<void(const model::LocalRun&)>& visit) {
  model::for_each_local_run(p, 0, local.size(0), visit);
}

void export_all(const Weights& w, const model::ModelArgs& args, const std::string& out,
                DType dtype, int parts) {
  for (int k = 0; k < parts; ++k) export_hf_part(args, reader_of(w), out, dtype, k, parts);
  finish_hf_export(args, out, dtype, parts);
}

// The InputError of loading `folder`, with the keys titan_train passes unless told otherwise.
std::string load_error(const std::string& folder, const model::ModelArgs& args,
                       const HfFolderKeys& keys = {"checkpoint.initial_load_path", "model"}) {
  Weights w = make_weights(args, 0);
  try {
    load_hf_weights(folder, args, w.params, whole_slice, keys);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("fast") {

TEST_CASE("HF names: every part maps to Llama's HF name") {
  CHECK(hf_tensor_name("tok_embeddings.weight") == "model.embed_tokens.weight");
  CHECK(hf_tensor_name("layers.12.attention.wq.weight") == "model.layers.12.self_attn.q_proj.weight");
  CHECK(hf_tensor_name("layers.0.attention.wk.weight") == "model.layers.0.self_attn.k_proj.weight");
  CHECK(hf_tensor_name("layers.0.attention.wv.weight") == "model.layers.0.self_attn.v_proj.weight");
  CHECK(hf_tensor_name("layers.0.attention.wo.weight") == "model.layers.0.self_attn.o_proj.weight");
  CHECK(hf_tensor_name("layers.3.feed_forward.w1.weight") == "model.layers.3.mlp.gate_proj.weight");
  CHECK(hf_tensor_name("layers.3.feed_forward.w3.weight") == "model.layers.3.mlp.up_proj.weight");
  CHECK(hf_tensor_name("layers.3.feed_forward.w2.weight") == "model.layers.3.mlp.down_proj.weight");
  CHECK(hf_tensor_name("layers.1.attention_norm.weight") == "model.layers.1.input_layernorm.weight");
  CHECK(hf_tensor_name("layers.1.ffn_norm.weight") == "model.layers.1.post_attention_layernorm.weight");
  CHECK(hf_tensor_name("norm.weight") == "model.norm.weight");
  CHECK(hf_tensor_name("output.weight") == "lm_head.weight");
  CHECK_THROWS_AS(hf_tensor_name("layers.1.attention.wqkv.weight"), InputError);

  const std::vector<HfTensor> tensors = hf_tensors(small_args());
  CHECK(tensors.size() == 2 + 2 * 9 + 1);
  CHECK(tensors.front().hf_name == "model.embed_tokens.weight");
  CHECK(tensors.back().hf_name == "lm_head.weight");
  std::set<std::string> names;
  for (const HfTensor& t : tensors) names.insert(t.hf_name);
  CHECK(names.size() == tensors.size());
}

TEST_CASE("HF RoPE permutation: interleaved RoPE on our rows equals rotate-half RoPE on HF's rows") {
  // x holds one head's q at positions 0..S-1 in our layout; HF's layout is x with its columns
  // moved by hf_row. Rotating ours with model::rope_forward and HF's with HF's formula
  // (q·cos + rotate_half(q)·sin, cos/sin repeated over both halves) must give the same numbers
  // in the same places: that fixes the direction of the permutation.
  const int64_t S = 5, Dh = 8;
  model::RopeScaling no_scaling;
  no_scaling.enabled = false;
  Tensor cos = Tensor::empty({S, Dh / 2}, DType::F64), sin = Tensor::empty({S, Dh / 2}, DType::F64);
  model::rope_tables(cos, sin, Dh, 500000.0, no_scaling);
  Tensor ours = cast(testing::random_tensor({S, Dh}, DType::F32, 7), DType::F64);
  Tensor hf = Tensor::empty({S, Dh}, DType::F64);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t r = 0; r < Dh; ++r) hf.data<double>()[s * Dh + hf_row(r, Dh)] = ours.data<double>()[s * Dh + r];
  model::rope_forward(ours, cos, sin, S, 1, Dh);
  for (int64_t s = 0; s < S; ++s) {
    const double* q = hf.data<double>() + s * Dh;
    for (int64_t k = 0; k < Dh; ++k) {
      const int64_t i = k % (Dh / 2);
      const double c = cos.data<double>()[s * (Dh / 2) + i], n = sin.data<double>()[s * (Dh / 2) + i];
      const double rotated = k < Dh / 2 ? -q[k + Dh / 2] : q[k - Dh / 2];
      const double hf_value = q[k] * c + rotated * n;
      // HF's element k is ours at the row that maps to k.
      int64_t r = 0;
      while (hf_row(r, Dh) != k) ++r;
      CHECK(hf_value == doctest::Approx(ours.data<double>()[s * Dh + r]).epsilon(1e-12));
    }
  }
  // A bijection within each head.
  std::set<int64_t> image;
  for (int64_t r = 0; r < 3 * Dh; ++r) image.insert(hf_row(r, Dh));
  CHECK(image.size() == 3 * Dh);
  CHECK(*image.rbegin() == 3 * Dh - 1);
  CHECK(hf_row(1, Dh) == Dh / 2);  // our (x0, x1) pair is HF's (x0, x4)
}

TEST_CASE("HF export then import gives bit-identical f32 weights and byte-identical files") {
  const model::ModelArgs args = small_args();
  const std::string dir = testing::scratch_dir("hf_roundtrip");
  Weights original = make_weights(args, 1234);
  export_all(original, args, dir + "/f32", DType::F32, 3);
  CHECK(fs::exists(dir + "/f32/model-00003-of-00003.safetensors"));
  CHECK(fs::exists(dir + "/f32/model.safetensors.index.json"));
  CHECK(fs::exists(dir + "/f32/config.json"));
  CHECK_FALSE(fs::exists(dir + "/f32.tmp"));

  Weights loaded = make_weights(args, 0);
  load_hf_weights(dir + "/f32", args, loaded.params, whole_slice);
  for (size_t i = 0; i < original.params.size(); ++i) {
    CHECK_MESSAGE(testing::bitwise_equal(loaded.params[i]->value, original.params[i]->value),
                  original.params[i]->name);
  }
  export_all(loaded, args, dir + "/again", DType::F32, 3);
  for (const char* f : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                        "model-00003-of-00003.safetensors", "model.safetensors.index.json",
                        "config.json"}) {
    CHECK_MESSAGE(files_equal(dir + "/f32/" + f, dir + "/again/" + f), f);
  }
  // An export over an existing one replaces it whole.
  export_all(loaded, args, dir + "/f32", DType::F32, 1);
  CHECK(fs::exists(dir + "/f32/model-00001-of-00001.safetensors"));
  CHECK_FALSE(fs::exists(dir + "/f32/model-00002-of-00003.safetensors"));
}

TEST_CASE("HF bf16 export round-trips exactly through bf16") {
  const model::ModelArgs args = small_args();
  const std::string dir = testing::scratch_dir("hf_bf16");
  Weights original = make_weights(args, 99);
  export_all(original, args, dir + "/a", DType::BF16, 2);
  SafetensorsFile file(dir + "/a/model-00001-of-00002.safetensors");
  CHECK(file.dtype("model.embed_tokens.weight") == DType::BF16);
  Weights loaded = make_weights(args, 0);
  load_hf_weights(dir + "/a", args, loaded.params, whole_slice);
  for (size_t i = 0; i < original.params.size(); ++i) {
    CHECK_MESSAGE(testing::bitwise_equal(loaded.params[i]->value,
                                         testing::bf16_values(original.params[i]->value)),
                  original.params[i]->name);
  }
  export_all(loaded, args, dir + "/b", DType::BF16, 2);
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    CHECK_MESSAGE(files_equal(dir + "/a/" + f, dir + "/b/" + f), f);
  }
  CHECK(read_file(dir + "/a/config.json").find("\"torch_dtype\": \"bfloat16\"") != std::string::npos);
}

TEST_CASE("HF import: parameters of another dtype are filled through the staging buffer") {
  // An f32 folder into bf16 parameters rounds as cast() does, and a bf16 folder into f64 ones
  // widens exactly: both go through one host buffer reused from parameter to parameter.
  const model::ModelArgs args = small_args();
  const std::string dir = testing::scratch_dir("hf_staged");
  Weights original = make_weights(args, 23);
  export_all(original, args, dir + "/f32", DType::F32, 1);
  export_all(original, args, dir + "/bf16", DType::BF16, 1);
  for (const auto& [folder, dtype] : {std::pair{std::string("/f32"), DType::BF16},
                                      std::pair{std::string("/bf16"), DType::F64}}) {
    CAPTURE(folder);
    Weights loaded = make_weights(args, 0);
    for (model::Parameter* p : loaded.params) p->value = Tensor::empty(p->local_shape(), dtype);
    load_hf_weights(dir + folder, args, loaded.params, whole_slice);
    for (size_t i = 0; i < original.params.size(); ++i) {
      const Tensor& value = original.params[i]->value;
      const Tensor expected =
          cast(folder == "/f32" ? value : testing::bf16_values(value), dtype);
      CHECK_MESSAGE(testing::bitwise_equal(loaded.params[i]->value, expected),
                    original.params[i]->name);
    }
  }
}

TEST_CASE("HF import: an FSDP shard reads its own rows and leaves the padding zero") {
  const model::ModelArgs args = small_args();
  const std::string dir = testing::scratch_dir("hf_shard");
  Weights original = make_weights(args, 5);
  export_all(original, args, dir + "/hf", DType::F32, 1);
  // Shard 1 of 3 of every parameter: R = ⌈rows/3⌉ rows from row R.
  Weights shards = make_weights(args, 0);
  std::vector<Tensor> locals;
  for (model::Parameter* p : shards.params) {
    const int64_t R = (p->shape[0] + 2) / 3;
    Shape shape = p->shape;
    shape[0] = R;
    p->value = Tensor::zeros(shape, DType::F32);
    p->value.fill_(7.0);
  }
  load_hf_weights(dir + "/hf", args, shards.params,
                  [](const model::Parameter& p, const Tensor& local,
                     const std::function<void(const model::LocalRun&)>& visit) {
                    const int64_t R = local.size(0);
                    model::for_each_local_run(p, R, std::min(R, p.shape[0] - R), visit);
                  });
  for (size_t i = 0; i < shards.params.size(); ++i) {
    const Tensor& local = shards.params[i]->value;
    const Tensor& full = original.params[i]->value;
    const int64_t R = local.size(0);
    const int64_t n = std::min(R, full.size(0) - R);
    CHECK(testing::bitwise_equal(local.rows(0, n).contiguous(), full.rows(R, R + n).contiguous()));
    if (n < R) CHECK(testing::to_doubles(local.rows(n, R).contiguous()) == std::vector<double>((R - n) * shards.params[i]->cols(), 0.0));
  }
}

TEST_CASE("HF config json: every dim that differs from the model is named in one line") {
  const model::ModelArgs args = small_args();
  const std::string dir = testing::scratch_dir("hf_config");
  Weights w = make_weights(args, 3);
  export_all(w, args, dir + "/hf", DType::F32, 1);
  const HfConfig config = read_hf_config(dir + "/hf/config.json");
  CHECK(config.args.dim == args.dim);
  CHECK(config.args.n_kv_heads == args.n_kv_heads);
  CHECK(config.args.norm_eps == args.norm_eps);
  CHECK(config.args.rope_theta == args.rope_theta);
  CHECK(config.args.rope_scaling.enabled);
  CHECK(config.args.rope_scaling.factor == args.rope_scaling.factor);
  CHECK_NOTHROW(check_hf_config(config, args, "x"));

  model::ModelArgs other = args;
  other.dim = 128;
  other.n_layers = 3;
  other.rope_theta = 10000;
  const std::string message = load_error(dir + "/hf", other);
  CHECK(message.find(dir + "/hf/config.json") != std::string::npos);
  CHECK(message.find("3 differences: hidden_size is 64 but the model's dim is 128; "
                     "num_hidden_layers is 2 but the model's n_layers is 3; rope_theta is "
                     "500000.0 but the model's rope_theta is 10000.0); pick the model.flavor") !=
        std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
  // The fix names the caller's options, or none: checkpoint/ knows no program's keys.
  const std::string plain = load_error(dir + "/hf", other, HfFolderKeys{});
  CHECK(plain.find("3 differences: hidden_size is 64") != std::string::npos);
  CHECK(plain.find("; load it with the model it was saved for") != std::string::npos);
  CHECK(plain.find("model.flavor") == std::string::npos);

  std::ofstream(dir + "/hf/config.json") << R"({"model_type": "llama", "hidden_size": "64"})";
  CHECK(load_error(dir + "/hf", args).find("hidden_size: expected a positive integer") != std::string::npos);
  std::ofstream(dir + "/hf/config.json") << R"({"model_type": "mistral"})";
  CHECK(load_error(dir + "/hf", args).find("model_type: is not \"llama\"") != std::string::npos);
  std::ofstream(dir + "/hf/config.json") << "{not json";
  CHECK(load_error(dir + "/hf", args).find("not valid JSON") != std::string::npos);
}

TEST_CASE("HF index: bad shard names missing shards and missing tensors are refused") {
  const model::ModelArgs args = small_args();
  const std::string dir = testing::scratch_dir("hf_index");
  Weights w = make_weights(args, 3);
  export_all(w, args, dir + "/hf", DType::F32, 2);
  const std::string index = dir + "/hf/model.safetensors.index.json";
  const std::string good = read_file(index);
  auto with_index = [&](const std::string& text) {
    std::ofstream(index, std::ios::trunc) << text;
    return load_error(dir + "/hf", args);
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
    return text;
  };
  std::string m = with_index(replaced("model-00002-of-00002", "../model-00002-of-00002"));
  CHECK(m.find("not a plain file name") != std::string::npos);
  CHECK(m.find(index) != std::string::npos);
  CHECK(with_index(replaced("model-00002-of-00002", "sub/model-00002-of-00002")).find("not a plain file name") != std::string::npos);
  m = with_index(replaced("model-00002-of-00002", "model-00009-of-00002"));
  CHECK(m.find("names shard 'model-00009-of-00002.safetensors'") != std::string::npos);
  CHECK(m.find("missing") != std::string::npos);
  m = with_index(replaced("\"lm_head.weight\"", "\"lm_head.weight.unused\""));
  CHECK(m.find("lacks tensors the model needs: lm_head.weight") != std::string::npos);
  m = with_index(replaced("\"model.norm.weight\": \"model-00002", "\"model.norm.weight\": \"model-00001"));
  CHECK(m.find("puts model.norm.weight in") != std::string::npos);
  CHECK(with_index("{\"weight_map\": 3}").find("no \"weight_map\" object") != std::string::npos);
  CHECK(with_index("{\"weight_map\": {\"x\": 3}}").find("is not a file name string") != std::string::npos);

  // A truncated shard: the safetensors reader names it.
  std::ofstream(index, std::ios::trunc) << good;
  const std::string shard = dir + "/hf/model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  m = load_error(dir + "/hf", args);
  CHECK(m.find(shard) != std::string::npos);
  CHECK(m.find("past its end") != std::string::npos);
}

TEST_CASE("HF import: a single model.safetensors with bf16 tensors and a folder with neither") {
  const model::ModelArgs args = small_args();
  const std::string dir = testing::scratch_dir("hf_single");
  Weights w = make_weights(args, 8);
  export_all(w, args, dir + "/hf", DType::BF16, 1);
  fs::remove(dir + "/hf/model.safetensors.index.json");
  fs::rename(dir + "/hf/model-00001-of-00001.safetensors", dir + "/hf/model.safetensors");
  Weights loaded = make_weights(args, 0);
  load_hf_weights(dir + "/hf", args, loaded.params, whole_slice);
  CHECK(testing::bitwise_equal(loaded.params[0]->value, testing::bf16_values(w.params[0]->value)));
  fs::remove(dir + "/hf/model.safetensors");
  CHECK(load_error(dir + "/hf", args).find("has neither model.safetensors.index.json nor model.safetensors") != std::string::npos);
  CHECK(load_error(dir + "/nothing", args).find("is not a folder") != std::string::npos);
}

TEST_CASE("HF export: PyTorch's Llama forward over the exported folder gives the model's loss" *
          doctest::test_suite("fast torch")) {
  // test/checkpoint/hf_llama_reference.py reads the folder with its own safetensors parser and
  // HF's conventions (rotate-half RoPE with llama3 scaling, GQA) in float64; titan_train's
  // Transformer::evaluate computes in f32 on the same weights and tokens.
  const model::ModelArgs args = small_args();
  const std::string dir = testing::scratch_dir("hf_reference");
  Weights w = make_weights(args, 77);
  export_all(w, args, dir + "/hf", DType::F32, 2);
  const int64_t B = 2, S = 24;
  Tensor windows = testing::random_tokens(B, S + 1, args.vocab_size, 5);
  // Sequence b of the file is ids [b·S, b·S + S + 1): write each window's first S ids, then the
  // last window's final id, and make the windows overlap the way the file says.
  std::vector<int32_t> ids;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) ids.push_back(windows.data<int32_t>()[b * (S + 1) + s]);
  ids.push_back(windows.data<int32_t>()[(B - 1) * (S + 1) + S]);
  Tensor inputs = Tensor::empty({B, S}, DType::I32), targets = Tensor::empty({B, S}, DType::I32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      inputs.data<int32_t>()[b * S + s] = ids[b * S + s];
      targets.data<int32_t>()[b * S + s] = ids[b * S + s + 1];
    }
  {
    std::ofstream tokens(dir + "/tokens.txt");
    for (int32_t id : ids) tokens << id << ' ';
  }
  const double ours = w.model->evaluate(inputs, targets) / static_cast<double>(B * S);
  const double theirs = testing::hf_reference_loss(dir + "/hf", dir + "/tokens.txt", S, B);
  MESSAGE("titan_train ", ours, ", PyTorch reference ", theirs);
  CHECK(std::abs(ours - theirs) <= 1e-5 * std::abs(theirs));
}

}  // TEST_SUITE
