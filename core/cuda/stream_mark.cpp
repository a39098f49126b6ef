// core/cuda/backend.h's stream marks: timing events on the current stream, for DeviceMoment.
#include "core/cuda/backend.h"
#include "core/cuda/stream.h"

namespace titan::cuda_backend {

namespace {

class EventMark final : public StreamMark {
 public:
  EventMark() : event_(/*timing=*/true) { event_.record(); }
  bool done() const override { return event_.query(); }
  double seconds_since(const StreamMark& earlier) const override {
    event_.synchronize();
    return 1e-3 * event_.elapsed_ms_since(static_cast<const EventMark&>(earlier).event_);
  }

 private:
  cuda::Event event_;
};

}  // namespace

std::unique_ptr<StreamMark> mark_stream() { return std::make_unique<EventMark>(); }

}  // namespace titan::cuda_backend
