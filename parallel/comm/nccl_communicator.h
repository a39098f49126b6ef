// The NCCL backend of Communicator (docs/architecture.md#decision-5 and #decision-12): CUDA tensors
// move through NCCL on one communication stream per device (and the pipeline's peer channels
// each on a stream of its own, below); CPU tensors (the trainer's host loss sum, say) go to the
// MPI communicator of the same group, which each NCCL communicator holds.
//
// Only factories are declared here, so that code holding a Communicator never sees <nccl.h>
// or <mpi.h>; the classes live in the .cpp. In a build without CUDA or without NCCL the
// factories throw an InputError saying to use parallelism.comm_backend: mpi.
//
// Streams. An operation is issued on the communication stream after that stream has been made
// to wait for everything the current (compute) stream had issued when it was posted, so it
// reads the values compute produced. Work::wait() makes the *current* stream wait for the
// operation's end event and returns at once: the host never blocks on NCCL. Work::done()
// queries the event. So: post, issue other work, wait() before the first kernel that reads the
// result; a host read after wait() goes through a copy on the current stream, which is ordered.
//
// Memory. The caching allocator hands a freed block out again to work on the stream that
// allocated it, without a sync (core/cuda/caching_allocator.h). NCCL reads and writes the
// tensors on another stream, so they must not return to the cache until the operation is
// done: every posted operation's tensors are held until its end event has completed — by the
// watchdog, whatever happens to the Work — which is what torch's record_stream is for. A Work
// dropped without wait() therefore still completes safely, but nothing orders the caller's
// stream after it.
//
// Ordering. Every NCCL operation of a process but the peer channels' runs on the one
// communication stream, in post order, and NCCL operations block the stream until every rank of
// their group has joined. So every rank must post those operations in one global order across
// communicators too (SPMD code does), and a send or a recv holds up everything posted after it
// until its peer's matching call runs: two ranks that each send to the other must not both post
// their sends before their recvs (with MPI they may). A rank cannot send to or receive from
// itself. A peer channel (split_nccl_peer_channel) carries one rank's sends to one other on its
// own stream, so it needs only that the two post its messages in the same order.
//
// Barrier. barrier() is the MPI barrier of the group: it meets the other ranks on the host and
// does not wait for posted NCCL operations.
//
// Watchdog (docs/architecture.md#decision-12): every posted operation is watched, from before
// NCCL is called until its end event completes, by the process's NCCL watchdog
// (nccl_watchdog.h), which ends the job when one times out or fails.
#pragma once

#include <memory>
#include <string>

#include "parallel/comm/communicator.h"

namespace titan::parallel {

// The world NCCL communicator and what every communicator split from it shares: its CUDA
// device, the communication stream, the watchdog's timeout.
class NcclWorld;

// Collective over MPI_COMM_WORLD: rank 0 makes the NCCL unique id, MPI broadcasts it, and every
// rank joins the world communicator on its current CUDA device (set it first). Operations of
// communicators split from it abort the job after `timeout_s` seconds. A world NCCL cannot make
// (two ranks on one GPU; no NCCL in this build) is an InputError naming `backend_key`, the
// caller's name for the choice of NCCL.
std::shared_ptr<NcclWorld> create_nccl_world(double timeout_s, const std::string& backend_key);

// ncclCommSplit of the world: the ranks passing the same `color` form one group, ordered by
// `key` — the same color and key that made `cpu`, the MPI communicator of the group, which
// takes the CPU tensors and lends its name ("dp_shard", "dp_shard×tp") to messages. Collective
// over the world: every rank calls it, in the same order.
std::shared_ptr<Communicator> split_nccl_communicator(const std::shared_ptr<NcclWorld>& world,
                                                      int color, int key,
                                                      std::shared_ptr<Communicator> cpu);

// A pipeline peer channel (peer_channels.h): a split of the world into pairs, each a two-rank
// communicator on a CUDA stream of its own, over which the rank of key `sender_key` sends and the
// other receives. `cpu` is the pair's MPI communicator (as above), or null on a rank in no pair
// of this split, which joins the split all the same and gets null back. The pair is connected
// before this returns (one element sent), so that no later post blocks the host on the peer.
// Collective over the world: every rank calls it, in the same order.
std::shared_ptr<Communicator> split_nccl_peer_channel(const std::shared_ptr<NcclWorld>& world,
                                                      int color, int key, int sender_key,
                                                      std::shared_ptr<Communicator> cpu);

}  // namespace titan::parallel
