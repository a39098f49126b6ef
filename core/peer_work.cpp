#include "core/peer_work.h"

#include <atomic>

namespace titan {

namespace {
std::atomic<int> scopes{0};
}  // namespace

PeerWorkScope::PeerWorkScope() { scopes.fetch_add(1); }
PeerWorkScope::~PeerWorkScope() { scopes.fetch_sub(1); }

bool peer_work_in_flight() { return scopes.load() > 0; }

}  // namespace titan
