// safetensors I/O: tensors of every dtype round-trip bit for bit, the header is the format's
// (8-byte length, JSON, padded to 8 bytes), and damaged files are refused with a clear error.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "core/check.h"
#include "support/process.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::checkpoint;

TEST_SUITE("unit") {

TEST_CASE("safetensors: tensors round-trip bit for bit with their dtype and shape") {
  const std::string path = testing::scratch_dir("safetensors") + "/roundtrip.safetensors";
  Tensor f32 = testing::random_tensor({3, 5}, DType::F32, 1);
  Tensor f64 = testing::random_tensor({7}, DType::F64, 2);
  Tensor i32 = Tensor::from_vector(std::vector<int32_t>{1, -2, 3, 2147483647}, {2, 2});
  Tensor strided = testing::random_tensor({4, 6}, DType::F32, 3).narrow(1, 2, 3);  // not contiguous
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
  CHECK_THROWS_WITH_AS(file.read_into("a.weight", wrong), doctest::Contains("expects f32[5, 3]"), InputError);
  CHECK_THROWS_WITH_AS(file.read_into("missing", wrong), doctest::Contains("no tensor missing"), InputError);
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
  std::filesystem::resize_file(dir + "/cut.safetensors", std::filesystem::file_size(dir + "/cut.safetensors") - 16);
  CHECK_THROWS_WITH_AS(SafetensorsFile(dir + "/cut.safetensors"), doctest::Contains("inconsistent offsets"), InputError);
  std::ofstream(dir + "/text.safetensors") << "this is not a checkpoint";
  CHECK_THROWS_AS(SafetensorsFile(dir + "/text.safetensors"), InputError);
  CHECK_THROWS_AS(SafetensorsFile(dir + "/absent.safetensors"), InputError);
}

}  // TEST_SUITE
