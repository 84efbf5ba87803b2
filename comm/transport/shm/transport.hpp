#pragma once
// Shared-memory transport for ranks on one host. Every rank creates one POSIX shm segment holding its inbound
// rings (one single-producer/single-consumer byte ring per sender) and a doorbell; peers map it by the name
// published in the store as "shm/<rank>". Once every rank has mapped every segment the names are unlinked, so
// nothing is left in /dev/shm even if a process is killed later.
//
// Waiting: spin briefly (a message often arrives within microseconds), then sleep on the doorbell futex; a
// writer rings the reader's doorbell, a reader rings the writer's doorbell when it frees ring space. Sleeping
// instead of spinning matters when there are more ranks than cores (4 ranks on 2 cores here).
// Dead peers: while waiting on a peer, its pid is checked every 100 ms, so a killed rank fails the op quickly.

#include <memory>

#include "comm/transport/transport.hpp"
#include "comm/types.hpp"
#include "store/store.hpp"

namespace ctrun::comm::transport::shm {

struct Options {
  // Per sender, a power of two >= 64 KiB (tmpfs pages are touched only as used): CTRUN_COMM_SHM_RING_BYTES.
  std::size_t ring_bytes = 1u << 20;
  // SharedWorkspace slots of the pipelined shm algorithms: size (a multiple of 64 >= 1 KiB,
  // CTRUN_COMM_SHM_WORKSPACE_BYTES) and count per rank (1..64, CTRUN_COMM_SHM_SLOTS).
  std::size_t slot_bytes = 256u << 10;
  int slots = 8;
  // Cores the ranks share (0: this process's CPU affinity): CTRUN_COMM_SHM_CORES.
  int cores = 0;
  // Ops this large run the pipelined algorithms: CTRUN_COMM_SHM_PIPELINE_BYTES.
  std::size_t pipeline_bytes = 4u << 20;
  Duration timeout = std::chrono::seconds(30);  // waiting for peers' segments
  // Outputs of at least this many bytes are written with streaming stores: CTRUN_COMM_SHM_STREAM_BYTES.
  std::size_t stream_bytes = 4u << 20;
  bool peer_reads = true;  // probe process_vm_readv between ranks (CTRUN_COMM_SHM_DIRECT)
  // How errors name rank r: rank_names[r] (a two-level group's host level: group ranks); empty: r.
  std::vector<int> rank_names;
};

// "hostname|boot id|ipc, mount and pid namespaces": ranks with equal keys can share POSIX shm segments (the
// mount namespace decides which /dev/shm they see: `ip netns exec` shares it, `unshare --mount` does not).
std::string host_key();

std::unique_ptr<Transport> create(std::shared_ptr<store::Store> store, int rank, int size, Options options);

}  // namespace ctrun::comm::transport::shm
