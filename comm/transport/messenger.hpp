#pragma once
// Messenger: tagged messages over a Transport's byte pipes. Each message is a 16-byte header (tag, length)
// followed by the payload. Receives match by (peer, tag) in FIFO order; a message that arrives before its
// receive is posted is buffered ("unexpected"). Payloads go straight into the posted buffer otherwise.
//
// A collective message that arrives before its receive is posted, from a peer of which this rank expects nothing
// else, is held in the pipe instead (its header read, the payload left in the kernel's socket buffer or the shm
// ring): when the receive is posted the payload goes straight into it. A rank that runs ahead into the next
// collective (a broadcast's root, a ring neighbour) then costs its peers no staging buffer and no extra copy;
// the pipe's own flow control slows it down instead. Safe because a peer sends all messages of one collective
// before any of the next (ops run in issue order) and the same tag matches in FIFO order: nothing this rank
// waits for can be queued behind a held collective message, except a point-to-point message, and while a
// receive from that peer is posted nothing is held (early messages are buffered as before).
//
// Collective traffic uses tags with the top bit set that also encode the op, dtype and the collective's
// sequence number, so a rank that issues a different collective than its peer, or a different size, gets a
// PeerError naming both calls instead of a silent hang or corrupted data.
//
// Receives from any peer (Request::peer == kAnyPeer, user tags only) match the first message with their tag that
// any peer sends: one buffered already (the earliest to arrive), else the next to arrive. Receives are matched in
// the order they were posted, so a message from peer p goes to the oldest posted receive that takes it, from p or
// from any peer, and messages of one peer keep their order. While an any-peer receive is pending, every peer is
// read (nothing is held in a pipe) and watched; a peer whose pipe breaks fails it (the broken peer may have been
// its sender, as MPI's fault-tolerance rules have it), naming that peer; a peer that said goodbye first (it closed
// its group in order, say_goodbye) has only left, and fails only the receives that name it.
//
// Single-threaded: only the backend worker calls it.

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport/transport.hpp"
#include "comm/types.hpp"

namespace ctrun::comm::transport {

// Tag layout: bit 63 = collective; bits 48..55 op kind; bits 40..47 dtype; bits 0..39 sequence number.
// Point-to-point tags are non-negative ints (bit 63 clear): the users' and comm's own (comm/tags.hpp). kAbortTag
// carries an abort reason.
inline constexpr std::uint64_t kCollectiveBit = 1ull << 63;
inline constexpr std::uint64_t kAbortTag = ~0ull;
// A rank that closes its group in order sends this last (Messenger::say_goodbye): it has left, it did not fail.
inline constexpr std::uint64_t kByeTag = ~0ull - 1;
// Request::peer of a receive from any peer; set to the sender once a message matched it.
inline constexpr int kAnyPeer = -1;
std::uint64_t collective_tag(int op_kind, DataType dtype, std::uint64_t seq);
// Human-readable description of a tag ("all_reduce(float32) #12", "send/recv tag 3"); op names from the table
// registered by the algorithms layer.
std::string describe_tag(std::uint64_t tag);
void set_op_kind_names(std::vector<std::string> names);

struct Request {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  int peer = 0;  // kAnyPeer: a receive from any peer, until matched
  std::uint64_t tag = 0;
  char* data = nullptr;
  std::size_t bytes = 0;

  // Progress state (owned by Messenger).
  std::size_t done = 0;         // payload bytes moved
  std::size_t header_done = 0;  // sends: header bytes written (or bytes of `frame` written)
  std::string frame;            // small sends: header + payload copied into one contiguous write
  bool finished = false;
  bool counted = false;     // in Messenger's in-flight count
  std::uint64_t order = 0;  // receives: when posted (matching order between a peer's and any-peer receives)
  std::exception_ptr error;
  std::function<void(Request&)> on_done;  // called once when finished (success or error)
};
using RequestPtr = std::shared_ptr<Request>;

class Messenger {
 public:
  Messenger(Transport& transport, int rank, int size);
  ~Messenger();

  RequestPtr post_send(int peer, std::uint64_t tag, const void* data, std::size_t bytes);
  RequestPtr post_recv(int peer, std::uint64_t tag, void* data, std::size_t bytes);
  void post(const RequestPtr& request);

  // Progresses every pipe until all `requests` finished; rethrows the first error; TimeoutError at `deadline`.
  void wait(const std::vector<RequestPtr>& requests, Clock::time_point deadline);
  void wait(const RequestPtr& request, Clock::time_point deadline) { wait(std::vector<RequestPtr>{request}, deadline); }

  // Moves whatever can be moved now without blocking. Returns true if anything changed.
  bool progress();
  // Progress, then block for events until something may have changed since `token` (Transport::event_token,
  // taken by the caller before it last looked for new work) or `until`.
  void progress_or_wait(std::uint64_t token, Clock::time_point until);
  bool has_pending() const;
  bool has_pending_sends() const;

  // Fails every pending and future request with `error` and tells peers (best effort) why.
  void abort(const std::string& reason, std::exception_ptr error);
  // Fails every pending and future request locally, without telling peers (orderly shutdown).
  void close(std::exception_ptr error);
  // Orderly shutdown, before close(): tells every peer (best effort, where its stream is between two messages) that
  // this rank leaves, so that their receives from any peer keep waiting for the others instead of failing.
  void say_goodbye();
  std::exception_ptr fatal_error() const { return fatal_; }

  Transport& transport() { return transport_; }
  // The group's progress record: wait() notes in it which peer it blocks on (common/progress.hpp); null: none.
  void set_progress(progress::SlotWriter* writer) { progress_ = writer; }
  // How errors name peer r: names[r] (a two-level group's host level names its peers by group rank); empty: r.
  void set_peer_names(std::vector<int> names) { names_ = std::move(names); }

 private:
  std::string name_of(int peer) const;
  struct Unexpected {
    std::uint64_t tag = 0;
    std::vector<char> data;
    std::size_t got = 0;
    bool complete = false;
    std::uint64_t arrival = 0;  // when its header came (any-peer receives take the earliest)
    RequestPtr waiter;          // a recv posted while the payload was still arriving
  };
  struct Peer {
    std::deque<RequestPtr> sends;
    std::map<std::uint64_t, std::deque<RequestPtr>> recvs;
    std::map<std::uint64_t, std::deque<std::shared_ptr<Unexpected>>> unexpected;
    // Receive state machine: header bytes, then the payload into `target` or `stash`.
    char header[16] = {};
    std::size_t header_got = 0;
    RequestPtr target;
    std::shared_ptr<Unexpected> stash;
    std::uint64_t abort_remaining = 0;
    std::string abort_reason;
    std::exception_ptr error;  // the pipe broke: fails every request with this peer
    std::size_t pending_recvs = 0;
    bool held = false;      // `header` is an early collective message left in the pipe until a receive is posted
    bool rehandle = false;  // a receive was posted since: match `header` again on the next progress
    bool left = false;      // said goodbye: sends nothing more, and its pipe closing is no failure
  };

  void post_any_peer_recv(const RequestPtr& r);
  // Delivers the front of p.unexpected[r->tag] (`it`) to receive r.
  void take_unexpected(Peer& p, std::map<std::uint64_t, std::deque<std::shared_ptr<Unexpected>>>::iterator it,
                       const RequestPtr& r);
  // The receive a message (peer, tag) goes to, removed from its queue; null when none is posted.
  RequestPtr match_posted(int peer, Peer& p, std::uint64_t tag);
  bool progress_sends(int peer, Peer& p);
  bool progress_recvs(int peer, Peer& p);
  void on_header(int peer, Peer& p);
  void finish(const RequestPtr& r, std::exception_ptr error = nullptr);
  void wait_for_events(std::uint64_t token, Clock::time_point until);
  void fail_peer(int peer, std::exception_ptr error);
  void check_signature(int peer, std::uint64_t incoming_tag, std::uint64_t posted_tag) const;

  Transport& transport_;
  int rank_;
  int size_;
  std::vector<Peer> peers_;
  std::exception_ptr fatal_;
  std::size_t in_flight_ = 0;
  // Pending receives from any peer, by tag, in posting order (user tags only: collectives always name the peer).
  std::map<std::uint64_t, std::deque<RequestPtr>> any_recvs_;
  std::size_t any_pending_ = 0;
  std::uint64_t posted_ = 0;    // receives posted (Request::order)
  std::uint64_t arrivals_ = 0;  // early messages buffered (Unexpected::arrival)
  progress::SlotWriter* progress_ = nullptr;
  std::vector<int> names_;
  std::vector<int> want_read_;  // scratch for wait_for_events
  std::vector<int> want_write_;
};

}  // namespace ctrun::comm::transport
