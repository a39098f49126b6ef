// TensorFlow event files, the format TensorBoard reads: a sequence of TFRecords, each holding
// one serialized `Event` protocol buffer (tensorboard_event.proto). The first record names the
// format version ("brain.Event:2"); every later one carries a Summary with one value, a scalar
// or a text. This header is free of protobuf on purpose: only event_file_writer.cpp sees the
// generated code, so nothing that includes this links or compiles against libprotobuf.
//
// TFRecord framing (tensorflow/core/lib/io/record_writer.cc), every integer little endian:
//   uint64 length | uint32 masked_crc32c(length's 8 bytes) | data | uint32 masked_crc32c(data)
// The CRC is CRC32C (Castagnoli), from ISA-L; it is masked because a CRC computed over bytes
// that themselves hold CRCs (a record file inside a record) is weak.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

#include "core/crc32c.h"  // defines: crc32c

namespace titan::app {

// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8, of the CRC32C of `data`.
uint32_t masked_crc32c(std::string_view data);
// One TFRecord holding `data` (12 + data.size() + 4 bytes).
std::string tfrecord_frame(std::string_view data);

// Seconds since the Unix epoch, with the fraction: an Event's wall_time.
double unix_seconds();

// Writes one event file in `folder`. Not thread safe; one writer per file.
class EventFileWriter {
 public:
  // Creates `folder` if needed and opens events.out.tfevents.<unix seconds>.<host>.<pid>.<n>
  // in it (TensorBoard's naming; n counts the writers of this process), then writes the
  // file_version record. Throws InputError, one line naming the folder, when the folder
  // cannot be created or the file cannot be written.
  explicit EventFileWriter(const std::string& folder);
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // A point of the scalar series `tag`. TensorBoard scalars are float32 (simple_value).
  void add_scalar(const std::string& tag, float value, int64_t step,
                  double wall_time = unix_seconds());
  // A text for TensorBoard's text plugin, which renders it as markdown: a rank-0 DT_STRING
  // tensor whose metadata names the "text" plugin.
  void add_text(const std::string& tag, const std::string& text, int64_t step,
                double wall_time = unix_seconds());
  // Hands what was written to the operating system (no fsync).
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::ofstream out_;
};

}  // namespace titan::app
