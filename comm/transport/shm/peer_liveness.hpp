#pragma once
// Whether a peer process has exited, whoever reaps it and whatever pid it held. kill(pid, 0) succeeds on a
// zombie (a launcher that reaps late, e.g. torch's torchrun, leaves an exited rank as one for seconds) and on a
// recycled pid, so each peer is watched through a pidfd opened while its segment is mapped: the pidfd turns
// readable when the process exits, before anyone reaps it, and never refers to another process. The peer's start
// time (from its segment header) proves the pidfd was opened on the right process. Kernels without pidfd_open
// (< 5.3) fall back to /proc/PID/stat: state 'Z' or another start time means gone.

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace ctrun::comm::transport::shm {

// This process's start time in clock ticks after boot (/proc/self/stat field 22); 0 if unreadable.
std::uint64_t own_start_time();

class PeerLiveness {
 public:
  explicit PeerLiveness(int size);
  ~PeerLiveness();
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  // Starts watching rank `peer`, process `pid` started at `start_time` (0: unknown, not checked). A peer in this
  // same process (ranks as threads) is never reported as exited.
  void watch(int peer, pid_t pid, std::uint64_t start_time);
  // Whether the watched process has exited (a zombie counts).
  bool exited(int peer) const;

 private:
  struct Peer {
    pid_t pid = 0;
    std::uint64_t start_time = 0;
    int pidfd = -1;
    bool gone_at_watch = false;  // the pid already named another process, or none
  };
  std::vector<Peer> peers_;
};

}  // namespace ctrun::comm::transport::shm
