// The pipeline's messages on CUDA tensors, one NCCL communicator per kind and direction
// (docs/architecture.md#departs-17).
//
// NCCL matches a pair's messages in post order, one communicator on one stream. The pipeline's
// zero-bubble lists keep the order of each kind of message between two ranks (activations, and
// gradients) but not of both together, and a receive is posted one compute ahead of its reader:
// on the one stream that FSDP's and TP's collectives share, a receive waiting for its sender
// would hold up every collective posted after it, and the ranks of a collective post it at
// different places in their lists. So between neighbouring pp ranks each kind of message in each
// direction has a two-rank communicator of its own, on a stream of its own
// (split_nccl_peer_channel, made with the mesh: device_mesh.cpp), and the pp group's
// communicator sends each point-to-point transfer on the one its (peer, channel, direction)
// names (CPU tensors through that one's MPI twin). Each of those carries the sends of one rank
// to one other, in post order, so a proven list's i-th send and i-th receive there are each
// other's. Everything else (collectives, a peer or channel without a communicator of its own)
// goes to the group's own communicator, as before.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"

namespace titan::parallel {

// The pipeline's two kinds of message, each a channel of its own (PeerTransfer::channel): what
// the mesh makes peer channels for.
inline constexpr int kActivationChannel = 0;
inline constexpr int kGradientChannel = 1;

// One direction of one channel between this rank and `peer` (a rank of the group).
struct PeerChannel {
  int peer = -1;
  int channel = 0;  // PeerTransfer::channel
  PeerTransfer::Direction direction = PeerTransfer::Direction::Send;
  std::shared_ptr<Communicator> comm;  // two ranks: this one and the peer
  int peer_in_comm = -1;               // the peer's rank in `comm`
};

// How a mesh cuts the channels of a pp ring out of the world: pair p joins pp ranks p and
// (p + 1) % pp (one pair at pp 2), and a split of the world can only pair ranks that are in no
// other pair of it, so the pairs go in rounds (the ring's edges coloured): 1 at pp 2, 2 at an
// even pp, 3 at an odd one. This rank's pair in a round, if it has one there, and its key in it:
// 0 at p, 1 at p + 1.
struct PeerPair {
  int64_t round = 0;
  int64_t pair = 0;
  int key = 0;
  int64_t peer = 0;  // the other pp rank of the pair
};
int64_t peer_pair_rounds(int64_t pp);
std::vector<PeerPair> peer_pairs_of(int64_t pp, int64_t coordinate);  // in round order

// `group`'s collectives and messages, except the transfers whose (peer, channel, direction)
// `channels` name, which go on theirs. A (peer, channel, direction) named twice is refused.
std::shared_ptr<Communicator> with_peer_channels(std::shared_ptr<Communicator> group,
                                                 std::vector<PeerChannel> channels);

}  // namespace titan::parallel
