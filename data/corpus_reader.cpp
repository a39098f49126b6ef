#include "data/corpus_reader.h"

#include <cstring>

#include "core/check.h"
#include "core/json_reader.h"

namespace titan::data {

namespace {

constexpr size_t kChunkBytes = 1 << 20;  // decompressed bytes asked of a stream at a time
constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

CorpusReader::CorpusReader(std::vector<CorpusFile> files, size_t batch_bytes,
                           TextDocuments text_documents, const ParquetColumnChoice& parquet_column)
    : files_(std::move(files)),
      parquet_(files_.size()),
      batch_bytes_(std::max<size_t>(batch_bytes, 1)),
      text_documents_(text_documents),
      chunk_(kChunkBytes) {
  for (size_t i = 0; i < files_.size(); ++i) {
    if (files_[i].format == CorpusFormat::PARQUET) {
      parquet_[i] = ParquetFile(files_[i].path).string_column(parquet_column.name, parquet_column.flag);
    }
  }
}

CorpusReader::~CorpusReader() = default;

bool CorpusReader::next(LineBatch& batch) {
  batch.text.clear();
  batch.ends.clear();
  batch.row_group = -1;
  batch.chunk.clear();
  batch.nulls = 0;
  for (;;) {
    if (file_index_ < files_.size() && parquet_[file_index_]) {
      if (next_row_group(batch)) return true;
      bytes_before_ += files_[file_index_].bytes;
      ++file_index_;
      row_group_ = 0;
      rows_before_ = 0;
      continue;
    }
    if (!stream_) {
      if (file_index_ == files_.size()) return false;
      stream_ = open_byte_stream(files_[file_index_].path, files_[file_index_].compression);
      chunk_pos_ = chunk_end_ = 0;
      file_start_ = true;
      line_number_ = 1;
      whole_file_ = text_documents_ == TextDocuments::FILE &&
                    files_[file_index_].format == CorpusFormat::TEXT;
    }
    batch.sequence = sequence_;
    batch.file_index = file_index_;
    batch.first_line = line_number_;
    const bool file_ended = fill(batch);
    batch.bytes_read = bytes_before_ + stream_->consumed();
    if (file_ended) {
      bytes_before_ += stream_->consumed();
      stream_.reset();
      ++file_index_;
    }
    if (batch.lines() > 0) {
      ++sequence_;
      return true;
    }
    // The file ended with no line left (or was empty): go on with the next one.
  }
}

bool CorpusReader::fill(LineBatch& batch) {
  for (;;) {
    if (chunk_pos_ == chunk_end_) {
      chunk_pos_ = 0;
      chunk_end_ = stream_->read(chunk_.data(), chunk_.size());
      if (chunk_end_ == 0) {
        // A last line without a terminator is a line all the same.
        if (batch.text.size() > (batch.ends.empty() ? 0 : batch.ends.back())) end_line(batch);
        return true;
      }
      if (whole_file_) {
        // Every byte, as titan_train's text source reads it: no line or byte-order mark removed.
        batch.text.append(chunk_.data(), chunk_end_);
        chunk_pos_ = chunk_end_;
        continue;
      }
      if (file_start_) {
        file_start_ = false;
        if (std::string_view(chunk_.data(), chunk_end_).starts_with(kByteOrderMark)) {
          chunk_pos_ = kByteOrderMark.size();
        }
      }
    }
    const char* begin = chunk_.data() + chunk_pos_;
    const char* end = chunk_.data() + chunk_end_;
    const char* newline = static_cast<const char*>(std::memchr(begin, '\n', end - begin));
    if (newline == nullptr) {
      batch.text.append(begin, end);
      chunk_pos_ = chunk_end_;
      continue;
    }
    batch.text.append(begin, newline);
    chunk_pos_ = static_cast<size_t>(newline + 1 - chunk_.data());
    end_line(batch);
    if (batch.text.size() >= batch_bytes_) return false;
  }
}

bool CorpusReader::next_row_group(LineBatch& batch) {
  const ParquetStringColumn& column = *parquet_[file_index_];
  // A row group of no rows holds no document: the next one.
  while (row_group_ < column.row_groups() && column.chunk(row_group_).rows == 0) ++row_group_;
  if (row_group_ == column.row_groups()) return false;
  const ParquetChunk& chunk = column.chunk(row_group_);
  batch.sequence = sequence_++;
  batch.file_index = file_index_;
  batch.first_line = rows_before_ + 1;
  batch.row_group = static_cast<int64_t>(row_group_);
  batch.chunk = column.read_chunk(row_group_);
  batch.bytes_read = bytes_before_ + chunk.offset + chunk.bytes;
  rows_before_ += chunk.rows;
  ++row_group_;
  return true;
}

void CorpusReader::decode(LineBatch& batch) const {
  if (batch.row_group < 0 || batch.chunk.empty()) return;
  ParquetStrings strings;
  parquet_[batch.file_index]->decode_chunk(static_cast<size_t>(batch.row_group), batch.chunk,
                                           strings);
  batch.text = std::move(strings.text);
  batch.ends = std::move(strings.ends);
  batch.nulls = strings.nulls;
  std::string().swap(batch.chunk);  // its memory back before the batch is tokenized
}

void CorpusReader::end_line(LineBatch& batch) {
  size_t begin = batch.ends.empty() ? 0 : batch.ends.back();
  if (!whole_file_ && batch.text.size() > begin && batch.text.back() == '\r') batch.text.pop_back();
  batch.ends.push_back(batch.text.size());
  ++line_number_;
}

DocumentParser::DocumentParser(std::string field)
    : field_(std::move(field)), json_(std::make_unique<JsonDocument>()) {}

DocumentParser::~DocumentParser() = default;

bool DocumentParser::parse(std::string_view line, CorpusFormat format, std::string_view& text,
                           std::string& problem) {
  if (format != CorpusFormat::JSON_LINES) {  // a text line, or a Parquet value
    text = line;
    return true;
  }
  // A blank line between objects holds no document; count it as an empty one, as in text.
  if (is_blank(line)) {
    text = {};
    return true;
  }
  if (!json_->parse(line)) {
    problem = "invalid JSON (" + json_->error_phrase() + ")";
    return false;
  }
  const JsonValue root = json_->root();
  const std::optional<JsonObject> object = root.get_object();
  if (!object) {
    problem = std::string("not a JSON object (") + root.type_name() + ")";
    return false;
  }
  const std::optional<JsonValue> value = object->find(field_);
  if (!value) {
    problem = "no field \"" + field_ + "\"";
    return false;
  }
  const std::optional<std::string_view> found = value->get_string();
  if (!found) {
    problem = "field \"" + field_ + "\" is " + value->type_name() + ", not a string";
    return false;
  }
  text = *found;
  return true;
}

}  // namespace titan::data
