#include "tools/generate/generation.h"

#include <algorithm>
#include <chrono>
#include <span>

namespace titan::generate {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One sequence's completion as it grows.
class Running {
 public:
  Running(const Prompt& prompt, const GenerationSettings& settings, Completion& out)
      : prompt_(prompt), settings_(settings), out_(out) {
    for (const std::string& stop : settings.stops)
      longest_stop_ = std::max(longest_stop_, stop.size());
  }

  bool done() const { return !out_.finish_reason.empty(); }

  // Appends the chosen token and decides whether the completion ends with it. Returns the text
  // settled by it (what can no longer be cut by a stop text).
  std::string_view accept(int32_t token, const data::Tokenizer& tokenizer, double decode_seconds) {
    out_.ids.push_back(token);
    if (settings_.eos && token == *settings_.eos) {
      finish("eos", decode_seconds);
    } else {
      const size_t before = out_.text.size();
      const int32_t id[1] = {token};
      out_.text += tokenizer.decode(id);
      if (!cut_at_stop(before)) {
        const int64_t used = static_cast<int64_t>(prompt_.ids.size() + out_.ids.size());
        if (static_cast<int64_t>(out_.ids.size()) >= settings_.max_new_tokens) {
          finish("length", decode_seconds);
        } else if (used >= settings_.position_limit) {
          finish("context", decode_seconds);
        }
      } else {
        finish("stop", decode_seconds);
      }
    }
    // Until it ends, hold back what could be the beginning of a stop text.
    size_t end = out_.text.size();
    if (!done()) end = end >= longest_stop_ ? end - (longest_stop_ > 0 ? longest_stop_ - 1 : 0) : 0;
    end = std::max(end, settled_);
    const std::string_view piece = std::string_view(out_.text).substr(settled_, end - settled_);
    settled_ = end;
    return piece;
  }

 private:
  // Cuts the text before the earliest stop text that ends in what `before` bytes left out.
  bool cut_at_stop(size_t before) {
    size_t cut = std::string::npos;
    for (const std::string& stop : settings_.stops) {
      const size_t from = before >= stop.size() - 1 ? before - (stop.size() - 1) : 0;
      const size_t at = out_.text.find(stop, from);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    if (cut == std::string::npos) return false;
    out_.text.resize(cut);
    return true;
  }

  void finish(const char* reason, double decode_seconds) {
    out_.finish_reason = reason;
    out_.decode_seconds = decode_seconds;
  }

  const Prompt& prompt_;
  const GenerationSettings& settings_;
  Completion& out_;
  size_t longest_stop_ = 0;
  size_t settled_ = 0;  // bytes of out_.text handed out
};

}  // namespace

int64_t cache_positions(const std::vector<Prompt>& batch, const GenerationSettings& settings) {
  int64_t longest = 0;
  for (const Prompt& p : batch)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.ids.size()));
  return std::max<int64_t>(
      longest, std::min(settings.position_limit, longest + settings.max_new_tokens - 1));
}

std::vector<Completion> complete_batch(model::Decoder& decoder, const data::Tokenizer& tokenizer,
                                       const std::vector<Prompt>& batch,
                                       const GenerationSettings& settings, bool rank0,
                                       const GenerationHooks& hooks, GenerationStats& stats) {
  const size_t B = batch.size();
  decoder.start(static_cast<int64_t>(B), cache_positions(batch, settings));
  if (decoder.cache().shape().bytes() > stats.largest_cache_bytes) {
    stats.largest_cache_bytes = decoder.cache().shape().bytes();
    stats.largest_cache = decoder.cache().shape().describe();
  }
  ++stats.batches;
  stats.prompts += static_cast<int64_t>(B);
  std::vector<Completion> out(B);
  std::vector<Running> running;
  running.reserve(B);
  for (size_t b = 0; b < B; ++b) running.emplace_back(batch[b], settings, out[b]);

  // Prefill: every prompt's rows in one forward; the logits of each prompt's last row.
  std::vector<int32_t> tokens, seqs, active;
  std::vector<int64_t> rows;
  for (size_t b = 0; b < B; ++b) {
    for (int32_t id : batch[b].ids) {
      tokens.push_back(id);
      seqs.push_back(static_cast<int32_t>(b));
    }
    rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
    active.push_back(static_cast<int32_t>(b));
  }
  const Clock::time_point start = Clock::now();
  Tensor logits = decoder.forward(tokens, seqs, rows);
  const Clock::time_point prefilled = Clock::now();
  const double prefill_seconds = seconds_between(start, prefilled);
  stats.prefill_tokens += static_cast<int64_t>(tokens.size());
  stats.prefill_seconds += prefill_seconds;
  for (Completion& c : out) c.prefill_seconds = prefill_seconds;

  const int64_t V = logits.size(1), sample_vocab = std::min(V, settings.sample_vocab);
  while (!active.empty()) {
    std::vector<int32_t> chosen(active.size(), 0);
    if (rank0) {
      for (size_t i = 0; i < active.size(); ++i) {
        const size_t b = static_cast<size_t>(active[i]);
        const std::span<const float> row(logits.data<float>() + static_cast<int64_t>(i) * V,
                                         static_cast<size_t>(sample_vocab));
        chosen[i] = model::sample_token(row, settings.sampling,
                                        static_cast<uint64_t>(batch[b].index), out[b].ids.size());
      }
    }
    if (hooks.share_tokens) hooks.share_tokens(chosen);
    const double elapsed = seconds_between(prefilled, Clock::now());
    std::vector<int32_t> still;
    tokens.clear();
    seqs.clear();
    for (size_t i = 0; i < active.size(); ++i) {
      const size_t b = static_cast<size_t>(active[i]);
      const std::string_view piece = running[b].accept(chosen[i], tokenizer, elapsed);
      if (!piece.empty() && hooks.on_text) hooks.on_text(b, piece);
      if (running[b].done()) continue;
      still.push_back(active[i]);
      tokens.push_back(chosen[i]);
      seqs.push_back(active[i]);
    }
    active = still;
    if (active.empty()) break;
    rows.resize(active.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    const Clock::time_point step_start = Clock::now();
    logits = decoder.forward(tokens, seqs, rows);
    stats.decode_seconds += seconds_between(step_start, Clock::now());
    stats.decode_tokens += static_cast<int64_t>(tokens.size());
    ++stats.decode_steps;
  }
  return out;
}

}  // namespace titan::generate
