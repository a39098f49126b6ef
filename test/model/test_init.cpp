// Model flavors, parameter layout and torchtitan's initialisation, and the property FSDP/TP
// rely on: initialising any rows of a parameter gives exactly those rows of the whole.
#include <doctest/doctest.h>

#include <cmath>

#include "core/check.h"
#include "model/transformer.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

namespace {

struct Stats {
  double mean = 0, std = 0, max_abs = 0;
};

Stats stats_of(const Tensor& t) {
  std::vector<double> v = testing::to_doubles(t);
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) {
    s.std += (x - s.mean) * (x - s.mean);
    s.max_abs = std::max(s.max_abs, std::fabs(x));
  }
  s.std = std::sqrt(s.std / static_cast<double>(v.size()));
  return s;
}

Parameter* find(Transformer& model, const std::string& name) {
  for (Parameter* p : model.parameters()) {
    if (p->name == name) return p;
  }
  FAIL("no parameter " << name);
  return nullptr;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("flavors have torchtitan's dims and parameter counts") {
    ModelArgs debug = model_flavor("debugmodel");
    CHECK(debug.dim == 256);
    CHECK(debug.n_layers == 6);
    CHECK(debug.n_heads == 16);
    CHECK(debug.n_kv_heads == 16);
    CHECK(debug.ffn_dim == 768);
    CHECK(debug.vocab_size == 2048);
    CHECK(debug.rope_theta == 500000.0);
    CHECK(debug.norm_eps == 1e-5);
    ModelArgs b8 = model_flavor("llama3_8b");
    CHECK(b8.n_kv_heads == 8);
    CHECK(b8.ffn_dim == 14336);
    CHECK(count_parameters(b8) == 8030261248);  // Meta's published Llama 3 8B size
    CHECK(count_parameters(model_flavor("llama3_70b")) == 70553706496);
    ModelArgs b405 = model_flavor("llama3_405b");
    CHECK(b405.dim == 16384);
    CHECK(b405.n_layers == 126);
    CHECK(b405.ffn_dim == 53248);
    CHECK_THROWS_AS(model_flavor("llama3_1t"), InputError);
  }

  TEST_CASE("a 405B model is declared without storage: parameters get memory only when allocated") {
    Transformer huge(model_flavor("llama3_405b"), DType::F32);
    int64_t elements = 0;
    for (Parameter* p : huge.parameters()) {
      CHECK_FALSE(p->allocated());
      elements += p->shape.numel();
    }
    CHECK(elements == count_parameters(model_flavor("llama3_405b")));
    CHECK(elements == 405853388800);
    CHECK_THROWS_WITH_AS(huge.init_weights(0), doctest::Contains("allocate it first"), Error);
  }

  TEST_CASE("model args are validated with messages that name the key") {
    ModelArgs args = model_flavor("debugmodel");
    args.n_heads = 7;
    CHECK_THROWS_WITH_AS(validate_model_args(args, "model"),
                         doctest::Contains("model.n_heads: 7 heads do not divide model.dim 256"),
                         InputError);
    // The key names are the caller's: another program names its own options.
    CHECK_THROWS_WITH_AS(validate_model_args(args, "arch"),
                         doctest::Contains("arch.n_heads: 7 heads do not divide arch.dim 256"),
                         InputError);
    args = model_flavor("debugmodel");
    args.n_kv_heads = 3;
    CHECK_THROWS_WITH_AS(validate_model_args(args, "model"),
                         doctest::Contains("model.n_kv_heads"), InputError);
    args = model_flavor("debugmodel");
    args.vocab_size = 0;
    CHECK_THROWS_WITH_AS(validate_model_args(args, "model"),
                         doctest::Contains("model.vocab_size"), InputError);
  }

  TEST_CASE("parameters: torchtitan's names and fused wqkv and w13 with their parts") {
    Transformer model(model_flavor("debugmodel"), DType::F32);
    model.allocate();
    std::vector<Parameter*> params = model.parameters();
    CHECK(params.size() == 3 + 6 * 6);
    CHECK(params.front()->name == "tok_embeddings.weight");
    CHECK(params.back()->name == "output.weight");
    Parameter* wqkv = find(model, "layers.2.attention.wqkv.weight");
    CHECK(wqkv->shape == Shape{768, 256});
    REQUIRE(wqkv->parts.size() == 3);
    CHECK(wqkv->parts[1].name == "layers.2.attention.wk.weight");
    Parameter* w13 = find(model, "layers.2.feed_forward.w13.weight");
    CHECK(w13->shape == Shape{1536, 256});
    CHECK(w13->parts[0].name == "layers.2.feed_forward.w1.weight");
    CHECK(w13->parts[1].name == "layers.2.feed_forward.w3.weight");
    CHECK(model.param_groups().size() == 8);  // embeddings, 6 blocks, head
  }

  TEST_CASE(
      "initialisation follows torchtitan: std 0.02 with depth-scaled wo/w2/w3 and output at "
      "dim^-0.5 within 3 sigma") {
    Transformer model(model_flavor("debugmodel"), DType::F32);
    model.allocate();
    model.init_weights(0);
    CHECK(stats_of(find(model, "norm.weight")->value).std == 0.0);
    CHECK(stats_of(find(model, "norm.weight")->value).mean == 1.0);
    CHECK(stats_of(find(model, "tok_embeddings.weight")->value).std ==
          doctest::Approx(1.0).epsilon(0.01));
    Parameter* wqkv = find(model, "layers.3.attention.wqkv.weight");
    CHECK(stats_of(wqkv->value).std == doctest::Approx(0.02).epsilon(0.02));
    const double depth_std = 0.02 / std::sqrt(2.0 * 4);  // layer 3
    CHECK(stats_of(find(model, "layers.3.attention.wo.weight")->value).std ==
          doctest::Approx(depth_std).epsilon(0.02));
    CHECK(stats_of(find(model, "layers.3.feed_forward.w2.weight")->value).std ==
          doctest::Approx(depth_std).epsilon(0.02));
    Parameter* w13 = find(model, "layers.3.feed_forward.w13.weight");
    CHECK(stats_of(w13->value.rows(0, 768)).std == doctest::Approx(0.02).epsilon(0.02));  // w1
    CHECK(stats_of(w13->value.rows(768, 1536)).std ==
          doctest::Approx(depth_std).epsilon(0.02));  // w3
    const double out_std = 1.0 / 16.0;                // 256^-0.5
    Stats out = stats_of(find(model, "output.weight")->value);
    CHECK(out.std ==
          doctest::Approx(out_std * 0.9866).epsilon(0.02));  // N(0,1) cut at ±3σ has std 0.9866
    CHECK(out.max_abs <= 3 * out_std);
  }

  TEST_CASE(
      "initialisation is a pure function of (seed name index): any rows give the matching slice") {
    Transformer model(model_flavor("debugmodel"), DType::F32);
    model.allocate();
    model.init_weights(5);
    for (Parameter* p : model.parameters()) {
      int64_t first_row = 0;
      for (const ParamPart& part : p->parts) {
        // A shard of the middle rows of this part, as a TP or FSDP rank would hold it.
        int64_t begin = part.rows / 4, end = std::max(begin + 1, part.rows / 2);
        Tensor shard = Tensor::empty(
            p->shape.ndim() == 2 ? Shape{end - begin, p->cols()} : Shape{end - begin}, DType::F32);
        init_part_rows(shard, part, p->cols(), begin, 5);
        CHECK_MESSAGE(testing::bitwise_equal(
                          shard, p->value.rows(first_row + begin, first_row + end).contiguous()),
                      part.name);
        first_row += part.rows;
      }
    }
    Transformer other(model_flavor("debugmodel"), DType::F32);
    other.allocate();
    other.init_weights(6);
    CHECK_FALSE(
        testing::bitwise_equal(other.parameters()[1 + 1]->value, model.parameters()[1 + 1]->value));
    Transformer same(model_flavor("debugmodel"), DType::F32);
    same.allocate();
    same.init_weights(5);
    CHECK(testing::bitwise_equal(same.parameters()[2]->value, model.parameters()[2]->value));
  }

  TEST_CASE("a tensor-parallel slice and any FSDP rows of it initialise to the matching block") {
    // The slices parallel/'s plan gives tp rank 2 of 4: wqkv and w13 split every part by rows,
    // wo and w2 by columns, the embedding by vocab rows, the norms whole. Each slice, and every
    // FSDP shard of its rows (3 shards, the last one short), must equal that block of the
    // whole parameter initialised on one rank.
    const int64_t tp = 4, tp_rank = 2;
    Transformer whole(model_flavor("debugmodel"), DType::F32);
    whole.allocate();
    whole.init_weights(7);
    Transformer sliced(model_flavor("debugmodel"), DType::F32);
    auto slice_of = [&](const std::string& name) -> ParamSlice {
      if (name.ends_with("wqkv.weight") || name.ends_with("w13.weight") ||
          name == "tok_embeddings.weight" || name == "output.weight")
        return {0, tp_rank, tp};
      if (name.ends_with("wo.weight") || name.ends_with("w2.weight")) return {1, tp_rank, tp};
      return {};
    };
    for (Parameter* p : sliced.parameters()) p->slice = slice_of(p->name);
    std::vector<Parameter*> full = whole.parameters(), local = sliced.parameters();
    for (size_t i = 0; i < full.size(); ++i) {
      const Parameter& p = *local[i];
      const Tensor& all = full[i]->value;
      // The expected slice, cut from the whole parameter part by part.
      Tensor expected = Tensor::empty(p.local_shape(), DType::F32);
      if (p.slice.dim == 1) {
        const int64_t width = p.local_shape()[1];
        expected.copy_from(all.narrow(1, tp_rank * width, width));
      } else if (p.slice.dim == 0) {
        int64_t src = 0, dst = 0;
        for (const ParamPart& part : p.parts) {
          const int64_t rows = part.rows / tp;
          expected.rows(dst, dst + rows).copy_from(all.rows(src + tp_rank * rows, src + (tp_rank + 1) * rows));
          src += part.rows;
          dst += rows;
        }
      } else {
        expected.copy_from(all);
      }
      Tensor got = Tensor::empty(p.local_shape(), DType::F32);
      init_local_rows(got, p, 0, 7);
      CHECK_MESSAGE(testing::bitwise_equal(got, expected), p.name);
      const int64_t rows = p.local_shape()[0], shard_rows = (rows + 2) / 3;
      for (int64_t begin = 0; begin < rows; begin += shard_rows) {
        const int64_t end = std::min(rows, begin + shard_rows);
        Tensor shard = Tensor::empty(expected.rows(begin, end).shape(), DType::F32);
        init_local_rows(shard, p, begin, 7);
        CHECK_MESSAGE(testing::bitwise_equal(shard, expected.rows(begin, end).contiguous()),
                      p.name << " rows " << begin << ".." << end);
      }
    }
  }

}  // TEST_SUITE
