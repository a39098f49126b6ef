#include "data/documents.h"

#include <algorithm>

#include "core/check.h"
#include "data/token_file.h"

namespace titan::data {

Tensor document_starts(const Tensor& inputs, int32_t eos_id) {
  TT_CHECK(inputs.ndim() == 2 && inputs.dtype() == DType::I32 && inputs.device().is_cpu(),
           "document_starts: inputs must be i32 [B, S] on the CPU, got ", inputs);
  const Tensor tokens = inputs.contiguous();
  const int64_t B = tokens.size(0), S = tokens.size(1);
  Tensor starts = Tensor::empty({B, S}, DType::I32);
  const int32_t* in = tokens.data<int32_t>();
  int32_t* out = starts.data<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    int32_t start = 0;
    for (int64_t i = 0; i < S; ++i) {
      out[b * S + i] = start;
      if (in[b * S + i] == eos_id) start = static_cast<int32_t>(i + 1);
    }
  }
  return starts;
}

double document_square_sum(std::span<const int32_t> doc_start) {
  double sum = 0;
  const size_t n = doc_start.size();
  for (size_t s = 0; s < n;) {
    size_t e = s + 1;
    while (e < n && doc_start[e] == doc_start[s]) ++e;
    sum += static_cast<double>(e - s) * static_cast<double>(e - s);
    s = e;
  }
  return sum;
}

DocumentContext sample_document_context(const TokenSource& source, int64_t seq_len, int32_t eos_id,
                                        int64_t max_windows) {
  DocumentContext c;
  const int64_t windows = seq_len > 0 ? (source.size() - 1) / seq_len : 0;
  if (windows <= 0 || max_windows <= 0) return c;
  c.windows = std::min(windows, max_windows);
  Tensor inputs = Tensor::empty({1, seq_len}, DType::I32);
  double keys = 0, documents = 0;
  for (int64_t k = 0; k < c.windows; ++k) {
    const int64_t window = k * windows / c.windows;
    source.read(window * seq_len, seq_len, inputs.data<int32_t>());
    if (source.packed_window() > 0) {  // packed conversations: the ids, without the loss mask
      int32_t* ids = inputs.data<int32_t>();
      for (int64_t i = 0; i < seq_len; ++i) ids[i] = token_id(ids[i]);
    }
    const Tensor starts = document_starts(inputs, eos_id);
    const std::span<const int32_t> row(starts.data<int32_t>(), static_cast<size_t>(seq_len));
    keys += document_square_sum(row) / static_cast<double>(seq_len);
    int64_t runs = 1;
    for (size_t i = 1; i < row.size(); ++i) runs += row[i] != row[i - 1] ? 1 : 0;
    documents += static_cast<double>(runs);
  }
  c.keys_per_token = keys / static_cast<double>(c.windows);
  c.mean_documents = documents / static_cast<double>(c.windows);
  return c;
}

}  // namespace titan::data
