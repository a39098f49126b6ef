// The pp communicator's peer channels (parallel/comm/peer_channels.h), on communicators that
// record what they are asked: a transfer whose (peer, channel, direction) has a communicator of
// its own goes there, to the peer's rank in it, in the order given; every other transfer goes to
// the group as one call, and collectives too; a table that names a channel twice or a peer
// outside the group is refused. And the rounds a mesh cuts them in, for pp 2 to 9: every pair of
// neighbours once, both ends agreeing, no rank twice in a round. The channels themselves run
// over MPI in test_pipeline_executor and over NCCL in the gpu tests.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "parallel/comm/peer_channels.h"
#include "support/text.h"

using namespace titan;
using namespace titan::parallel;

namespace {

using titan::testing::contains;

// A communicator of `size` ranks that records each call as "op peer channel numel".
class Recording final : public Communicator {
 public:
  Recording(std::string name, int size, int rank)
      : name_(std::move(name)), size_(size), rank_(rank) {}

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const std::string& name() const override { return name_; }

  Work all_gather_async(const Tensor&, const Tensor& in) override { return note("all_gather", in); }
  Work reduce_scatter_async(const Tensor&, const Tensor& in, ReduceOp) override {
    return note("reduce_scatter", in);
  }
  Work all_reduce_async(const Tensor& t, ReduceOp) override { return note("all_reduce", t); }
  Work broadcast_async(const Tensor& t, int) override { return note("broadcast", t); }
  Work send_async(const Tensor& t, int peer, int channel) override {
    return note("send", t, peer, channel);
  }
  Work recv_async(const Tensor& t, int peer, int channel) override {
    return note("recv", t, peer, channel);
  }
  Work barrier_async() override {
    calls.emplace_back("barrier");
    return {};
  }
  std::vector<Work> point_to_point_async(const std::vector<PeerTransfer>& transfers) override {
    calls.emplace_back("group of " + std::to_string(transfers.size()));
    return Communicator::point_to_point_async(transfers);
  }

  std::vector<std::string> calls;

 private:
  Work note(const char* op, const Tensor& t, int peer = -1, int channel = -1) {
    calls.push_back(std::string(op) + " " + std::to_string(peer) + " " + std::to_string(channel) +
                    " " + std::to_string(t.numel()));
    return {};
  }

  std::string name_;
  int size_, rank_;
};

Tensor of(int64_t n) { return Tensor::zeros({n}, DType::F32); }

using Direction = PeerTransfer::Direction;

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE(
      "peer channels: a named transfer takes its channel's communicator and the rest the group") {
    // Rank 1 of a pp group of 4, with channels to rank 2 (it is key 0 there) and to rank 0 (key 1).
    auto group = std::make_shared<Recording>("pp", 4, 1);
    auto acts_up = std::make_shared<Recording>("pp 1→2 activations", 2, 0);
    auto grads_in = std::make_shared<Recording>("pp 2→1 gradients", 2, 0);
    auto acts_in = std::make_shared<Recording>("pp 0→1 activations", 2, 1);
    std::shared_ptr<Communicator> pp =
        with_peer_channels(group, {{2, kActivationChannel, Direction::Send, acts_up, 1},
                                   {2, kGradientChannel, Direction::Recv, grads_in, 1},
                                   {0, kActivationChannel, Direction::Recv, acts_in, 0}});
    CHECK(pp->size() == 4);
    CHECK(pp->rank() == 1);
    CHECK(pp->name() == "pp");

    const std::vector<Work> works = pp->point_to_point_async({
        {Direction::Recv, of(1), 0, kActivationChannel},  // its channel
        {Direction::Send, of(2), 2, kActivationChannel},  // its channel
        {Direction::Send, of(3), 0, kGradientChannel},    // none: the group
        {Direction::Recv, of(4), 2, kGradientChannel},    // its channel
        {Direction::Send, of(5), 2, kActivationChannel},  // its channel, after the other
        {Direction::Recv, of(6), 3, kActivationChannel},  // none: the group
    });
    CHECK(works.size() == 6);
    CHECK(acts_in->calls == std::vector<std::string>{"recv 0 0 1"});
    CHECK(acts_up->calls == std::vector<std::string>{"send 1 0 2", "send 1 0 5"});
    CHECK(grads_in->calls == std::vector<std::string>{"recv 1 0 4"});
    // The rest as one group, as the group's communicator posts it (receives, then sends).
    CHECK(group->calls == std::vector<std::string>{"group of 2", "recv 3 0 6", "send 0 1 3"});

    // One at a time the same way; collectives to the group.
    group->calls.clear();
    pp->send_async(of(7), 2, kActivationChannel);
    pp->recv_async(of(8), 2, kActivationChannel);  // no channel for receiving activations from 2
    pp->all_reduce_async(of(9), ReduceOp::Sum);
    pp->barrier_async();
    CHECK(acts_up->calls.back() == "send 1 0 7");
    CHECK(group->calls == std::vector<std::string>{"recv 2 0 8", "all_reduce -1 -1 9", "barrier"});
  }

  TEST_CASE("peer channels: the rounds pair every two neighbours of the ring once") {
    for (int64_t pp = 2; pp <= 9; ++pp) {
      CAPTURE(pp);
      std::map<std::pair<int64_t, int64_t>, int> seen;  // {low, high} pp ranks -> times
      for (int64_t c = 0; c < pp; ++c) {
        for (const PeerPair& p : peer_pairs_of(pp, c)) {
          CHECK(p.round >= 0);
          CHECK(p.round < peer_pair_rounds(pp));
          CHECK(p.peer == (p.key == 0 ? (p.pair + 1) % pp : p.pair));
          CHECK(c == (p.key == 0 ? p.pair : (p.pair + 1) % pp));
          // The other end has the same pair in the same round, with the other key.
          bool matched = false;
          for (const PeerPair& q : peer_pairs_of(pp, p.peer)) {
            matched = matched ||
                      (q.round == p.round && q.pair == p.pair && q.key == 1 - p.key && q.peer == c);
          }
          CHECK(matched);
          if (p.key == 0) ++seen[{std::min(c, p.peer), std::max(c, p.peer)}];
        }
      }
      CHECK(seen.size() == static_cast<size_t>(pp == 2 ? 1 : pp));
      for (int64_t c = 0; c < pp; ++c) {
        const int64_t next = (c + 1) % pp;
        CHECK(seen[{std::min(c, next), std::max(c, next)}] == 1);
      }
    }
    CHECK(peer_pair_rounds(2) == 1);
    CHECK(peer_pair_rounds(8) == 2);
    CHECK(peer_pair_rounds(3) == 3);
  }

  TEST_CASE("peer channels: a channel named twice or a peer outside the group is refused") {
    auto group = std::make_shared<Recording>("pp", 2, 0);
    auto pair = std::make_shared<Recording>("pp 0→1 activations", 2, 0);
    auto error_of = [&](std::vector<PeerChannel> channels) {
      try {
        with_peer_channels(group, std::move(channels));
      } catch (const std::exception& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    CHECK(contains(error_of({{1, kActivationChannel, Direction::Send, pair, 1},
                             {1, kActivationChannel, Direction::Send, pair, 1}}),
                   "channel 0 to 1 named twice"));
    CHECK(contains(error_of({{0, kActivationChannel, Direction::Send, pair, 1}}),
                   "peer 0 of rank 0 in a group of 2"));
    CHECK(contains(error_of({{1, kActivationChannel, Direction::Send, pair, 0}}),
                   "needs a two-rank communicator and the peer's rank in it"));
    CHECK(error_of({{1, kActivationChannel, Direction::Send, pair, 1},
                    {1, kActivationChannel, Direction::Recv, pair, 1}})
              .empty());
  }
}
