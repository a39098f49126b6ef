// How long this rank's compute stood waiting for communication: tp_wait_ms and cp_wait_ms.
//
// A wait costs something different on each device. On the CPU, the host blocks in Work::wait
// until the bytes are there, so the host clock around the wait is the time lost. With NCCL,
// Work::wait only orders the compute stream after the transfer's stream and returns at once:
// the host clock reads almost nothing, and the time is lost later, on the GPU, when the stream
// reaches that point before the transfer is done. So on CUDA a WaitClock records a timing event
// on the current stream before the wait and another after it; the device time between the two
// is how long the stream stood still: nothing when the transfer finished behind the compute
// issued before it, the whole transfer when nothing hid it. A host block on CUDA (the MPI
// backend stages transfers through the host) counts the same way, as far as the GPU ran out of
// work during it, which is what it costs a GPU run.
#pragma once

#include <exception>
#include <vector>

#include "core/device.h"
#include "core/device_moment.h"

namespace titan {

class WaitClock {
 public:
  WaitClock();
  ~WaitClock();
  WaitClock(const WaitClock&) = delete;
  WaitClock& operator=(const WaitClock&) = delete;

  // Around one wait for work that computes on `device` (whose current stream, on CUDA), timed
  // between two DeviceMoments. Not nested. Like the profiler, the clock never stops a run: a
  // timing event that cannot be recorded or read (a CUDA error, which the run's next real call
  // reports) reads 0. cancel() closes a wait that threw, without timing it.
  void begin(const Device& device);
  void end();
  void cancel();

  // The seconds waited since the last take, and forgets them. Never blocks: on CUDA a wait whose
  // events have not run yet stays for the next take (synchronize first to read every wait).
  double take_seconds();

  // begin() at construction; end() at destruction, or cancel() when leaving by an exception.
  class Scope {
   public:
    Scope(WaitClock& clock, const Device& device)
        : clock_(clock), exceptions_(std::uncaught_exceptions()) {
      clock_.begin(device);
    }
    ~Scope() {
      if (std::uncaught_exceptions() > exceptions_) {
        clock_.cancel();
      } else {
        clock_.end();
      }
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WaitClock& clock_;
    int exceptions_;
  };

 private:
  bool open_ = false;
  Device device_ = Device::cpu();  // the open wait's
  DeviceMoment start_;
  // Waits not taken yet. A take reads those the device has passed:
  // on the CPU all of them, on CUDA those whose stream has got past the wait.
  std::vector<DeviceInterval> waits_;
};

}  // namespace titan
