#include "checkpoint/safetensors.h"

#include <yaml-cpp/yaml.h>

#include <cstring>
#include <fstream>
#include <optional>

#include "core/check.h"

namespace titan::checkpoint {

namespace {

const std::vector<std::pair<DType, std::string>>& dtype_names() {
  static const std::vector<std::pair<DType, std::string>> names = {
      {DType::F32, "F32"},      {DType::F64, "F64"},      {DType::BF16, "BF16"},
      {DType::E4M3, "F8_E4M3"}, {DType::E5M2, "F8_E5M2"}, {DType::I32, "I32"},
      {DType::I64, "I64"},      {DType::U8, "U8"}};
  return names;
}

std::string to_safetensors_dtype(DType dtype) {
  for (const auto& [d, name] : dtype_names()) {
    if (d == dtype) return name;
  }
  TT_CHECK(false, "no safetensors name for dtype ", dtype_name(dtype));
}

std::optional<DType> from_safetensors_dtype(const std::string& name) {
  for (const auto& [d, n] : dtype_names()) {
    if (n == name) return d;
  }
  return std::nullopt;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Entries are separated by commas: each one after the first starts with one.
  std::string header = "{";
  auto separate = [&header] {
    if (header.back() != '{') header += ',';
  };
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      separate();
      header += json_string(key);
      header += ':';
      header += json_string(value);
    }
    header += '}';
  }
  uint64_t offset = 0;
  std::vector<Tensor> contiguous;
  for (const auto& [name, tensor] : tensors) {
    TT_CHECK(tensor.device().is_cpu(), "save_safetensors: ", name, " is on ", tensor.device());
    contiguous.push_back(tensor.contiguous());
    const uint64_t end = offset + tensor.nbytes();
    separate();
    header += json_string(name);
    header += ":{\"dtype\":\"" + to_safetensors_dtype(tensor.dtype()) + "\",\"shape\":[";
    for (int d = 0; d < tensor.ndim(); ++d) {
      if (d > 0) header += ',';
      header += std::to_string(tensor.size(d));
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) input_error("checkpoint: cannot write '", path, "'; check the folder is writable");
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const Tensor& t : contiguous) {
    out.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  }
  out.close();
  if (!out) input_error("checkpoint: writing '", path, "' failed (disk full?)");
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  if (!in) input_error("checkpoint: cannot read '", path_, "'; the checkpoint is incomplete");
  const uint64_t file_bytes = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char length_bytes[8] = {};
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
  if (!in || header_bytes > file_bytes - 8) {
    input_error("checkpoint: '", path_, "' is not a safetensors file (bad header length)");
  }
  std::string header(header_bytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  data_start_ = 8 + header_bytes;

  YAML::Node root;
  try {
    root = YAML::Load(header);
  } catch (const YAML::Exception& e) {
    input_error("checkpoint: '", path_, "' has an unreadable header: ", e.msg);
  }
  for (const auto& item : root) {
    const std::string name = item.first.as<std::string>();
    if (name == "__metadata__") {
      for (const auto& kv : item.second)
        metadata_[kv.first.as<std::string>()] = kv.second.as<std::string>();
      continue;
    }
    std::optional<DType> dtype = from_safetensors_dtype(item.second["dtype"].as<std::string>());
    if (!dtype) {
      input_error("checkpoint: '", path_, "': tensor ", name, " has unsupported dtype ",
                  item.second["dtype"].as<std::string>());
    }
    Entry e{*dtype, Shape{}, item.second["data_offsets"][0].as<uint64_t>(),
            item.second["data_offsets"][1].as<uint64_t>()};
    for (const auto& dim : item.second["shape"]) e.shape.push_back(dim.as<int64_t>());
    if (e.end < e.begin ||
        e.end - e.begin != static_cast<uint64_t>(e.shape.numel()) * dtype_size(e.dtype) ||
        data_start_ + e.end > file_bytes) {
      input_error("checkpoint: '", path_, "': tensor ", name,
                  " has inconsistent offsets (truncated file?)");
    }
    entries_[name] = e;
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) input_error("checkpoint: '", path_, "' has no tensor ", name);
  return it->second;
}

DType SafetensorsFile::dtype(const std::string& name) const { return entry(name).dtype; }

Shape SafetensorsFile::shape(const std::string& name) const { return entry(name).shape; }

void SafetensorsFile::read_into(const std::string& name, const Tensor& dst) const {
  const Entry& e = entry(name);
  if (e.dtype != dst.dtype() || e.shape != dst.shape()) {
    input_error("checkpoint: '", path_, "': ", name, " is ", dtype_name(e.dtype), e.shape,
                " but the model expects ", dtype_name(dst.dtype()), dst.shape(),
                "; resume with the config the checkpoint was saved with");
  }
  TT_CHECK(dst.is_contiguous() && dst.device().is_cpu(), "read_into: ", name,
           " needs a contiguous CPU tensor");
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + e.begin));
  in.read(static_cast<char*>(dst.raw_data()), static_cast<std::streamsize>(e.end - e.begin));
  if (!in) input_error("checkpoint: reading ", name, " from '", path_, "' failed");
}

}  // namespace titan::checkpoint
