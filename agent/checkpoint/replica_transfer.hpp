#pragma once
// Snapshots moved between agents (the protocol: replica_wire.hpp). The server side receives replicas into
// replica-rank-<R>/ of this node's job directory and serves what it holds to agents that fetch; the client side
// pushes a snapshot file to a peer and fetches one into a rank directory. All of it blocks: it runs on the
// replication threads (replicator.hpp) and the agent's helper lane, never on the loop. Memory: a transfer streams
// between the socket and the snapshot file (sendfile out, splice in: no copy through user memory either way, no
// mapping of the file), over 4 MiB socket buffers, and every byte a receiver allocates is counted against its
// --checkpoint-memory first, under the directory's lock.
//
// Closed doors (docs/security.md): with the job's secret, every connection starts with the job's handshake
// (common/auth/handshake.hpp), so only an agent of the job fetches or pushes anything; a push is taken only for a
// rank of a node whose ring sends to this one (accept_pushes_of), and a received snapshot only when its digest
// (snapshot_digest.hpp) matches its bytes.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace ctrun::auth {
class Secret;
}

namespace ctrun::agent::checkpoint {

inline constexpr auto kTransferIdle = std::chrono::milliseconds(10000);

class ReplicaServer {
 public:
  // Binds host:0 (the kernel picks the port) and serves on a thread of its own until destroyed. Throws with the
  // address when it cannot bind.
  // With `secret`, only agents that prove it are served (others are closed at once and logged with their address).
  ReplicaServer(std::string job_dir, std::uint64_t limit, const std::string& host,
                std::chrono::milliseconds idle = kTransferIdle, std::shared_ptr<const auth::Secret> secret = nullptr);
  ~ReplicaServer();  // stops within 100 ms; a transfer cut short leaves only its partial file, which is removed
  ReplicaServer(const ReplicaServer&) = delete;
  ReplicaServer& operator=(const ReplicaServer&) = delete;

  // "host:port" other agents reach it at.
  std::string endpoint() const { return endpoint_; }
  // Bytes received into replicas since start (for /metrics).
  std::uint64_t bytes_received() const { return received_.load(); }
  // The ranks whose replicas this node should hold (those of the nodes whose ring targets it, in the round just
  // agreed): a push of any other rank is refused. nullopt (the start): any rank.
  void accept_pushes_of(std::optional<std::set<int>> ranks);

 private:
  void accept_loop();
  void serve(int fd, const std::string& peer);
  bool accepts_push_of(int rank) const;
  std::string dir_;
  std::uint64_t limit_;
  std::chrono::milliseconds idle_;
  std::shared_ptr<const auth::Secret> secret_;
  mutable std::mutex ranks_mu_;
  std::optional<std::set<int>> push_ranks_;
  int listen_fd_ = -1;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> received_{0};
  struct Served {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Served> served_;  // accept thread only
  std::thread acceptor_;
};

// Sends `file` (the complete snapshot of `rank` at `step`) to the agent at `endpoint`, which keeps it as a replica.
// Before committing, checks that `file` is still that snapshot (a worker may have reused its pages for a later save
// meanwhile): if not, aborts. Throws std::runtime_error saying why the peer did not take it. With `secret`, proves it
// to the peer first.
void push_snapshot(const std::string& endpoint, int rank, std::int64_t step, const std::string& file,
                   const std::atomic<bool>& stop, std::chrono::milliseconds idle = kTransferIdle,
                   const auth::Secret* secret = nullptr);

// Fetches step `step` of `rank` (the peer's own snapshot or replica) into rank-<R>/step-<S>.ckpt of `job_dir`,
// counting it against `limit` first, and keeps it only when its digest matches (snapshot_digest.hpp). Throws
// std::runtime_error saying why (the peer lacks it, the limit, the peer died, the digest: then nothing is left
// behind). With `secret`, proves it to the peer first.
std::uint64_t fetch_snapshot(const std::string& endpoint, int rank, std::int64_t step, const std::string& job_dir,
                             std::uint64_t limit, const std::atomic<bool>& stop,
                             std::chrono::milliseconds idle = kTransferIdle, const auth::Secret* secret = nullptr);

}  // namespace ctrun::agent::checkpoint
