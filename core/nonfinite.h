// Finding NaN and infinity in stored values, in the bytes a reader has just read.
//
// A checkpoint saved by a run that had diverged, or a Hugging Face folder damaged before its
// checksum was taken, holds NaN or infinite weights that every format check passes: a load
// that takes them runs the whole set-up and a step of a large job before the loss says "nan".
// Every reader of stored tensors calls first_nonfinite() on the bytes it read, in their stored
// dtype, before converting them, so the check is one more pass over memory the read has just
// touched. It takes any pointer and count, so a reader that reads in large blocks or maps the
// file calls it on the same bytes.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace titan {

// The first of `count` elements of `dtype` at `data` (any alignment) that is NaN or an infinity.
struct NonFinite {
  uint64_t index = 0;     // among the `count`
  const char* what = "";  // "NaN", "+inf" or "-inf"
};

// nullopt when every element is finite, and always for the integer dtypes. Float formats:
// f64, f32, bf16, e5m2 (all-ones exponent: an infinity or NaN) and e4m3fn (only NaN, S.1111.111).
std::optional<NonFinite> first_nonfinite(DType dtype, const void* data, uint64_t count);

}  // namespace titan
