// Apache Thrift's compact protocol, read from bytes in memory: what Parquet's footer and page
// headers are written in (data/parquet_reader.h). Only reading, only what Parquet uses (structs,
// lists, integers, binary, booleans, doubles skipped), and every length checked against the
// bytes that remain, so that a hostile file cannot make it allocate, read outside its input or
// recurse without end. docs/architecture.md says why this is not libthrift.
//
// A struct is read by read_struct(on_field): on_field(id, type) is called for each field and
// must consume its value (read_i32(type), read_binary(type), read_list, a nested read_struct…,
// or skip(type) for a field it does not know).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace titan::data {

// The bytes are not valid compact protocol; what() is a phrase ("a binary of 90 bytes runs past
// the end of its 12"), for the Parquet reader to put in a message that names the file.
class ThriftError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace thrift {

enum Type : uint8_t {
  STOP = 0,
  BOOLEAN_TRUE = 1,
  BOOLEAN_FALSE = 2,
  BYTE = 3,
  I16 = 4,
  I32 = 5,
  I64 = 6,
  DOUBLE = 7,
  BINARY = 8,
  LIST = 9,
  SET = 10,
  MAP = 11,
  STRUCT = 12,
};

struct ListHeader {
  uint8_t element_type = 0;
  uint32_t size = 0;
};

class CompactReader {
 public:
  CompactReader(const void* data, size_t size)
      : data_(static_cast<const uint8_t*>(data)), size_(size) {}

  size_t position() const { return pos_; }

  template <class OnField>
  void read_struct(OnField&& on_field) {
    enter();
    int32_t last_id = 0;
    for (;;) {
      const uint8_t header = byte();
      const uint8_t type = header & 0x0F;
      if (type == STOP) break;
      const uint8_t delta = header >> 4;
      const int32_t id = delta != 0 ? last_id + delta : static_cast<int16_t>(read_zigzag(16));
      last_id = id;
      on_field(id, type);
    }
    --depth_;
  }

  // Each element as on_element(type): it consumes one value of that type.
  template <class OnElement>
  void read_list(uint8_t type, OnElement&& on_element) {
    const ListHeader header = list_header(type);
    enter();
    // A boolean element is a byte of its own (a field's is in the field's type).
    const uint8_t element = header.element_type == BOOLEAN_TRUE || header.element_type == BOOLEAN_FALSE
                                ? uint8_t{BYTE}
                                : header.element_type;
    for (uint32_t i = 0; i < header.size; ++i) on_element(element);
    --depth_;
  }

  int32_t read_i32(uint8_t type);
  int64_t read_i64(uint8_t type);
  bool read_bool(uint8_t type);  // a field's (in its type) or a list element's (BYTE: a byte)
  std::string_view read_binary(uint8_t type);
  // A value of any type, unread.
  void skip(uint8_t type);

  // "a list", "i32": for messages.
  static const char* type_name(uint8_t type);

 private:
  uint8_t byte();
  uint64_t varint(int bits);
  int64_t read_zigzag(int bits);
  ListHeader list_header(uint8_t type);
  void expect(uint8_t type, uint8_t wanted, const char* what);
  void enter();

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace thrift
}  // namespace titan::data
