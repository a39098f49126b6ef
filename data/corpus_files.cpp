#include "data/corpus_files.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace titan::data {

namespace {

namespace fs = std::filesystem;

constexpr const char* kFolderKinds =
    ".txt, .jsonl, .json or .ndjson (optionally .gz or .zst) or .parquet";

bool ends_with(const std::string& name, std::string_view suffix) {
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// The name without its compression suffix, lower-cased.
std::string base_name(const std::string& path, Compression* compression) {
  std::string name = lower(fs::path(path).filename().string());
  *compression = Compression::NONE;
  for (auto [suffix, kind] :
       {std::pair{".gz", Compression::GZIP}, std::pair{".zst", Compression::ZSTD},
        std::pair{".zstd", Compression::ZSTD}}) {
    if (ends_with(name, suffix)) {
      *compression = kind;
      return name.substr(0, name.size() - std::strlen(suffix));
    }
  }
  return name;
}

bool taken_from_folder(const fs::path& path) {
  Compression compression;
  std::string name = base_name(path.string(), &compression);
  if (path.filename().string().starts_with(".")) return false;
  if (compression == Compression::NONE && ends_with(name, ".parquet")) return true;
  for (const char* suffix : {".txt", ".jsonl", ".json", ".ndjson"}) {
    if (ends_with(name, suffix)) return true;
  }
  return false;
}

uint64_t file_bytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    input_error("cannot read input '", path, "': ", std::strerror(errno),
                "; check the path and its permissions");
  }
  return static_cast<uint64_t>(st.st_size);
}

void add_folder(const std::string& folder, std::vector<CorpusFile>& files) {
  std::vector<std::string> found;
  std::error_code error;
  fs::recursive_directory_iterator it(folder, error), end;
  if (error) {
    input_error("cannot list input folder '", folder, "': ", error.message(),
                "; check its permissions");
  }
  for (; it != end; it.increment(error)) {
    if (error) {
      input_error("cannot list input folder '", folder, "': ", error.message(),
                  "; check its permissions");
    }
    const fs::path& path = it->path();
    if (it->is_directory(error)) {
      if (path.filename().string().starts_with(".")) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(error) && taken_from_folder(path)) found.push_back(path.string());
  }
  if (found.empty()) {
    input_error("input folder '", folder, "' holds no ", kFolderKinds,
                " file; put the corpus there or name its files on the command line");
  }
  std::sort(found.begin(), found.end());
  for (const std::string& path : found)
    files.push_back(classify_corpus_file(path, file_bytes(path)));
}

void add_path(const std::string& path, std::vector<CorpusFile>& files) {
  std::error_code error;
  fs::file_status status = fs::status(path, error);
  if (fs::is_directory(status)) {
    add_folder(path, files);
  } else if (fs::is_regular_file(status)) {
    files.push_back(classify_corpus_file(path, file_bytes(path)));
  } else if (fs::exists(status)) {
    input_error("input '", path,
                "' is not a regular file or folder; give text, JSON lines or Parquet files");
  } else {
    input_error("input '", path, "' does not exist; give a file, a folder or a glob pattern");
  }
}

bool is_pattern(const std::string& text) { return text.find_first_of("*?[") != std::string::npos; }

void add_pattern(const std::string& pattern, std::vector<CorpusFile>& files) {
  glob_t matches{};
  int status = ::glob(pattern.c_str(), 0, nullptr, &matches);
  if (status == GLOB_NOMATCH) {
    ::globfree(&matches);
    input_error("input pattern '", pattern,
                "' matches no file; check it (quote it so that titan_tokenize, not the shell, "
                "expands it)");
  }
  if (status != 0) {
    ::globfree(&matches);
    input_error("cannot expand input pattern '", pattern, "' (glob error ", status,
                "); check the folders it names are readable");
  }
  std::vector<std::string> paths(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  ::globfree(&matches);
  for (const std::string& path : paths) add_path(path, files);
}

}  // namespace

CorpusFile classify_corpus_file(const std::string& path, uint64_t bytes) {
  CorpusFile file;
  file.path = path;
  file.bytes = bytes;
  std::string name = base_name(path, &file.compression);
  for (const char* suffix : {".jsonl", ".json", ".ndjson"}) {
    if (ends_with(name, suffix)) file.format = CorpusFormat::JSON_LINES;
  }
  // A Parquet file compresses its own pages; a .parquet.gz is not one to read page by page.
  if (file.compression == Compression::NONE && ends_with(name, ".parquet")) {
    file.format = CorpusFormat::PARQUET;
  }
  return file;
}

std::string describe_corpus_file(const CorpusFile& file) {
  if (file.format == CorpusFormat::PARQUET) return "Parquet";
  std::string text = file.format == CorpusFormat::JSON_LINES ? "JSON lines" : "text";
  if (file.compression == Compression::GZIP) text += ", gzip";
  if (file.compression == Compression::ZSTD) text += ", zstd";
  return text;
}

std::vector<CorpusFile> expand_corpus_inputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) {
    input_error("no input given; name text, JSON lines or Parquet files, folders or glob patterns");
  }
  std::vector<CorpusFile> files;
  for (const std::string& input : inputs) {
    std::error_code error;
    // A name that exists is taken as it is, even if it holds '*' or '['.
    if (is_pattern(input) && !fs::exists(input, error)) {
      add_pattern(input, files);
    } else {
      add_path(input, files);
    }
  }
  return files;
}

}  // namespace titan::data
