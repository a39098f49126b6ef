// The wait clock on the CPU: the host's blocked time (test/gpu/test_core_cuda.cpp checks CUDA,
// where it reads the stream's).
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "core/check.h"
#include "core/wait_clock.h"

using titan::Device;
using titan::WaitClock;

TEST_SUITE("fast") {
  TEST_CASE(
      "the wait clock on the CPU adds up the host's time inside its waits and nothing between "
      "them") {
    WaitClock clock;
    {
      const WaitClock::Scope timed(clock, Device::cpu());
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // outside any wait
    clock.begin(Device::cpu());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    clock.end();
    const double seconds = clock.take_seconds();
    CHECK(seconds >= 0.050);
    CHECK(seconds < 0.200);  // the 200 ms between the waits are not counted
    CHECK(clock.take_seconds() == 0.0);

    clock.begin(Device::cpu());
    CHECK_THROWS_AS(clock.begin(Device::cpu()), titan::Error);  // waits do not nest
    clock.end();
    CHECK_THROWS_AS(clock.end(), titan::Error);
    clock.take_seconds();

    // A wait that throws is closed without being timed, and the clock goes on.
    CHECK_THROWS_AS(
        [&] {
          const WaitClock::Scope timed(clock, Device::cpu());
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          throw titan::Error("the transfer failed");
        }(),
        titan::Error);
    CHECK(clock.take_seconds() == 0.0);
    {
      const WaitClock::Scope timed(clock, Device::cpu());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(clock.take_seconds() >= 0.010);
  }
}
