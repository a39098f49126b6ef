// Bytes a rank is expected to hold, by what they are for, estimated from shapes before anything
// is allocated. The parts are the categories the allocator measures (core/memory_tag.h), so an
// estimate and a memory snapshot of the same run line up part by part.
//
// The estimate is not a sum of formulas but a replay: each layer describes, next to the code it
// estimates, the allocations and frees that code makes, in the order it makes them (model/
// activation_memory.h: the blocks and the head; parallel/memory_estimate.h: FSDP's gathers and
// tensor parallelism's buffers; fp8/float8_memory.h: the FP8 operands). A MemoryTimeline plays
// them as the allocator would count them — live bytes per category, and the categories at the
// moment of the highest total — so the estimate's peak is the snapshot's peak, part by part,
// and not the sum of each part's own worst moment. In double: any shape a user types gives a
// number, never an overflow.
#pragma once

#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "core/memory_tag.h"

namespace titan {

struct MemoryEstimate {
  std::array<double, kMemoryCategories> bytes{};

  double& operator[](MemoryCategory category) { return bytes[static_cast<size_t>(category)]; }
  double operator[](MemoryCategory category) const { return bytes[static_cast<size_t>(category)]; }
  double total() const {
    double sum = 0;
    for (double b : bytes) sum += b;
    return sum;
  }
  MemoryEstimate& operator+=(const MemoryEstimate& other) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] += other.bytes[i];
    return *this;
  }
};

// The allocator's counting (core/allocator.h), with bytes instead of tensors. hold() is an
// allocation under the innermost open Tag (as MemoryTagScope tags a tensor); the Bytes it
// returns are shared like a Tensor's storage and given back when the last copy goes, so a replay
// reads like the code it mirrors: `Bytes xn = t.hold(T * D * e); … xn = {};`.
class MemoryTimeline {
  struct Record;

 public:
  // A held allocation; empty when default-made. Copies share it.
  class Bytes {
   public:
    Bytes() = default;
    double size() const { return record_ ? record_->bytes : 0; }
    bool held() const { return record_ != nullptr; }

   private:
    friend class MemoryTimeline;
    explicit Bytes(std::shared_ptr<Record> record) : record_(std::move(record)) {}
    std::shared_ptr<Record> record_;
  };

  // The category of the allocations made while it is open; tags nest, the innermost wins.
  class Tag {
   public:
    Tag(MemoryTimeline& timeline, MemoryCategory category) : timeline_(timeline) {
      timeline_.tags_.push_back(category);
    }
    ~Tag() { timeline_.tags_.pop_back(); }
    Tag(const Tag&) = delete;
    Tag& operator=(const Tag&) = delete;

   private:
    MemoryTimeline& timeline_;
  };

  MemoryTimeline() = default;
  MemoryTimeline(const MemoryTimeline&) = delete;
  MemoryTimeline& operator=(const MemoryTimeline&) = delete;

  // `bytes` held under the current tag (Other when none is open) until the last copy goes.
  Bytes hold(double bytes) {
    return hold(tags_.empty() ? MemoryCategory::Other : tags_.back(), bytes);
  }
  Bytes hold(MemoryCategory category, double bytes) {
    auto record = std::make_shared<Record>(*this, category, bytes);
    count(category, bytes);
    return Bytes(std::move(record));
  }

  // The peak window starts now, at the bytes held now (Allocator::track_peak_breakdown).
  void start_peak() {
    at_peak_ = live_;
    peak_ = live_.total();
  }
  const MemoryEstimate& live() const { return live_; }
  // The categories at the moment of the highest total since start_peak (or since the start).
  const MemoryEstimate& at_peak() const { return at_peak_; }
  double peak() const { return peak_; }

 private:
  struct Record {
    Record(MemoryTimeline& t, MemoryCategory c, double b) : timeline(t), category(c), bytes(b) {}
    ~Record() { timeline.count(category, -bytes); }
    Record(const Record&) = delete;
    Record& operator=(const Record&) = delete;
    MemoryTimeline& timeline;
    MemoryCategory category;
    double bytes;
  };

  void count(MemoryCategory category, double bytes) {
    live_[category] += bytes;
    const double total = live_.total();
    if (bytes > 0 && total > peak_) {
      peak_ = total;
      at_peak_ = live_;
    }
  }

  std::vector<MemoryCategory> tags_;
  MemoryEstimate live_, at_peak_;
  double peak_ = 0;
};

}  // namespace titan
