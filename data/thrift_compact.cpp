#include "data/thrift_compact.h"

#include <string>

namespace titan::data::thrift {

namespace {

// Deeper than any Parquet footer (a schema is a flat list; statistics nest twice): a file that
// nests further is hostile, and recursion on it would exhaust the stack.
constexpr int kMaxDepth = 32;

[[noreturn]] void fail(const std::string& what) { throw ThriftError(what); }

}  // namespace

const char* CompactReader::type_name(uint8_t type) {
  switch (type) {
    case BOOLEAN_TRUE:
    case BOOLEAN_FALSE: return "a boolean";
    case BYTE: return "a byte";
    case I16: return "an i16";
    case I32: return "an i32";
    case I64: return "an i64";
    case DOUBLE: return "a double";
    case BINARY: return "a binary";
    case LIST: return "a list";
    case SET: return "a set";
    case MAP: return "a map";
    case STRUCT: return "a struct";
    default: return "an unknown type";
  }
}

void CompactReader::enter() {
  if (++depth_ > kMaxDepth) fail("structs nested more than " + std::to_string(kMaxDepth) + " deep");
}

uint8_t CompactReader::byte() {
  if (pos_ >= size_) fail("it ends in the middle of a value (" + std::to_string(size_) + " bytes)");
  return data_[pos_++];
}

uint64_t CompactReader::varint(int bits) {
  uint64_t value = 0;
  for (int shift = 0;; shift += 7) {
    // A varint's bytes beyond its width may only pad (a zero continuation); past 64 bits,
    // shifting would be undefined.
    if (shift >= bits + 7 || shift >= 64) fail("a varint longer than " + std::to_string(bits) + " bits");
    const uint8_t b = byte();
    const uint64_t part = b & 0x7F;
    if (shift > 57 && (part >> (64 - shift)) != 0) {
      fail("a varint longer than " + std::to_string(bits) + " bits");
    }
    value |= part << shift;
    if ((b & 0x80) == 0) break;
  }
  if (bits < 64 && (value >> bits) != 0) {
    fail("a varint longer than " + std::to_string(bits) + " bits");
  }
  return value;
}

int64_t CompactReader::read_zigzag(int bits) {
  const uint64_t raw = varint(bits);
  return static_cast<int64_t>(raw >> 1) ^ -static_cast<int64_t>(raw & 1);
}

void CompactReader::expect(uint8_t type, uint8_t wanted, const char* what) {
  if (type != wanted) {
    fail(std::string("a field that should be ") + what + " is " + type_name(type));
  }
}

int32_t CompactReader::read_i32(uint8_t type) {
  if (type == BYTE) return static_cast<int8_t>(byte());
  if (type == I16) return static_cast<int16_t>(read_zigzag(16));
  expect(type, I32, "an i32");
  return static_cast<int32_t>(read_zigzag(32));
}

int64_t CompactReader::read_i64(uint8_t type) {
  if (type == I32 || type == I16 || type == BYTE) return read_i32(type);
  expect(type, I64, "an i64");
  return read_zigzag(64);
}

bool CompactReader::read_bool(uint8_t type) {
  if (type == BOOLEAN_TRUE) return true;
  if (type == BOOLEAN_FALSE) return false;
  expect(type, BYTE, "a boolean");
  return byte() == 1;
}

std::string_view CompactReader::read_binary(uint8_t type) {
  expect(type, BINARY, "a binary");
  const uint64_t length = varint(32);
  if (length > size_ - pos_) {
    fail("a binary of " + std::to_string(length) + " bytes runs past the end (" +
         std::to_string(size_ - pos_) + " left)");
  }
  std::string_view text(reinterpret_cast<const char*>(data_ + pos_), length);
  pos_ += length;
  return text;
}

ListHeader CompactReader::list_header(uint8_t type) {
  if (type != LIST && type != SET) expect(type, LIST, "a list");
  const uint8_t header = byte();
  ListHeader list;
  list.element_type = header & 0x0F;
  list.size = header >> 4;
  if (list.size == 15) list.size = static_cast<uint32_t>(varint(32));
  // Every element takes at least a byte: a size beyond the bytes left is a lie, refused before
  // anything is sized by it.
  if (list.size > size_ - pos_) {
    fail("a list of " + std::to_string(list.size) + " elements in " +
         std::to_string(size_ - pos_) + " bytes");
  }
  return list;
}

void CompactReader::skip(uint8_t type) {
  switch (type) {
    case BOOLEAN_TRUE:
    case BOOLEAN_FALSE: return;
    case BYTE: byte(); return;
    case I16: read_zigzag(16); return;
    case I32: read_zigzag(32); return;
    case I64: read_zigzag(64); return;
    case DOUBLE:
      if (size_ - pos_ < 8) fail("a double runs past the end");
      pos_ += 8;
      return;
    case BINARY: read_binary(type); return;
    case LIST:
    case SET: read_list(type, [&](uint8_t element) { skip(element); }); return;
    case MAP: {
      const uint64_t size = varint(32);
      if (size == 0) return;
      const uint8_t types = byte();
      if (size > size_ - pos_) fail("a map of " + std::to_string(size) + " entries runs past the end");
      // As in a list, a boolean key or value is a byte.
      auto element = [](uint8_t t) -> uint8_t {
        return t == BOOLEAN_TRUE || t == BOOLEAN_FALSE ? uint8_t{BYTE} : t;
      };
      enter();
      for (uint64_t i = 0; i < size; ++i) {
        skip(element(types >> 4));
        skip(element(types & 0x0F));
      }
      --depth_;
      return;
    }
    case STRUCT: read_struct([&](int32_t, uint8_t field) { skip(field); }); return;
    default: fail("a value of unknown type " + std::to_string(type));
  }
}

}  // namespace titan::data::thrift
