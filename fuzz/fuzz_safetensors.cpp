// Fuzz target: a safetensors file (checkpoint/safetensors.h: SafetensorsFile), its header and
// then its tensors.
//
// Contract: the constructor returns or throws InputError; an accepted file's header holds no key
// twice (json_key_oracle.h), and the file keeps its header's promises (every tensor's bytes
// inside the file), so reading any tensor whole, or its first and last rows, returns or throws
// InputError (a NaN among them is one) and never reads outside what the file holds.
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <string>

#include "checkpoint/safetensors.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/json_key_oracle.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch_file("model.safetensors", data, size);
  std::optional<checkpoint::SafetensorsFile> file;
  if (!fuzz::fuzz_reads("SafetensorsFile", [&] { file.emplace(path); })) return 0;
  uint64_t header_bytes = 0;  // accepted: 8 bytes of length, then that much JSON
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(data[i]) << (8 * i);
  FUZZ_REQUIRE(!fuzz::json_holds_key_twice(std::string_view(reinterpret_cast<const char*>(data) + 8,
                                                            static_cast<size_t>(header_bytes))),
               "SafetensorsFile", "accepted a header holding a key twice");

  uint64_t tensor_bytes = 0;
  for (const std::string& name : file->names()) {
    const Shape shape = file->shape(name);
    const DType dtype = file->dtype(name);
    FUZZ_REQUIRE(shape.numel() >= 0, "SafetensorsFile", "a negative element count for " + name);
    const uint64_t bytes = static_cast<uint64_t>(shape.numel()) * dtype_size(dtype);
    FUZZ_REQUIRE(bytes <= size, "SafetensorsFile", "tensor " + name + " is larger than the file");
    tensor_bytes += bytes;
    FUZZ_REQUIRE(tensor_bytes <= size, "SafetensorsFile", "its tensors overlap");

    const Tensor whole = Tensor::empty(shape, dtype);
    fuzz::fuzz_reads("SafetensorsFile::read_into", [&] { file->read_into(name, whole); });
    if (shape.ndim() == 1 || shape.ndim() == 2) {
      const int64_t rows = shape[0];
      const int64_t width = shape.ndim() == 2 ? shape[1] : 1;
      if (rows > 0 && width > 0) {
        const Tensor row = Tensor::empty({1, width}, dtype);
        for (int64_t r : {int64_t{0}, rows - 1}) {
          fuzz::fuzz_reads("SafetensorsFile::read_rows",
                           [&] { file->read_rows(name, r, 1, 0, width, row); });
        }
        const Tensor column = Tensor::empty({rows, 1}, dtype);
        fuzz::fuzz_reads("SafetensorsFile::read_rows",
                         [&] { file->read_rows(name, 0, rows, width - 1, 1, column); });
      }
      // A region outside the tensor is refused, never read.
      const Tensor one = Tensor::empty({1, 1}, dtype);
      FUZZ_REQUIRE(!fuzz::fuzz_reads("SafetensorsFile::read_rows",
                                     [&] { file->read_rows(name, rows, 1, 0, 1, one); }),
                   "SafetensorsFile::read_rows", "read row " + std::to_string(rows) + " of " +
                                                     name + ", which has " +
                                                     std::to_string(rows) + " rows");
    }
  }
  return 0;
}
