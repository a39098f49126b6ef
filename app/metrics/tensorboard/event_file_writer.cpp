#include "app/metrics/tensorboard/event_file_writer.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "metrics/tensorboard/tensorboard_event.pb.h"  // generated: build/app/metrics/tensorboard/

namespace titan::app {

namespace pb = tensorboard_pb;

namespace {

// TensorBoard reads files whose version starts "brain.Event:"; 2 is the current one.
constexpr const char* kFileVersion = "brain.Event:2";

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "localhost";
  return name.data();
}

// events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.<n>: TensorBoard's own writers name
// files so, and its loader picks files by the "tfevents" in the name.
std::string event_file_name() {
  static std::atomic<int> writers{0};
  const auto seconds = static_cast<long long>(unix_seconds());
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%010lld", seconds);
  return std::string("events.out.tfevents.") + stamp + "." + host_name() + "." +
         std::to_string(getpid()) + "." + std::to_string(writers++);
}

}  // namespace

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(std::string_view data) {
  std::string length;
  append_le(length, data.size(), 8);
  std::string record = length;
  record.reserve(8 + 4 + data.size() + 4);
  append_le(record, masked_crc32c(length), 4);
  record.append(data);
  append_le(record, masked_crc32c(data), 4);
  return record;
}

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) {
    input_error("the TensorBoard folder '", folder, "' cannot be created (", ec.message(),
                "); set metrics.save_tb_folder to a folder that can be written");
  }
  path_ = (std::filesystem::path(folder) / event_file_name()).string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) {
    input_error("the TensorBoard folder '", folder, "' cannot be written (opening ", path_, ": ",
                std::strerror(errno),
                "); set metrics.save_tb_folder to a folder that can be written");
  }
  pb::Event event;
  event.set_wall_time(unix_seconds());
  event.set_file_version(kFileVersion);
  write_record(event.SerializeAsString());
  flush();
}

namespace {

// An Event at `step` holding one Summary.Value tagged `tag`, for the caller to fill.
pb::Summary::Value* add_summary_value(pb::Event& event, const std::string& tag, int64_t step,
                                      double wall_time) {
  event.set_wall_time(wall_time);
  event.set_step(step);
  pb::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  return v;
}

}  // namespace

void EventFileWriter::add_scalar(const std::string& tag, float value, int64_t step,
                                 double wall_time) {
  pb::Event event;
  add_summary_value(event, tag, step, wall_time)->set_simple_value(value);
  write_record(event.SerializeAsString());
}

void EventFileWriter::add_text(const std::string& tag, const std::string& text, int64_t step,
                               double wall_time) {
  pb::Event event;
  pb::Summary::Value* v = add_summary_value(event, tag, step, wall_time);
  // The text plugin's content is an empty TextPluginData (version 0).
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  pb::TensorProto* tensor = v->mutable_tensor();
  tensor->set_dtype(pb::DT_STRING);
  tensor->mutable_tensor_shape();  // present and empty: rank 0, rendered as one markdown text
  tensor->add_string_val(text);
  write_record(event.SerializeAsString());
}

void EventFileWriter::flush() {
  out_.flush();
  TT_CHECK(out_.good(), "flushing the TensorBoard event file ", path_,
           " failed: ", std::strerror(errno));
}

void EventFileWriter::write_record(const std::string& data) {
  const std::string record = tfrecord_frame(data);
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  TT_CHECK(out_.good(), "writing the TensorBoard event file ", path_,
           " failed: ", std::strerror(errno));
}

}  // namespace titan::app
