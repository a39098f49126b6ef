#include "parallel/comm/peer_channels.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "core/check.h"

namespace titan::parallel {
namespace {

class PeerChannelCommunicator final : public Communicator {
 public:
  PeerChannelCommunicator(std::shared_ptr<Communicator> group, std::vector<PeerChannel> channels)
      : group_(std::move(group)) {
    TT_CHECK(group_ != nullptr, "with_peer_channels: no group communicator");
    for (PeerChannel& c : channels) {
      TT_CHECK(c.comm != nullptr && c.comm->size() == 2 &&
                   (c.peer_in_comm == 0 || c.peer_in_comm == 1) && c.peer_in_comm != c.comm->rank(),
               "with_peer_channels(", name(), "): the channel to ", c.peer,
               " needs a two-rank communicator and the peer's rank in it, got ",
               c.comm ? c.comm->size() : 0, " ranks and peer ", c.peer_in_comm);
      TT_CHECK(c.peer >= 0 && c.peer < group_->size() && c.peer != group_->rank(),
               "with_peer_channels(", name(), "): peer ", c.peer, " of rank ", group_->rank(),
               " in a group of ", group_->size());
      const Key key{c.peer, c.channel, c.direction};
      TT_CHECK(!routes_.contains(key), "with_peer_channels(", name(), "): channel ", c.channel,
               " to ", c.peer, " named twice");
      routes_.emplace(key, std::move(c));
    }
  }

  int size() const override { return group_->size(); }
  int rank() const override { return group_->rank(); }
  const std::string& name() const override { return group_->name(); }

  Work all_gather_async(const Tensor& out, const Tensor& in) override {
    return group_->all_gather_async(out, in);
  }
  Work reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op) override {
    return group_->reduce_scatter_async(out, in, op);
  }
  Work all_reduce_async(const Tensor& t, ReduceOp op) override {
    return group_->all_reduce_async(t, op);
  }
  Work broadcast_async(const Tensor& t, int root) override {
    return group_->broadcast_async(t, root);
  }
  Work barrier_async() override { return group_->barrier_async(); }
  Work exchange_async(const std::vector<Tensor>& send, int send_peer,
                      const std::vector<Tensor>& recv, int recv_peer) override {
    return group_->exchange_async(send, send_peer, recv, recv_peer);
  }

  Work send_async(const Tensor& t, int peer, int channel) override {
    return transfer({PeerTransfer::Direction::Send, t, peer, channel});
  }
  Work recv_async(const Tensor& t, int peer, int channel) override {
    return transfer({PeerTransfer::Direction::Recv, t, peer, channel});
  }

  // The transfers with a channel of their own each on it, in the order given (the order of
  // their channel's messages); the others as one group on the group's communicator.
  std::vector<Work> point_to_point_async(const std::vector<PeerTransfer>& transfers) override {
    std::vector<Work> works(transfers.size());
    std::vector<PeerTransfer> rest;
    std::vector<size_t> rest_at;
    for (size_t i = 0; i < transfers.size(); ++i) {
      if (route_of(transfers[i]) != nullptr) {
        works[i] = transfer(transfers[i]);
      } else {
        rest.push_back(transfers[i]);
        rest_at.push_back(i);
      }
    }
    if (!rest.empty()) {
      std::vector<Work> posted = group_->point_to_point_async(rest);
      for (size_t k = 0; k < rest_at.size(); ++k) works[rest_at[k]] = std::move(posted[k]);
    }
    return works;
  }

 private:
  using Key = std::tuple<int, int, PeerTransfer::Direction>;  // peer, channel, direction

  const PeerChannel* route_of(const PeerTransfer& t) const {
    const auto it = routes_.find({t.peer, t.channel, t.direction});
    return it == routes_.end() ? nullptr : &it->second;
  }

  Work transfer(const PeerTransfer& t) {
    const PeerChannel* route = route_of(t);
    const bool send = t.direction == PeerTransfer::Direction::Send;
    if (route == nullptr) {
      return send ? group_->send_async(t.tensor, t.peer, t.channel)
                  : group_->recv_async(t.tensor, t.peer, t.channel);
    }
    return send ? route->comm->send_async(t.tensor, route->peer_in_comm)
                : route->comm->recv_async(t.tensor, route->peer_in_comm);
  }

  std::shared_ptr<Communicator> group_;
  std::map<Key, PeerChannel> routes_;
};

}  // namespace

int64_t peer_pair_rounds(int64_t pp) {
  TT_CHECK(pp >= 2, "peer_pair_rounds: pp ", pp, " has no pairs");
  return pp == 2 ? 1 : (pp % 2 == 1 ? 3 : 2);
}

std::vector<PeerPair> peer_pairs_of(int64_t pp, int64_t coordinate) {
  TT_CHECK(pp >= 2 && coordinate >= 0 && coordinate < pp, "peer_pairs_of: pp rank ", coordinate,
           " of ", pp);
  const int64_t pairs = pp == 2 ? 1 : pp;
  // Alternate rounds round the ring; an odd ring's last pair meets both colours at its ends.
  auto round_of = [pp](int64_t p) { return pp % 2 == 1 && p == pp - 1 ? 2 : p % 2; };
  std::vector<PeerPair> mine;
  if (coordinate < pairs)
    mine.push_back({round_of(coordinate), coordinate, 0, (coordinate + 1) % pp});
  const int64_t below = (coordinate + pp - 1) % pp;
  if (below < pairs && below != coordinate) {
    mine.push_back({round_of(below), below, 1, below});
  }
  std::sort(mine.begin(), mine.end(),
            [](const PeerPair& a, const PeerPair& b) { return a.round < b.round; });
  TT_CHECK(mine.size() < 2 || mine[0].round != mine[1].round, "peer_pairs_of: pp rank ", coordinate,
           " of ", pp, " in two pairs of round ", mine[0].round);
  return mine;
}

std::shared_ptr<Communicator> with_peer_channels(std::shared_ptr<Communicator> group,
                                                 std::vector<PeerChannel> channels) {
  return std::make_shared<PeerChannelCommunicator>(std::move(group), std::move(channels));
}

}  // namespace titan::parallel
