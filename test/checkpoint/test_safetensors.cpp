// safetensors I/O: tensors of every dtype round-trip bit for bit, the header is the format's
// (8-byte length, JSON, padded to 8 bytes), damaged or hostile files are refused with one line
// naming the file (a case per class), rows and column blocks read back, and reads convert
// exactly or not at all.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "core/cast.h"
#include "core/check.h"
#include "support/process.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::checkpoint;

TEST_SUITE("fast") {
  TEST_CASE("safetensors: tensors round-trip bit for bit with their dtype and shape") {
    const std::string path = testing::scratch_dir("safetensors") + "/roundtrip.safetensors";
    Tensor f32 = testing::random_tensor({3, 5}, DType::F32, 1);
    Tensor f64 = testing::random_tensor({7}, DType::F64, 2);
    Tensor i32 = Tensor::from_vector(std::vector<int32_t>{1, -2, 3, 2147483647}, {2, 2});
    Tensor strided =
        testing::random_tensor({4, 6}, DType::F32, 3).narrow(1, 2, 3);  // not contiguous
    save_safetensors(path, {{"a.weight", f32}, {"b", f64}, {"ids", i32}, {"view", strided}},
                     {{"format", "titan_train"}});

    SafetensorsFile file(path);
    CHECK(file.names() == std::vector<std::string>{"a.weight", "b", "ids", "view"});
    CHECK(file.metadata().at("format") == "titan_train");
    CHECK(file.dtype("b") == DType::F64);
    CHECK(file.shape("a.weight") == Shape{3, 5});
    for (const auto& [name, original] : std::vector<std::pair<std::string, Tensor>>{
             {"a.weight", f32}, {"b", f64}, {"ids", i32}, {"view", strided}}) {
      Tensor loaded = Tensor::empty(original.shape(), original.dtype());
      file.read_into(name, loaded);
      CHECK_MESSAGE(testing::bitwise_equal(loaded, original), name);
    }
    Tensor wrong = Tensor::empty({5, 3}, DType::F32);
    CHECK_THROWS_WITH_AS(file.read_into("a.weight", wrong), doctest::Contains("expects f32[5, 3]"),
                         InputError);
    CHECK_THROWS_WITH_AS(file.read_into("missing", wrong), doctest::Contains("no tensor missing"),
                         InputError);
  }

  TEST_CASE("safetensors: the header is an 8-byte length then JSON padded to 8 bytes") {
    const std::string path = testing::scratch_dir("safetensors") + "/layout.safetensors";
    save_safetensors(path, {{"x", Tensor::zeros({2}, DType::F32)}});
    std::ifstream in(path, std::ios::binary);
    unsigned char length_bytes[8];
    in.read(reinterpret_cast<char*>(length_bytes), 8);
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
    CHECK(length % 8 == 0);
    std::string header(length, '\0');
    in.read(header.data(), static_cast<std::streamsize>(length));
    CHECK(header.starts_with(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"));
    CHECK(std::filesystem::file_size(path) == 8 + length + 8);
  }

  TEST_CASE("safetensors: a truncated or foreign file is refused") {
    const std::string dir = testing::scratch_dir("safetensors");
    save_safetensors(dir + "/whole.safetensors", {{"x", Tensor::zeros({64}, DType::F32)}});
    std::filesystem::copy_file(dir + "/whole.safetensors", dir + "/cut.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(dir + "/cut.safetensors",
                                 std::filesystem::file_size(dir + "/cut.safetensors") - 16);
    CHECK_THROWS_WITH_AS(SafetensorsFile(dir + "/cut.safetensors"),
                         doctest::Contains("past its end"), InputError);
    std::ofstream(dir + "/text.safetensors") << "this is not a checkpoint";
    CHECK_THROWS_AS(SafetensorsFile(dir + "/text.safetensors"), InputError);
    CHECK_THROWS_AS(SafetensorsFile(dir + "/absent.safetensors"), InputError);
  }

  // ---- hostile files: one InputError line naming the file, never a crash ------------------------

  namespace {

  // A file whose 8-byte length says `length` (default: the header's size), then `header`, then
  // `data` bytes of zeros.
  std::string hostile_file(const std::string& name, const std::string& header, uint64_t data,
                           std::optional<uint64_t> length = std::nullopt) {
    const std::string path = testing::scratch_dir("safetensors_hostile") + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const uint64_t n = length.value_or(header.size());
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header;
    out << std::string(data, '\0');
    return path;
  }

  void check_safetensors_refused(const std::string& path, const std::string& problem) {
    std::string message;
    try {
      SafetensorsFile file(path);
    } catch (const InputError& e) {
      message = e.what();
    }
    CHECK_MESSAGE(message.find(path) != std::string::npos, "'", message, "' does not name ", path);
    CHECK_MESSAGE(message.find(problem) != std::string::npos, "'", message, "' lacks '", problem,
                  "'");
    CHECK(message.find('\n') == std::string::npos);
  }

  }  // namespace

  TEST_CASE("safetensors: a header length past the end of the file is refused") {
    check_safetensors_refused(hostile_file("long.safetensors", "{}", 0, 1000),
                              "runs past the end of the file");
    check_safetensors_refused(hostile_file("huge.safetensors", "{}", 0, ~0ull),
                              "runs past the end of the file");
    check_safetensors_refused(hostile_file("short.safetensors", "", 0),
                              "too short for a JSON object");
  }

  TEST_CASE("safetensors: a header over the 100 MB cap is refused before it is read") {
    // A sparse file: 200 MB of "data" that the length claims is header.
    const std::string path = hostile_file("capped.safetensors", "{}", 0, 200ull << 20);
    std::filesystem::resize_file(path, (200ull << 20) + 16);
    check_safetensors_refused(path, "over the 104857600-byte limit");
  }

  TEST_CASE("safetensors: a file shorter than 8 bytes is refused") {
    const std::string path = testing::scratch_dir("safetensors_hostile") + "/tiny.safetensors";
    std::ofstream(path, std::ios::binary) << "abc";
    check_safetensors_refused(path, "shorter than the 8-byte header length");
  }

  TEST_CASE("safetensors: a header that is not JSON is refused") {
    check_safetensors_refused(hostile_file("notjson.safetensors", "{\"x\": {\"dtype\": ", 0),
                              "not valid JSON");
    check_safetensors_refused(hostile_file("array.safetensors", "[1, 2]  ", 0),
                              "not a JSON object");
    check_safetensors_refused(hostile_file("entry.safetensors", R"({"x": 5})", 0),
                              "tensor 'x' is not an object");
    check_safetensors_refused(
        hostile_file("nodtype.safetensors", R"({"x": {"shape": [1], "data_offsets": [0, 4]}})", 4),
        "has no dtype string");
    check_safetensors_refused(hostile_file("meta.safetensors", R"({"__metadata__": {"a": 1}})", 0),
                              "__metadata__ value of 'a' is not a string");
    check_safetensors_refused(
        hostile_file("dup.safetensors",
                     R"({"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                     R"( "x": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                     2),
        "not valid JSON (the key \"x\" appears twice in the top-level object, at line 1 column 2 "
        "(byte 1) and line 1 column 62 (byte 61)");
    check_safetensors_refused(
        hostile_file("dup_metadata.safetensors",
                     R"({"__metadata__": {"format": "pt", "format": "np"}})", 0),
        "the key \"format\" appears twice in __metadata__");
  }

  TEST_CASE("safetensors: offsets outside the data are refused") {
    check_safetensors_refused(
        hostile_file("outside.safetensors",
                     R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}})", 16),
        "past its end");
    check_safetensors_refused(
        hostile_file("backwards.safetensors",
                     R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})", 16),
        "data_offsets [16, 0]");
    check_safetensors_refused(
        hostile_file("negative.safetensors",
                     R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]}})", 16),
        "no data_offsets");
  }

  TEST_CASE("safetensors: overlapping tensors are refused") {
    check_safetensors_refused(
        hostile_file("overlap.safetensors",
                     R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                     R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                     24),
        "'a' and 'b' overlap");
  }

  TEST_CASE("safetensors: shapes whose element count overflows are refused") {
    check_safetensors_refused(
        hostile_file(
            "overflow.safetensors",
            R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})",
            0),
        "element count overflows");
    check_safetensors_refused(
        hostile_file(
            "bytes_overflow.safetensors",
            R"({"x": {"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 0]}})",
            0),
        "byte size that overflows");
    check_safetensors_refused(
        hostile_file(
            "toobig.safetensors",
            R"({"x": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 0]}})",
            0),
        "not a non-negative integer");
    check_safetensors_refused(
        hostile_file("dims.safetensors",
                     R"({"x": {"dtype": "F32", "shape": [1,1,1,1,1,1,1], "data_offsets": [0, 4]}})",
                     4),
        "7 dims");
  }

  TEST_CASE("safetensors: a byte size that does not match dtype and shape is refused") {
    check_safetensors_refused(
        hostile_file("size.safetensors",
                     R"({"x": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 24]}})", 24),
        "which needs 12 bytes");
  }

  TEST_CASE("safetensors: an unknown dtype is refused") {
    check_safetensors_refused(
        hostile_file("dtype.safetensors",
                     R"({"x": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}})", 8),
        "unsupported dtype C64");
  }

  // ---- range reads and conversions
  // ---------------------------------------------------------------

  TEST_CASE("safetensors: rows and column blocks read back as the matching slice") {
    const std::string path = testing::scratch_dir("safetensors") + "/rows.safetensors";
    Tensor m = testing::random_tensor({7, 5}, DType::F32, 11);
    Tensor v = testing::random_tensor({9}, DType::F32, 12);
    save_safetensors(path, {{"m", m}, {"v", v}});
    SafetensorsFile file(path);
    Tensor rows = Tensor::empty({3, 5}, DType::F32);
    file.read_rows("m", 2, 3, 0, 5, rows);
    CHECK(testing::bitwise_equal(rows, m.rows(2, 5).contiguous()));
    Tensor block = Tensor::empty({4, 2}, DType::F32);
    file.read_rows("m", 3, 4, 1, 2, block);
    CHECK(testing::bitwise_equal(block, m.rows(3, 7).narrow(1, 1, 2).contiguous()));
    Tensor elems = Tensor::empty({4, 1}, DType::F32);
    file.read_rows("v", 5, 4, 0, 1, elems);
    CHECK(testing::bitwise_equal(elems.view({4}), v.narrow(0, 5, 4).contiguous()));
    CHECK_THROWS_WITH_AS(file.read_rows("m", 5, 3, 0, 5, rows),
                         doctest::Contains("lie outside m[7, 5]"), InputError);
    CHECK_THROWS_WITH_AS(file.read_rows("m", 0, 1, 4, 2, Tensor::empty({1, 2}, DType::F32)),
                         doctest::Contains("lie outside"), InputError);
  }

  TEST_CASE(
      "safetensors: a NaN or an infinity is refused naming the file and the tensor and the "
      "element") {
    const std::string path = testing::scratch_dir("safetensors") + "/nonfinite.safetensors";
    Tensor m = testing::random_tensor({7, 5}, DType::F32, 13);
    m.data<float>()[4 * 5 + 2] = std::numeric_limits<float>::infinity();
    Tensor b = cast(testing::random_tensor({3, 4}, DType::F32, 14), DType::BF16);
    b.data<bf16_t>()[2 * 4 + 3] = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
    save_safetensors(path, {{"m", m}, {"b", b}});
    SafetensorsFile file(path);
    Tensor whole = Tensor::empty({7, 5}, DType::F32);
    CHECK_THROWS_WITH_AS(file.read_into("m", whole),
                         doctest::Contains(("safetensors file '" + path +
                                            "': m[7, 5] holds +inf at [4, 2]; a model with a "
                                            "weight that is not finite computes nothing but NaN")
                                               .c_str()),
                         InputError);
    // Rows that do not hold it read; a row or column block that does is refused.
    Tensor rows = Tensor::empty({4, 5}, DType::F32);
    file.read_rows("m", 0, 4, 0, 5, rows);
    Tensor cell = Tensor::empty({1, 1}, DType::F32);
    CHECK_THROWS_WITH_AS(file.read_rows("m", 4, 1, 2, 1, cell),
                         doctest::Contains("m[7, 5] holds +inf at [4, 2]"), InputError);
    // bf16, read as stored and converted to f32.
    CHECK_THROWS_WITH_AS(file.read_into("b", Tensor::empty({3, 4}, DType::BF16)),
                         doctest::Contains("b[3, 4] holds NaN at [2, 3]"), InputError);
    CHECK_THROWS_WITH_AS(file.read_into("b", Tensor::empty({3, 4}, DType::F32)),
                         doctest::Contains("b[3, 4] holds NaN at [2, 3]"), InputError);
  }

  TEST_CASE(
      "safetensors: reads convert exactly (bf16 to f32 and f64 and f32 to f64) and nothing else") {
    const std::string path = testing::scratch_dir("safetensors") + "/convert.safetensors";
    Tensor f32 = testing::random_tensor({4, 6}, DType::F32, 21);
    Tensor bf16 = cast(f32, DType::BF16);
    Tensor i32 = Tensor::from_vector(std::vector<int32_t>{-7, 2147483647}, {2});
    save_safetensors(path, {{"f", f32}, {"b", bf16}, {"i", i32}});
    SafetensorsFile file(path);

    Tensor b_as_f32 = Tensor::empty({4, 6}, DType::F32);
    file.read_into("b", b_as_f32);
    CHECK(testing::bitwise_equal(b_as_f32, cast(bf16, DType::F32)));
    Tensor b_as_f64 = Tensor::empty({2, 3}, DType::F64);
    file.read_rows("b", 1, 2, 2, 3, b_as_f64);
    CHECK(testing::bitwise_equal(b_as_f64, cast(bf16.rows(1, 3).narrow(1, 2, 3), DType::F64)));
    Tensor f_as_f64 = Tensor::empty({4, 6}, DType::F64);
    file.read_into("f", f_as_f64);
    CHECK(testing::bitwise_equal(f_as_f64, cast(f32, DType::F64)));
    Tensor i_as_i64 = Tensor::empty({2}, DType::I64);
    file.read_into("i", i_as_i64);
    CHECK(i_as_i64.data<int64_t>()[1] == 2147483647);

    Tensor f_as_bf16 = Tensor::empty({4, 6}, DType::BF16);
    CHECK_THROWS_WITH_AS(file.read_into("f", f_as_bf16), doctest::Contains("expects bf16[4, 6]"),
                         InputError);
    CHECK_THROWS_WITH_AS(file.read_rows("f", 0, 4, 0, 6, f_as_bf16),
                         doctest::Contains("does not convert exactly to bf16"), InputError);
  }

  TEST_CASE(
      "safetensors: the streaming writer takes tensors in pieces and checks it got them all") {
    const std::string path = testing::scratch_dir("safetensors") + "/stream.safetensors";
    Tensor a = testing::random_tensor({6, 3}, DType::F32, 31);
    Tensor b = cast(testing::random_tensor({5}, DType::F32, 32), DType::BF16);
    {
      SafetensorsWriter writer(
          path,
          {{"a", DType::F32, {6, 3}}, {"empty", DType::F32, {0, 3}}, {"b", DType::BF16, {5}}});
      writer.append(a.rows(0, 2));
      writer.append(a.rows(2, 6));
      writer.write("b", b);
      writer.close();
    }
    SafetensorsFile file(path);
    Tensor a2 = Tensor::empty({6, 3}, DType::F32);
    file.read_into("a", a2);
    CHECK(testing::bitwise_equal(a2, a));
    Tensor b2 = Tensor::empty({5}, DType::BF16);
    file.read_into("b", b2);
    CHECK(testing::bitwise_equal(b2, b));
    CHECK(file.shape("empty") == Shape{0, 3});

    // Closed early: the file is refused (short data), and close() names the incomplete tensor.
    const std::string cut = testing::scratch_dir("safetensors") + "/stream_cut.safetensors";
    {
      SafetensorsWriter writer(cut, {{"a", DType::F32, {6, 3}}});
      writer.append(a.rows(0, 2));
      CHECK_THROWS_WITH(writer.close(), doctest::Contains("tensor a incomplete"));
    }
    check_safetensors_refused(cut, "past its end");
  }

}  // TEST_SUITE
