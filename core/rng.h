// Counter-based random numbers: every draw is a pure function of (seed, stream name, index).
//
// This is what makes initialisation sharding-invariant (docs/architecture.md#decision-6): element i
// of parameter "layers.3.attention.wq.weight" gets the same value whether one rank initialises
// the whole tensor or eight ranks each initialise their own shard, so every mesh starts from
// bit-identical weights. The data loader's shuffle uses the same generator with its own stream
// name, so a loader restored from a checkpoint needs only its position, never a generator state.
//
// The generator is Philox4x32-10 (Salmon et al., SC'11: "Parallel random numbers: as easy as
// 1, 2, 3"), the counter-based generator cuRAND and PyTorch's CUDA RNG use: 10 rounds of a
// multiply-xor network over a 128-bit counter under a 64-bit key. The block function and the
// normal transform live in core/philox.h, which a CUDA kernel includes too: model/ops/init_values.h
// draws a parameter on the device with the bits the host draws.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace titan {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// One Philox4x32-10 block: four independent uniformly distributed 32-bit words.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// 64-bit FNV-1a of a name; the stream part of the key.
uint64_t hash_name(std::string_view name);

// Throws unless [lo, hi] (in standard deviations) holds at least half of N(0, 1)'s mass, which
// truncated_normal's rejection needs.
void check_truncation(double lo, double hi);

class CounterRng {
 public:
  CounterRng(uint64_t seed, std::string_view stream_name);

  // `draw` selects an independent variate at the same index (rejection sampling uses it).
  uint64_t bits64(uint64_t index, uint32_t draw = 0) const;
  double uniform(uint64_t index, uint32_t draw = 0) const;  // in (0, 1), never 0 or 1
  // N(0, 1), Box-Muller from one block with core/philox.h's own logarithm and cosine (the same
  // bits on the host and on a CUDA device).
  double normal(uint64_t index, uint32_t draw = 0) const;
  // N(0, 1) conditioned on [lo, hi] (in standard deviations), by rejection over draws 0, 1, …:
  // the first normal(index, draw) inside the interval. The interval must hold at least half
  // the probability mass (check_truncation), so all 64 draws miss with probability under 2^-64;
  // then the 64th is clamped into the interval.
  double truncated_normal(uint64_t index, double lo, double hi) const;

  // The Philox key, for a kernel that draws this stream on a device.
  PhiloxKey key() const { return key_; }

 private:
  PhiloxCounter block(uint64_t index, uint32_t draw) const;
  PhiloxKey key_;
};

}  // namespace titan
