#include "data/token_shards.h"

#include <glob.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "data/token_file.h"

namespace titan::data {

namespace fs = std::filesystem;

namespace {

bool has_glob_characters(const std::string& path) {
  return path.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> folder_shards(const std::string& folder, const std::string& key) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->path().extension() == ".bin" && it->is_regular_file(type_ec)) {
      paths.push_back(it->path().string());
    }
  }
  if (ec) {
    input_error(key, ": cannot list the folder '", folder, "': ", ec.message(),
                "; check it is readable");
  }
  if (paths.empty()) {
    input_error(key, ": the folder '", folder,
                "' holds no .bin token files; write shards into it with titan_tokenize, or point ",
                key, " at a text file, a .bin file or a glob such as '", folder, "/*.bin'");
  }
  return paths;
}

std::vector<std::string> glob_shards(const std::string& pattern, const std::string& key) {
  glob_t matches{};
  const int status = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &matches);
  std::vector<std::string> paths;
  for (size_t i = 0; status == 0 && i < matches.gl_pathc; ++i) {
    std::error_code ec;
    if (fs::is_regular_file(matches.gl_pathv[i], ec)) paths.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  if (status == GLOB_ABORTED) {
    input_error(key, ": cannot read a folder of the pattern '", pattern, "': ",
                std::strerror(errno), "; check its folders are readable");
  }
  if (paths.empty()) {
    input_error(key, ": the pattern '", pattern,
                "' matches no file; check the folder and the pattern (e.g. 'shards/*.bin'), or "
                "write the shards with titan_tokenize");
  }
  return paths;
}

}  // namespace

bool names_token_shards(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return true;
  return has_glob_characters(path) && !fs::exists(path, ec);
}

std::vector<std::string> list_token_shards(const std::string& path, const std::string& key) {
  std::error_code ec;
  std::vector<std::string> paths =
      fs::is_directory(path, ec) ? folder_shards(path, key) : glob_shards(path, key);
  // Byte order, not the locale's collation, so the order is the same on every node.
  std::sort(paths.begin(), paths.end());
  return paths;
}

TokenShards::TokenShards(std::string pattern, const std::vector<std::string>& paths,
                         const std::string& key)
    : pattern_(std::move(pattern)), paths_(paths) {
  TT_CHECK(!paths_.empty(), "TokenShards of '", pattern_, "' without a file");
  starts_.reserve(paths_.size() + 1);
  starts_.push_back(0);
  for (size_t k = 0; k < paths_.size(); ++k) {
    try {
      shards_.push_back(open_token_file(paths_[k], key));
    } catch (const InputError& e) {
      // Which of many files, and why it was read at all.
      input_error(e.what(), " (shard ", k + 1, " of ", paths_.size(), " that ", key, " '",
                  pattern_, "' names)");
    }
    // Blocks of packed conversations stay aligned to the windows within one file only.
    if (shards_.back()->packed_window() > 0 && paths_.size() > 1) {
      input_error(key, " '", pattern_, "': ", paths_[k],
                  " holds packed conversations (titan_tokenize --chat), which a stream of "
                  "shards would shift off their windows; name each such file alone (several "
                  "in data.sources)");
    }
    starts_.push_back(starts_.back() + shards_.back()->size());
    vocab_bound_ = std::max(vocab_bound_, shards_.back()->vocab_bound());
  }
}

void TokenShards::read(int64_t start, int64_t count, int32_t* dst) const {
  TT_CHECK(start >= 0 && count >= 0 && start + count <= size(), "token shards read [", start, ", ",
           start + count, ") outside ", size(), " tokens");
  // The last shard starting at or before `start`: empty shards before it are skipped.
  size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), start) -
                                 starts_.begin()) -
             1;
  while (count > 0) {
    const int64_t offset = start - starts_[k];
    const int64_t n = std::min(count, starts_[k + 1] - start);
    if (n > 0) shards_[k]->read(offset, n, dst);
    start += n;
    dst += n;
    count -= n;
    ++k;
  }
}

std::string TokenShards::describe() const {
  auto name = [](const std::string& path) { return fs::path(path).filename().string(); };
  const std::string files = paths_.size() == 1
                                ? name(paths_.front())
                                : name(paths_.front()) + " … " + name(paths_.back());
  return detail::concat(pattern_, " (", paths_.size(), paths_.size() == 1 ? " shard " : " shards ",
                        files, ", ", size(), " tokens, vocab ", vocab_bound_, ")");
}

std::unique_ptr<TokenSource> open_token_shards(const std::string& path, const std::string& key) {
  return std::make_unique<TokenShards>(path, list_token_shards(path, key), key);
}

}  // namespace titan::data
