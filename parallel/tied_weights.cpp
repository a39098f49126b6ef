#include "parallel/tied_weights.h"

#include <iomanip>
#include <sstream>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/memory_tag.h"
#include "core/profiler.h"
#include "model/ops/tensor_math.h"

namespace titan::parallel {

TiedWeights::TiedWeights(const std::vector<model::Parameter*>& params, const DeviceMesh& mesh,
                         bool tied, int64_t embedding_pp, int64_t head_pp)
    : mesh_(mesh), embedding_pp_(embedding_pp), head_pp_(head_pp) {
  // Untied, or one part with both ends: nothing to keep equal.
  if (!tied || mesh.degree(MeshDim::Pp) == 1) return;
  for (model::Parameter* p : params) {
    if (p->frozen) continue;  // a frozen embedding has no gradient to sum, and stays equal
    if (p->name == "tok_embeddings.weight") embedding_ = p;
    if (p->tied_to == "tok_embeddings.weight") copy_ = p;
  }
}

void TiedWeights::sum_gradients() {
  if (empty()) return;
  profiler::Span span("tied_embeddings.sum_gradients", "optimizer");
  MemoryTagScope tag(MemoryCategory::CommBuffers);
  if (embedding_ != nullptr && copy_ != nullptr) {  // both stages on this rank (ZBV)
    const Tensor sum = embedding_->grad.clone();
    model::accumulate(sum, copy_->grad);
    embedding_->grad.copy_from(sum);
    copy_->grad.copy_from(sum);
    return;
  }
  model::Parameter& mine = embedding_ != nullptr ? *embedding_ : *copy_;
  const int peer = static_cast<int>(embedding_ != nullptr ? head_pp_ : embedding_pp_);
  const Tensor theirs = Tensor::empty(mine.grad.shape(), mine.grad.dtype(), mine.grad.device());
  Communicator& comm = mesh_[MeshDim::Pp].comm();
  for (Work& w : comm.point_to_point_async({{PeerTransfer::Direction::Recv, theirs, peer, 0},
                                            {PeerTransfer::Direction::Send, mine.grad, peer, 0}})) {
    w.wait();
  }
  // The embedding's gradient first on both sides: the same additions, the same bits.
  if (embedding_ != nullptr) {
    model::accumulate(mine.grad, theirs);
  } else {
    model::accumulate(theirs, mine.grad);
    mine.grad.copy_from(theirs);
  }
}

std::string TiedWeights::compare_copies() {
  if (empty()) return "";
  auto checksum = [](const model::Parameter& p) {
    const Tensor host = p.value.to(Device::cpu()).contiguous();
    return crc32c(host.raw_data(), host.nbytes());
  };
  uint32_t embedding = 0, copy = 0;
  if (embedding_ != nullptr && copy_ != nullptr) {
    embedding = checksum(*embedding_);
    copy = checksum(*copy_);
  } else {
    const uint32_t mine = checksum(embedding_ != nullptr ? *embedding_ : *copy_);
    const int peer = static_cast<int>(embedding_ != nullptr ? head_pp_ : embedding_pp_);
    const Tensor sent = Tensor::from_vector<int64_t>({static_cast<int64_t>(mine)}, {1});
    const Tensor received = Tensor::empty({1}, DType::I64);
    Communicator& comm = mesh_[MeshDim::Pp].comm();
    for (Work& w : comm.point_to_point_async({{PeerTransfer::Direction::Recv, received, peer, 0},
                                              {PeerTransfer::Direction::Send, sent, peer, 0}})) {
      w.wait();
    }
    const auto theirs = static_cast<uint32_t>(received.data<int64_t>()[0]);
    embedding = embedding_ != nullptr ? mine : theirs;
    copy = embedding_ != nullptr ? theirs : mine;
  }
  std::ostringstream line;
  line << "tied embeddings: the first stage's tok_embeddings.weight and the last stage's copy are "
       << (embedding == copy ? "bit-identical" : "DIFFERENT") << " (crc32c " << std::hex
       << std::setfill('0') << std::setw(8) << embedding << " and " << std::setw(8) << copy << ")";
  return line.str();
}

}  // namespace titan::parallel
