// titan_tokenizer_bench: encode throughput of a Hugging Face tokenizer.json (data/hf_tokenizer.h)
// on one text file, the numbers scripts/bench_tokenizer.sh sets beside Hugging Face's own.
//
//   titan_tokenizer_bench TOKENIZER FILE [REPEATS] [THREADS]
//
// Encodes FILE whole (one encode call, as HF's encode(text)) and line by line (each line one
// call, as HF's encodeBatch of text.split("\n")), REPEATS times each (default 3), and prints
// one JSON line: the best time of each and its MB/s. Line by line runs on THREADS threads
// (default 1), each taking a contiguous block of lines.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "data/hf_tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string_view::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  lines.push_back(text.substr(start));
  return lines;
}

size_t encode_lines(const titan::data::Tokenizer& tokenizer,
                    const std::vector<std::string_view>& lines, int threads) {
  std::vector<size_t> tokens(static_cast<size_t>(threads), 0);
  std::vector<std::thread> workers;
  size_t block = (lines.size() + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      size_t begin = std::min(lines.size(), t * block);
      size_t end = std::min(lines.size(), begin + block);
      for (size_t i = begin; i < end; ++i) tokens[t] += tokenizer.encode(lines[i]).size();
    });
  }
  for (std::thread& worker : workers) worker.join();
  size_t total = 0;
  for (size_t n : tokens) total += n;
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: titan_tokenizer_bench TOKENIZER FILE [REPEATS] [THREADS]\n");
    return 2;
  }
  try {
    int repeats = argc > 3 ? std::max(1, std::stoi(argv[3])) : 3;
    int threads = argc > 4 ? std::max(1, std::stoi(argv[4])) : 1;
    auto start = std::chrono::steady_clock::now();
    auto tokenizer = titan::data::HfTokenizer::load(argv[1], "TOKENIZER");
    double load_s = seconds_since(start);

    std::ifstream in(argv[2], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "titan_tokenizer_bench: error: cannot open '%s'\n", argv[2]);
      return 2;
    }
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::vector<std::string_view> lines = split_lines(text);

    double whole_s = 1e30;
    double lines_s = 1e30;
    size_t whole_tokens = 0;
    size_t lines_tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      // Each round starts with cold caches, as a fresh HF tokenizer would.
      tokenizer = titan::data::HfTokenizer::load(argv[1], "TOKENIZER");
      start = std::chrono::steady_clock::now();
      whole_tokens = tokenizer->encode(text).size();
      whole_s = std::min(whole_s, seconds_since(start));

      tokenizer = titan::data::HfTokenizer::load(argv[1], "TOKENIZER");
      start = std::chrono::steady_clock::now();
      lines_tokens = encode_lines(*tokenizer, lines, threads);
      lines_s = std::min(lines_s, seconds_since(start));
    }
    double mb = static_cast<double>(text.size()) / 1e6;
    std::printf(
        "{\"bytes\": %zu, \"repeats\": %d, \"threads\": %d, \"load_s\": %.3f, "
        "\"whole\": {\"tokens\": %zu, \"best_s\": %.4f, \"mb_per_s\": %.2f}, "
        "\"lines\": {\"tokens\": %zu, \"best_s\": %.4f, \"mb_per_s\": %.2f}}\n",
        text.size(), repeats, threads, load_s, whole_tokens, whole_s, mb / whole_s, lines_tokens,
        lines_s, mb / lines_s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan_tokenizer_bench: error: %s\n", e.what());
    return 2;
  }
}
