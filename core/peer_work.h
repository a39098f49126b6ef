// Whether point-to-point work this process posted may be waiting on another process's device.
//
// NCCL's guide warns that a device-wide synchronisation (cudaDeviceSynchronize, and cudaFree,
// which synchronizes implicitly) can deadlock against outstanding point-to-point operations: a
// receive posted ahead waits on the device for a sender whose host may itself be waiting for
// this rank. The pipeline executor posts its receives a compute ahead of their readers, so
// while it runs a step's list it holds a PeerWorkScope, and what would synchronize the device
// (the CUDA caching allocator returning its cache to the driver on out-of-memory) refuses
// instead: the job fails with one line rather than hang.
#pragma once

namespace titan {

class PeerWorkScope {
 public:
  PeerWorkScope();
  ~PeerWorkScope();
  PeerWorkScope(const PeerWorkScope&) = delete;
  PeerWorkScope& operator=(const PeerWorkScope&) = delete;
};

// Whether a PeerWorkScope lives on any thread of this process.
bool peer_work_in_flight();

}  // namespace titan
