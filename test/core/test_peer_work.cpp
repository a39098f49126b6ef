// core/peer_work.h: the scopes the pipeline executor holds while its messages are posted, which
// the CUDA caching allocator asks before it synchronizes the device (its gpu test:
// test/gpu/test_core_cuda.cpp).
#include <doctest/doctest.h>

#include <optional>
#include <thread>

#include "core/peer_work.h"

TEST_SUITE("fast") {
  TEST_CASE("peer work: in flight on every thread while any scope lives") {
    CHECK_FALSE(titan::peer_work_in_flight());
    {
      const titan::PeerWorkScope outer;
      CHECK(titan::peer_work_in_flight());
      std::optional<titan::PeerWorkScope> inner;
      inner.emplace();
      inner.reset();
      CHECK(titan::peer_work_in_flight());  // the outer one still lives
      bool seen_elsewhere = false;
      std::thread([&] { seen_elsewhere = titan::peer_work_in_flight(); }).join();
      CHECK(seen_elsewhere);
    }
    CHECK_FALSE(titan::peer_work_in_flight());
  }
}
