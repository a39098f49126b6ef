// CheckpointReader: metadata.json round-trips through metadata_json, regions spanning several
// pieces and files read back exactly (with exact dtype conversion), CRC32C is the standard one,
// and every class of damaged or hostile step folder is refused with one InputError line naming
// the file — never a crash, never an allocation sized by an unchecked field.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "checkpoint/checkpoint_reader.h"
#include "core/bf16.h"
#include "core/check.h"
#include "core/crc32c.h"
#include "model/config.h"
#include "support/process.h"

using namespace titan;
using namespace titan::checkpoint;
namespace fs = std::filesystem;

namespace {

// A step folder holding
//   w  f32 [4, 6]: rows 0–1 (file 0), rows 2–3 × cols 0–2 (file 0), rows 2–3 × cols 3–5 (file 1)
//   b  bf16 [5]:   [0, 3) and [3, 5) (file 1)
// with w[r][c] = 10·r + c and b[i] = i + 0.5.
struct Fixture {
  std::string folder;
  CheckpointMetadata meta;
  std::string file0, file1;  // the bytes of the two files
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <class T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

Fixture make_fixture(const std::string& name) {
  Fixture f;
  f.folder = testing::scratch_dir("checkpoint_reader") + "/" + name;
  fs::remove_all(f.folder);
  fs::create_directories(f.folder);
  auto w = [](int r, int c) { return static_cast<float>(10 * r + c); };
  // file 0: a 16-byte prefix (a header, say), then the first two pieces of w.
  f.file0.assign(16, 'h');
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 6; ++c) append(f.file0, w(r, c));
  for (int r = 2; r < 4; ++r)
    for (int c = 0; c < 3; ++c) append(f.file0, w(r, c));
  for (int r = 2; r < 4; ++r)
    for (int c = 3; c < 6; ++c) append(f.file1, w(r, c));
  for (int i = 0; i < 5; ++i) append(f.file1, float_to_bf16(static_cast<float>(i) + 0.5f));
  write_bytes(f.folder + "/rank00000.safetensors", f.file0);
  write_bytes(f.folder + "/rank00001.safetensors", f.file1);

  CheckpointMetadata& m = f.meta;
  m.step = 7;
  m.optimizer_steps = 7;
  m.loader_samples_consumed = 56;
  m.model = model::model_flavor("debugmodel");
  m.model.norm_eps = 1e-5;  // a double that must round-trip exactly
  m.mesh = {.pp = 2, .dp_replicate = 1, .dp_shard = 2, .cp = 2, .tp = 2};
  m.files = {{"rank00000.safetensors", f.file0.size(), crc32c(f.file0.data(), f.file0.size())},
             {"rank00001.safetensors", f.file1.size(), crc32c(f.file1.data(), f.file1.size())}};
  StoredTensor wt{DType::F32, Shape{4, 6}, {}};
  wt.pieces.push_back({{0, 0}, {2, 6}, 0, 16, 64});
  wt.pieces.push_back({{2, 0}, {2, 3}, 0, 64, 88});
  wt.pieces.push_back({{2, 3}, {2, 3}, 1, 0, 24});
  StoredTensor bt{DType::BF16, Shape{5}, {}};
  bt.pieces.push_back({{0}, {3}, 1, 24, 30});
  bt.pieces.push_back({{3}, {2}, 1, 30, 34});
  m.tensors["w"] = wt;
  m.tensors["b"] = bt;
  write_bytes(f.folder + "/metadata.json", metadata_json(m));
  return f;
}

std::string metadata_path(const Fixture& f) { return f.folder + "/metadata.json"; }

// The fixture with its metadata changed by `change`, then written.
Fixture with_metadata(const std::string& name,
                      const std::function<void(CheckpointMetadata&)>& change) {
  Fixture f = make_fixture(name);
  change(f.meta);
  write_bytes(metadata_path(f), metadata_json(f.meta));
  return f;
}

// The fixture with metadata.json's text replaced.
Fixture with_text(const std::string& name, const std::function<std::string(std::string)>& change) {
  Fixture f = make_fixture(name);
  write_bytes(metadata_path(f), change(metadata_json(f.meta)));
  return f;
}

std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return text.replace(at, from.size(), to);
}

// Opening the folder throws one InputError line holding `fragment` and the path of `file`.
void check_refused(const Fixture& f, const std::string& fragment,
                   const std::string& file = "metadata.json") {
  try {
    CheckpointReader reader(f.folder);
    FAIL("accepted: expected an error holding '" << fragment << "'");
  } catch (const InputError& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find(fragment) != std::string::npos, message);
    CHECK_MESSAGE(message.find(f.folder + "/" + file) != std::string::npos, message);
    CHECK_MESSAGE(message.find('\n') == std::string::npos, message);
  }
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("checkpoint reader: metadata.json round-trips every field") {
    const Fixture f = make_fixture("roundtrip");
    const CheckpointReader reader(f.folder);
    const CheckpointMetadata& m = reader.metadata();
    CHECK(m.step == 7);
    CHECK(m.optimizer_steps == 7);
    CHECK(m.loader_samples_consumed == 56);
    const model::ModelArgs expected = f.meta.model;
    CHECK(m.model.flavor == expected.flavor);
    CHECK(m.model.dim == expected.dim);
    CHECK(m.model.n_layers == expected.n_layers);
    CHECK(m.model.n_heads == expected.n_heads);
    CHECK(m.model.n_kv_heads == expected.n_kv_heads);
    CHECK(m.model.ffn_dim == expected.ffn_dim);
    CHECK(m.model.vocab_size == expected.vocab_size);
    CHECK(m.model.norm_eps == expected.norm_eps);
    CHECK(m.model.rope_theta == expected.rope_theta);
    CHECK(m.model.rope_scaling.enabled == expected.rope_scaling.enabled);
    CHECK(m.model.rope_scaling.factor == expected.rope_scaling.factor);
    CHECK(m.model.rope_scaling.original_max_position ==
          expected.rope_scaling.original_max_position);
    CHECK(m.mesh.pp == 2);
    CHECK(m.mesh.dp_shard == 2);
    CHECK(m.mesh.cp == 2);
    CHECK(m.mesh.tp == 2);
    REQUIRE(m.files.size() == 2);
    CHECK(m.files[1].name == "rank00001.safetensors");
    CHECK(m.files[1].crc32c == f.meta.files[1].crc32c);
    REQUIRE(m.tensors.size() == 2);
    CHECK(m.tensors.at("w").shape == Shape{4, 6});
    CHECK(m.tensors.at("b").dtype == DType::BF16);
    CHECK(m.tensors.at("w").pieces[2].byte_end == 24);
    CHECK(reader.contains("w"));
    CHECK_FALSE(reader.contains("x"));
    CHECK(metadata_json(m) == metadata_json(f.meta));
  }

  TEST_CASE("checkpoint reader: a LoRA run's adapters round-trip and a bad one is refused") {
    const Fixture f = with_metadata("lora", [](CheckpointMetadata& m) {
      m.model.lora.rank = 8;
      m.model.lora.alpha = 16;
      m.model.lora.targets = {"wqkv", "w2"};
    });
    const std::string text = testing::read_file(metadata_path(f));
    // Its own object beside rope_scaling, not inside it.
    CHECK(text.find("\"original_max_position\": 8192}, \"lora\": {") != std::string::npos);
    const CheckpointReader reader(f.folder);
    const model::LoraConfig& lora = reader.metadata().model.lora;
    CHECK(lora.rank == 8);
    CHECK(lora.alpha == 16);
    CHECK(lora.targets == std::vector<std::string>{"wqkv", "w2"});
    CHECK(metadata_json(reader.metadata()) == metadata_json(f.meta));
    // A run without adapters writes no lora object.
    CHECK(metadata_json(make_fixture("no_lora").meta).find("lora") == std::string::npos);
    check_refused(with_text("lora_target",
                            [](std::string t) {
                              return replace_once(t, "\"original_max_position\": 8192}",
                                                  "\"original_max_position\": 8192}, \"lora\": "
                                                  "{\"rank\": 8, \"alpha\": 16, "
                                                  "\"targets\": \"wqkv,lm_head\"}");
                            }),
                  "lm_head");
  }

  TEST_CASE("checkpoint reader: CRC32C is the standard Castagnoli CRC and chains") {
    const std::string text = "123456789";
    CHECK(crc32c(text.data(), text.size()) == 0xE3069283u);  // RFC 3720's check value
    const uint32_t head = crc32c(text.data(), 4);
    CHECK(crc32c(text.data() + 4, 5, head) == 0xE3069283u);
  }

  TEST_CASE("checkpoint reader: regions across pieces and files read back exactly") {
    const Fixture f = make_fixture("regions");
    const CheckpointReader reader(f.folder);
    Tensor all = Tensor::empty({4, 6}, DType::F32);
    reader.read_region("w", 0, 4, 0, 6, all);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 6; ++c) CHECK(all.data<float>()[r * 6 + c] == 10 * r + c);
    // Rows 1–2, columns 2–4: touches all three pieces of w.
    Tensor block = Tensor::empty({2, 3}, DType::F32);
    reader.read_region("w", 1, 2, 2, 3, block);
    const float expected[] = {12, 13, 14, 22, 23, 24};
    for (int i = 0; i < 6; ++i) CHECK(block.data<float>()[i] == expected[i]);
    // f32 → f64 is exact.
    Tensor wide = Tensor::empty({1, 6}, DType::F64);
    reader.read_region("w", 3, 1, 0, 6, wide);
    for (int c = 0; c < 6; ++c) CHECK(wide.data<double>()[c] == 30 + c);
    // bf16 → f32 across both pieces of b.
    Tensor b = Tensor::empty({4}, DType::F32);
    reader.read_region("b", 1, 4, 0, 1, b);
    for (int i = 0; i < 4; ++i) CHECK(b.data<float>()[i] == static_cast<float>(i + 1) + 0.5f);
    // f32 → bf16 would round: refused.
    Tensor narrow = Tensor::empty({1, 6}, DType::BF16);
    CHECK_THROWS_WITH_AS(reader.read_region("w", 0, 1, 0, 6, narrow),
                         doctest::Contains("does not convert exactly"), InputError);
    CHECK_THROWS_WITH_AS(reader.read_region("nope", 0, 1, 0, 1, b),
                         doctest::Contains("no tensor 'nope'"), InputError);
  }

  TEST_CASE("checkpoint reader: a file whose CRC32C differs is refused naming it") {
    Fixture f = make_fixture("crc");
    const CheckpointReader reader(f.folder);
    reader.verify_file(0);
    reader.verify_file(1);
    std::string damaged = f.file1;
    damaged[5] ^= 0x01;
    write_bytes(f.folder + "/rank00001.safetensors", damaged);
    CHECK_THROWS_WITH_AS(reader.verify_file(1),
                         doctest::Contains((f.folder + "/rank00001.safetensors: CRC32C").c_str()),
                         InputError);
    reader.verify_file(0);
  }

  TEST_CASE(
      "checkpoint reader: a NaN or an infinity is refused naming the file and the tensor and the "
      "element") {
    Fixture f = make_fixture("nonfinite");
    // w[3][4] (file 1, piece rows 2–3 × cols 3–5: element 1·3 + 1) becomes NaN; b[1] -inf (bf16).
    std::string file1 = f.file1;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(&file1[(1 * 3 + 1) * 4], &nan, 4);
    const uint16_t minus_inf = 0xFF80;
    std::memcpy(&file1[24 + 2], &minus_inf, 2);
    write_bytes(f.folder + "/rank00001.safetensors", file1);
    const CheckpointReader reader(f.folder);
    const std::string path = f.folder + "/rank00001.safetensors";
    Tensor all = Tensor::empty({4, 6}, DType::F32);
    CHECK_THROWS_WITH_AS(reader.read_region("w", 0, 4, 0, 6, all),
                         doctest::Contains((path + ": w[4, 6] holds NaN at [3, 4]: the run had "
                                                   "diverged when it saved this step")
                                               .c_str()),
                         InputError);
    // Rows that do not reach it read as before. A column block reads its own columns and no
    // others (the rank that owns w[3][4] is the one that refuses it): the element beside it reads,
    // the element itself is refused.
    Tensor top = Tensor::empty({2, 6}, DType::F32);
    reader.read_region("w", 0, 2, 0, 6, top);
    Tensor corner = Tensor::empty({1, 1}, DType::F32);
    reader.read_region("w", 3, 1, 3, 1, corner);
    CHECK_THROWS_WITH_AS(reader.read_region("w", 3, 1, 4, 1, corner),
                         doctest::Contains((path + ": w[4, 6] holds NaN at [3, 4]").c_str()),
                         InputError);
    Tensor b = Tensor::empty({5}, DType::F32);
    CHECK_THROWS_WITH_AS(reader.read_region("b", 0, 5, 0, 1, b),
                         doctest::Contains((path + ": b[5] holds -inf at [1]").c_str()),
                         InputError);
  }

  TEST_CASE("checkpoint reader: malformed JSON is refused") {
    check_refused(with_text("malformed", [](std::string t) { return t.substr(0, t.size() / 2); }),
                  "not JSON");
    check_refused(with_text("not_object", [](std::string) { return std::string("[1, 2]"); }),
                  "expected an object");
    check_refused(with_text("foreign",
                            [](std::string t) {
                              return replace_once(t, "titan_train.sharded_checkpoint", "other");
                            }),
                  "format: 'other'");
    check_refused(with_text("version",
                            [](std::string t) {
                              return replace_once(t, "\"version\": 1", "\"version\": 2");
                            }),
                  "version: 2");
  }

  TEST_CASE("checkpoint reader: a missing metadata.json or field is refused") {
    Fixture none = make_fixture("no_metadata");
    fs::remove(metadata_path(none));
    check_refused(none, "missing");
    check_refused(
        with_text("no_step", [](std::string t) { return replace_once(t, "\"step\": 7,", ""); }),
        "step: missing");
    check_refused(
        with_text("no_dim",
                  [](std::string t) { return replace_once(t, "\"dim\": ", "\"dims\": "); }),
        "model.dim: missing");
    check_refused(
        with_text("no_pieces",
                  [](std::string t) { return replace_once(t, "\"pieces\"", "\"parts\""); }),
        "pieces: missing");
  }

  TEST_CASE("checkpoint reader: negative and overflowing numbers are refused") {
    check_refused(with_text("negative_shape",
                            [](std::string t) {
                              return replace_once(t, "\"shape\": [4, 6]", "\"shape\": [-4, 6]");
                            }),
                  "tensors.w.shape[0]: -4 is out of range");
    check_refused(with_text("huge_shape",
                            [](std::string t) {
                              return replace_once(t, "\"shape\": [4, 6]",
                                                  "\"shape\": [18446744073709551615, 6]");
                            }),
                  "overflows a 64-bit integer");
    check_refused(with_text("product_overflow",
                            [](std::string t) {
                              return replace_once(
                                  t, "\"shape\": [4, 6]",
                                  "\"shape\": [4611686018427387904, 4611686018427387904]");
                            }),
                  "the element count overflows");
    check_refused(
        with_text("negative_step",
                  [](std::string t) { return replace_once(t, "\"step\": 7", "\"step\": -7"); }),
        "-7 is out of range");
    check_refused(with_text("three_dims",
                            [](std::string t) {
                              return replace_once(t, "\"shape\": [4, 6]", "\"shape\": [4, 6, 1]");
                            }),
                  "3 dims");
  }

  TEST_CASE("checkpoint reader: a piece outside its tensor is refused") {
    check_refused(with_metadata("outside",
                                [](CheckpointMetadata& m) {
                                  m.tensors["w"].pieces[2].offsets = {2, 4};
                                }),
                  "lies outside the tensor's shape");
    check_refused(
        with_metadata("wrong_rank",
                      [](CheckpointMetadata& m) { m.tensors["w"].pieces[2].offsets = {2}; }),
        "1 numbers, expected 2");
    check_refused(with_metadata("bad_file_index",
                                [](CheckpointMetadata& m) { m.tensors["w"].pieces[2].file = 2; }),
                  "file: 2 is out of range");
  }

  TEST_CASE("checkpoint reader: overlapping pieces are refused") {
    check_refused(
        with_metadata(
            "overlap",
            [](CheckpointMetadata& m) {
              StoredTensor& w = m.tensors["w"];
              w.pieces[1].sizes = {2, 4};  // into piece 2's columns, and 8 more elements
              w.pieces[2].offsets = {3, 3};
              w.pieces[2].sizes = {1, 3};   // the element count is then right again: 26 - 2
              w.pieces[1].byte_begin = 56;  // 32 bytes, inside the file
              w.pieces[1].byte_end = 88;
              w.pieces[2].byte_end = 12;
            }),
        "overlap");
    check_refused(with_metadata("duplicate_piece",
                                [](CheckpointMetadata& m) {
                                  StoredTensor& w = m.tensors["w"];
                                  w.pieces.push_back(w.pieces[2]);
                                }),
                  "overlap");
    check_refused(with_metadata("shared_bytes",
                                [](CheckpointMetadata& m) {
                                  m.tensors["b"].pieces[1].byte_begin =
                                      28;  // shares bytes with piece 0
                                  m.tensors["b"].pieces[1].byte_end = 32;
                                }),
                  "overlap those of a piece");
  }

  TEST_CASE("checkpoint reader: pieces that leave part of a tensor uncovered are refused") {
    check_refused(
        with_metadata("gap", [](CheckpointMetadata& m) { m.tensors["w"].pieces.pop_back(); }),
        "part of it is missing");
    check_refused(with_metadata("no_pieces_at_all",
                                [](CheckpointMetadata& m) { m.tensors["b"].pieces.clear(); }),
                  "0 of the tensor's 5 elements");
  }

  TEST_CASE("checkpoint reader: byte ranges outside the file or of the wrong size are refused") {
    check_refused(with_metadata("past_end",
                                [](CheckpointMetadata& m) {
                                  m.tensors["b"].pieces[1].byte_begin = 32;
                                  m.tensors["b"].pieces[1].byte_end = 36;
                                }),
                  "lies outside rank00001.safetensors (34 bytes)");
    check_refused(with_metadata("reversed",
                                [](CheckpointMetadata& m) {
                                  m.tensors["b"].pieces[1].byte_begin = 34;
                                  m.tensors["b"].pieces[1].byte_end = 30;
                                }),
                  "lies outside");
    check_refused(
        with_metadata("wrong_size",
                      [](CheckpointMetadata& m) { m.tensors["b"].pieces[1].byte_end = 32; }),
        "2 bytes for a piece of 4 bytes");
  }

  TEST_CASE("checkpoint reader: file names that could leave the folder are refused") {
    for (const std::string name :
         {"../rank00000.safetensors", "sub/rank00000.safetensors", "..", ".", "/etc/passwd", ""}) {
      check_refused(with_metadata("name_" + std::to_string(name.size()),
                                  [&](CheckpointMetadata& m) { m.files[0].name = name; }),
                    "is not a plain file name");
    }
    check_refused(
        with_metadata("twice", [](CheckpointMetadata& m) { m.files[1].name = m.files[0].name; }),
        "listed twice");
  }

  TEST_CASE("checkpoint reader: an unknown dtype is refused") {
    check_refused(with_text("dtype",
                            [](std::string t) {
                              return replace_once(t, "\"dtype\": \"BF16\"", "\"dtype\": \"F128\"");
                            }),
                  "unknown dtype 'F128'");
  }

  TEST_CASE("checkpoint reader: a missing or truncated file is refused naming it") {
    Fixture missing = make_fixture("missing_file");
    fs::remove(missing.folder + "/rank00001.safetensors");
    check_refused(missing, "rank00001.safetensors: missing", "rank00001.safetensors");
    Fixture shorter = make_fixture("short_file");
    write_bytes(shorter.folder + "/rank00000.safetensors", shorter.file0.substr(0, 40));
    check_refused(shorter, "40 bytes", "rank00000.safetensors");
    check_refused(shorter, "(truncated)", "rank00000.safetensors");
  }

}  // TEST_SUITE
