// Fuzz target: a Parquet file (data/parquet_reader.h: ParquetFile's footer, a string column's
// checks, every row group's pages decoded), as titan_tokenize reads its .parquet inputs.
//
// The reader is given small limits (a page of 4 MiB decompressed, 16 MiB of strings or 2^20
// values a column chunk): a file may claim any size in a few bytes, and the reader must refuse
// what passes its limits before allocating it, which -malloc_limit_mb checks.
//
// Contract: opening returns or throws InputError. An accepted column keeps the footer's
// promises: every row group's chunk lies inside the file, before the footer; decoding gives one
// value or null per row, never more string bytes than the limit, or throws InputError.
#include <string>

#include "data/parquet_reader.h"
#include "fuzz/fuzz_support.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch_file("corpus.parquet", data, size);
  data::ParquetLimits limits;
  limits.max_page_bytes = uint64_t{4} << 20;
  limits.max_chunk_text_bytes = uint64_t{16} << 20;
  limits.max_chunk_values = uint64_t{1} << 20;
  fuzz::fuzz_reads("ParquetFile", [&] {
    data::ParquetFile file(path, limits);
    FUZZ_REQUIRE(file.file_bytes() == size, "ParquetFile", "file size");
    (void)file.column_names();
    // The column corpora name, else the file's first.
    std::string name = "text";
    bool found = false;
    for (const data::ParquetColumnInfo& column : file.columns()) found = found || column.name == name;
    if (!found && !file.columns().empty()) name = file.columns().front().name;
    const data::ParquetStringColumn column = file.string_column(name, "--field");
    FUZZ_REQUIRE(column.row_groups() == file.row_groups(), "string_column", "row groups lost");
    data::ParquetStrings strings;
    for (size_t g = 0; g < column.row_groups(); ++g) {
      const data::ParquetChunk& chunk = column.chunk(g);
      FUZZ_REQUIRE(chunk.offset >= 4 && chunk.bytes <= size && chunk.offset <= size - chunk.bytes,
                   "string_column", "a chunk outside the file");
      fuzz::fuzz_reads("decode_chunk", [&] {
        column.read_strings(g, strings);
        FUZZ_REQUIRE(static_cast<int64_t>(strings.size()) + strings.nulls == chunk.rows,
                     "decode_chunk", "values and nulls do not add up to the rows");
        FUZZ_REQUIRE(strings.text.size() <= limits.max_chunk_text_bytes, "decode_chunk",
                     "more string bytes than the limit");
        FUZZ_REQUIRE(strings.size() == 0 || strings.ends.back() == strings.text.size(),
                     "decode_chunk", "the values do not end where the text does");
        volatile char sink = 0;
        for (size_t i = 0; i < strings.size(); ++i) {
          for (char c : strings[i]) sink = sink ^ c;  // ASan: every view readable
        }
      });
    }
  });
  return 0;
}
