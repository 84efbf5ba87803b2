#pragma once
// A transport gives one rank a nonblocking byte pipe to every other rank of a group (gloo's transport::Pair,
// reduced to what the cpu backend needs). Framing, tag matching and timeouts live above, in Messenger, so each
// transport only moves bytes and waits for events:
//   tcp/  lazily connected sockets, addresses exchanged through the group's store (any hosts);
//   shm/  single-producer/single-consumer rings in POSIX shared memory (every rank on one host).
// Only one thread (the backend's worker) calls a transport, except interrupt(), which any thread may call.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/progress.hpp"

namespace ctrun::comm::transport {

using Clock = std::chrono::steady_clock;

// Memory that every rank of the group maps (shm transport only): algorithms that read peers' data in place
// instead of passing messages (algorithms/*_shm*.cpp). Two kinds of use:
//
// Pipelined (the *_shm algorithms, per-slot flags as in NCCL's and gloo's shared-memory transports): each rank
// owns slots() slots of slot_bytes(). Pieces of work are numbered group-wide (take_pieces(): identical on
// every rank as long as all run the same collectives); piece g lives in slot g % slots() of the rank that
// produced it. Each rank publishes progress counters (piece numbers, only ever growing, across ops): a
// consumer waits until a producer's kProduced passed g, a producer rewrites slot g % slots() only once every
// other rank's kReleased passed g - slots(). No lock-step: a rank that runs may work slots() pieces ahead,
// which matters when ranks outnumber cores (every all-rank barrier needs every rank scheduled once).
//
// Barrier-based (the *_shm_direct algorithms): kParts small rotating parts plus barrier(); a rank rewrites a
// part only after everyone passed two more barriers.
class SharedWorkspace {
 public:
  // --- pipelined ---
  enum Counter : int { kProduced = 0, kReduced = 1, kReleased = 2 };
  static constexpr int kCounters = 3;
  static constexpr int kMaxSlots = 64;
  // "progress(rank, counter) >= value"; rank -1: every rank but this one.
  struct Want {
    Counter counter;
    int rank;
    std::uint64_t value;
  };
  virtual int slots() const = 0;
  virtual std::size_t slot_bytes() const = 0;
  virtual char* slot(int rank, std::uint64_t piece) = 0;
  // The first number of `count` fresh pieces (a group-wide counter, advanced alike on every rank).
  virtual std::uint64_t take_pieces(std::uint64_t count) = 0;
  // The op signature (Context::signature) under which piece g was produced into its slot: consumers compare it
  // with their own, which is how ranks that run different ops or sizes get a named error instead of garbage.
  virtual void set_slot_signature(std::uint64_t piece, std::uint64_t signature) = 0;
  virtual std::uint64_t slot_signature(int rank, std::uint64_t piece) const = 0;
  // Raises this rank's counter to `value` (never lowers it) and wakes the peers whose wait it satisfies.
  virtual void publish(Counter counter, std::uint64_t value) = 0;
  // More ranks than this host's cores: every wait for all peers needs each of them scheduled once.
  virtual bool oversubscribed() const = 0;
  // Ops moving at least this many bytes per rank run the pipelined algorithms, smaller ones the barrier variants.
  virtual std::size_t pipeline_bytes() const { return 0; }
  virtual std::uint64_t progress(int rank, Counter counter) const = 0;
  // The smallest counter over every rank but this one.
  virtual std::uint64_t others_progress(Counter counter) const = 0;
  // Returns once any of `wants` holds (spins briefly, then sleeps until a publish satisfies one). TimeoutError at
  // the deadline naming the ranks waited for; PeerError when one of them died or the group was aborted.
  virtual void wait_any(const std::vector<Want>& wants, Clock::time_point deadline) = 0;
  // Throws the PeerError of a mismatched op (rank r's signature differs from this rank's).
  [[noreturn]] virtual void mismatch(int rank) const = 0;

  // Outputs of at least this many bytes are written with streaming stores (reduce/copy.hpp).
  virtual std::size_t stream_bytes() const { return SIZE_MAX; }

  // --- barrier-based ---
  static constexpr int kParts = 3;
  virtual ~SharedWorkspace() = default;
  virtual std::size_t part_bytes() const = 0;
  virtual char* part(int rank, int which) = 0;
  // 0, 1, 2, 0, ... identical on every rank as long as all ranks run the same collectives.
  virtual int next_part() = 0;
  // Returns once every rank has entered barrier() as often as this one; TimeoutError at the deadline, PeerError
  // when a peer died or the group was aborted, or when a peer's `signature` differs (it is running another op
  // or another size: shared-memory algorithms pass no messages that could reveal that).
  virtual void barrier(Clock::time_point deadline, std::uint64_t signature) = 0;

  // Whether every rank can read every other rank's private memory (Linux cross-memory attach,
  // process_vm_readv): probed by every rank when the group was created, so all ranks agree. The *_shm_direct
  // algorithms use it to copy straight out of peers' buffers, with a few barriers per op instead of one per piece.
  virtual bool peer_reads() const { return false; }
  // Copies `bytes` at address `remote` of rank r's process into `local`; PeerError on failure.
  virtual void read_peer(int rank, std::uint64_t remote, void* local, std::size_t bytes) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string_view name() const = 0;

  // Move what can be moved now; return the byte count (0: would block). Throw PeerError when the pipe is broken
  // (the peer exited, closed or aborted) or when this rank was told to abort.
  virtual std::size_t write_some(int peer, const void* data, std::size_t n) = 0;
  virtual std::size_t read_some(int peer, void* data, std::size_t n) = 0;
  // Writes the end of `head` then `body` in one operation where the transport can (tcp: one sendmsg, so a
  // message header never travels in a segment and a syscall of its own); returns the bytes moved from both.
  virtual std::size_t write_some2(int peer, const void* head, std::size_t head_n, const void* body,
                                  std::size_t body_n) {
    return head_n ? write_some(peer, head, head_n) : write_some(peer, body, body_n);
  }

  // Waiting without lost wake-ups: take a token, try to make progress, then wait_event(token, ...). It returns
  // at once if anything happened since the token was taken; else when a pipe may have become readable or
  // writable, interrupt() was called, or `until` passed. want_read / want_write: the peers progress waits on
  // (used for write readiness, lazy connection and liveness checks of dead peers).
  virtual std::uint64_t event_token() = 0;
  virtual void wait_event(std::uint64_t token, Clock::time_point until, const std::vector<int>& want_read,
                          const std::vector<int>& want_write) = 0;

  // Hint before wait_event: the next read from `peer` is only useful once `bytes` arrived (the rest of a message
  // payload), so the wait need not wake for less (tcp: SO_RCVLOWAT). Default: ignored.
  virtual void expect_bytes(int /*peer*/, std::size_t /*bytes*/) {}

  // The reader holds `peer`'s next message in the pipe (it is not wanted yet): while paused, wait_event must not
  // wake because that peer's pipe is readable (tcp: no POLLIN on its socket). Default: nothing to do (event-driven
  // transports such as shm wake once per write, not while data waits).
  virtual void pause_reads(int /*peer*/, bool /*paused*/) {}

  // False for a lazily connected peer that has no connection yet (nothing to notify on abort).
  virtual bool connected(int peer) const = 0;

  // Wakes a wait_event in progress (or makes the next one return at once). Thread-safe.
  virtual void interrupt() = 0;

  // Shared memory of the whole group, or null when the transport has none (tcp).
  virtual SharedWorkspace* workspace() { return nullptr; }

  // Makes peers fail their pending ops quickly (with the reason when the transport can carry it) and closes.
  virtual void abort(const std::string& reason) = 0;

  // Where the transport's own waits (shm barrier and counter waits) note which peer they wait for: the group's
  // progress record (common/progress.hpp), or null. Set once by the backend before the first op.
  void set_progress(progress::SlotWriter* writer) { progress_ = writer; }

 protected:
  // Notes, before a wait that may sleep, that the running op now waits for group rank `peer` (-1: several).
  void note_wait(int peer) {
    if (progress_) progress_->waiting(peer);
  }

 private:
  progress::SlotWriter* progress_ = nullptr;
};

}  // namespace ctrun::comm::transport
