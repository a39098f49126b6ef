#include "tools/tokenize/shard_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/check.h"

namespace titan::tokenize {

namespace fs = std::filesystem;

ShardWriter::ShardWriter(std::string dir, std::string prefix, int64_t shard_tokens,
                         int64_t vocab_size)
    : dir_(std::move(dir)),
      prefix_(std::move(prefix)),
      shard_tokens_(shard_tokens),
      vocab_size_(vocab_size),
      token_bytes_(vocab_size <= 65536 ? 2 : 4) {
  TT_CHECK(shard_tokens_ > 0, "shard_tokens ", shard_tokens_);
  prepare_folder();
}

ShardWriter::ShardWriter(std::string path, int64_t vocab_size)
    : dir_(fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : "."),
      prefix_(fs::path(path).filename().string()),
      single_path_(std::move(path)),
      shard_tokens_(std::numeric_limits<int64_t>::max()),
      vocab_size_(vocab_size),
      token_bytes_(vocab_size <= 65536 ? 2 : 4) {
  std::error_code error;
  if (fs::is_directory(single_path_, error)) {
    input_error("output '", single_path_, "' is a folder; name a new .bin file");
  }
  prepare_folder();
}

void ShardWriter::prepare_folder() const {
  std::error_code error;
  if (fs::exists(dir_, error) && !fs::is_directory(dir_, error)) {
    input_error("output folder '", dir_,
                "' is a file; name a folder for the shards (it is created if missing)");
  }
  fs::create_directories(dir_, error);
  if (error) {
    input_error("cannot create output folder '", dir_, "': ", error.message(),
                "; choose a folder you can write to");
  }
  // Found out now, not after an hour of tokenizing.
  std::string probe = dir_ + "/." + prefix_ + ".probe.tmp";
  std::FILE* file = std::fopen(probe.c_str(), "wb");
  if (file == nullptr) {
    input_error("output folder '", dir_, "' is not writable (", std::strerror(errno),
                "); choose another folder or fix its permissions");
  }
  std::fclose(file);
  std::remove(probe.c_str());
}

ShardWriter::~ShardWriter() {
  if (committed_) return;
  current_.reset();
  std::error_code error;
  fs::remove(shard_path(static_cast<int64_t>(finished_.size())) + ".tmp", error);
  for (const std::string& path : finished_) fs::remove(path, error);
}

std::string ShardWriter::shard_path(int64_t index) const {
  if (!single_path_.empty()) return single_path_;
  return fmt::format("{}/{}_{:05}.bin", dir_, prefix_, index);
}

std::string ShardWriter::pattern() const {
  if (!single_path_.empty()) return single_path_;
  return fmt::format("{}/{}_NNNNN.bin", dir_, prefix_);
}

void ShardWriter::append(std::span<const int32_t> tokens) {
  while (!tokens.empty()) {
    if (!current_) {
      const int64_t index = static_cast<int64_t>(finished_.size());
      current_ = std::make_unique<data::TokenFileWriter>(shard_path(index) + ".tmp", vocab_size_,
                                                         token_bytes_);
    }
    const auto room = static_cast<size_t>(shard_tokens_ - current_->token_count());
    const size_t take = std::min(room, tokens.size());
    current_->append(tokens.first(take));
    tokens = tokens.subspan(take);
    tokens_ += static_cast<int64_t>(take);
    if (current_->token_count() == shard_tokens_) {
      current_->finish();
      current_.reset();
      finished_.push_back(shard_path(static_cast<int64_t>(finished_.size())) + ".tmp");
    }
  }
}

int64_t ShardWriter::commit() {
  if (current_) {
    current_->finish();
    current_.reset();
    finished_.push_back(shard_path(static_cast<int64_t>(finished_.size())) + ".tmp");
  }
  for (size_t i = 0; i < finished_.size(); ++i) {
    std::error_code error;
    fs::rename(finished_[i], shard_path(static_cast<int64_t>(i)), error);
    if (error) {
      input_error("cannot rename '", finished_[i], "' to '", shard_path(static_cast<int64_t>(i)),
                  "': ", error.message(), "; check the output folder");
    }
  }
  committed_ = true;
  if (!single_path_.empty()) return 0;

  // An earlier run's shards past this run's last: <prefix>_<digits>.bin, numbered from shards().
  int64_t removed = 0;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, error)) {
    const std::string name = entry.path().filename().string();
    const std::string head = prefix_ + "_";
    if (!name.starts_with(head) || !name.ends_with(".bin")) continue;
    const std::string digits = name.substr(head.size(), name.size() - head.size() - 4);
    if (digits.size() < 5 || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), ::isdigit))
      continue;
    if (std::stoll(digits) < static_cast<int64_t>(finished_.size())) continue;
    std::error_code remove_error;
    if (fs::remove(entry.path(), remove_error)) ++removed;
  }
  return removed;
}

}  // namespace titan::tokenize
