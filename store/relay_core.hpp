#pragma once
// A store relay's rules, without sockets (the relay: store/relay.hpp; its upstream connection:
// store/relay_backend.cpp). A node's workers talk to their node's relay as to the job's store, both dialects; the
// relay runs their requests on the store that holds the keys over one tagged connection (ctrun's MULTIPLEX,
// docs/protocol.md "Tagged mode"), and answers many requests with one where the store's semantics allow:
//
//   * reads (GET, CHECK, MULTI_GET, GETNUMKEYS): identical reads that arrive before one goes upstream go as one.
//     While one is in flight, the next identical ones wait for it to return and then go as one: a read is never
//     answered by a request sent before it arrived (every answer is one the store could have given it).
//   * ADD: the adds to one key that arrive before one goes upstream go as one ADD of their sum, each client
//     answered as if they had run one after another in arrival order (distinct results, a valid order); the
//     next ones wait for an ADD in flight as reads do.
//   * WAIT: a client joins an identical WAIT not yet answered if it was sent after the client's own previous
//     request was answered (a WAIT carries no value: STOP_WAITING says the keys exist, which stays true). Not for
//     a key the relay has seen used as a queue (QUEUE_*): a push wakes one waiter of a queue, not all. (Two ranks of
//     one node that block on a queue before any queue request for it went through the relay may both be woken by
//     one push; the one that then finds it empty gets torch's empty-queue error.)
//   * everything else (SET, COMPARE_SET, DELETE_KEY, BARRIER, queues, ...) goes upstream as it is.
//
// Each client's own requests keep their order: one a client sends after a reply-bearing request waits until that
// reply (the client is held; torch's clients never pipeline past one anyway), requests without a reply go
// upstream at once, in order, and a new request (or CANCEL_WAIT) ends the client's pending WAIT as it does on the
// store. Every byte held for a client is counted before it is allocated (a request that does not fit fails that
// client, as the store does).

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "store/protocol.hpp"
#include "store/reply_buffer.hpp"
#include "store/server_commands.hpp"

namespace ctrun::store::detail {

// What the core asks of its surroundings: the upstream connection and the relay's client connections (the relay
// backend; a fake in the tests).
class RelayPort {
 public:
  virtual ~RelayPort() = default;
  // Queues one request upstream under `tag`, after every request sent before it.
  virtual void send(std::uint64_t tag, const protocol::Request& request) = 0;
  // True while the upstream has more queued than it drains: clients are held until the core is told it drained.
  virtual bool congested() const = 0;
  // Asks for flush_batches() once the loop's current round of work is done.
  virtual void want_flush() = 0;
  // The relay's client connections (the server's FrontEnd).
  virtual ReplyBuffer* output(ConnId client) = 0;
  virtual void resume(ConnId client) = 0;
  virtual void fail(ConnId client, Refusal kind, const std::string& reason) = 0;
};

// What the relay did (its statistics, and the bench's figures).
struct RelayCounters {
  std::uint64_t client_requests = 0;    // requests its clients sent
  std::uint64_t upstream_requests = 0;  // requests it sent upstream (fences and cancels included)
  std::uint64_t combined = 0;           // client requests answered by a request sent for another client too
  std::uint64_t answered_here = 0;      // VALIDATE, PING, CANCEL_WAIT, a WAIT for no key
};

class RelayCore {
 public:
  RelayCore(RelayPort& port, std::uint64_t max_total_bytes) : port_(port), max_total_bytes_(max_total_bytes) {}

  // A client's request (Backend::execute; step() runs it again after a hold for congestion).
  ExecResult execute(ConnId client, const protocol::Request& request);
  // The client is gone.
  void forget(ConnId client);
  // The end of a round of work: the batches that are due go upstream.
  void flush_batches();
  // The upstream drained what it had queued: the clients held for that go on.
  void decongested();

  // Frames from upstream: the request sent under `tag` (the reply's shape; null if none), then its reply or
  // refusal. A reply for a tag not known is an error of the upstream (false: drop the connection).
  const protocol::Request* sent(std::uint64_t tag) const;
  bool on_reply(std::uint64_t tag, protocol::Reply reply);
  bool on_refused(std::uint64_t tag, const std::string& reason);

  // The upstream is gone: everything pending is dropped (the caller closes every client).
  void reset();

  // Bytes held for clients and batches; io_bytes: the buffers around it (the server's and the upstream's), counted
  // against the same limit.
  std::uint64_t held_bytes() const { return bytes_; }
  void set_io_bytes(std::uint64_t bytes) { io_bytes_ = bytes; }
  const RelayCounters& counters() const { return counters_; }
  std::size_t clients() const { return clients_.size(); }
  std::size_t in_flight() const { return by_tag_.size(); }

  // A fence (a PING) goes upstream after this many requests without a reply, so that their possible refusals are
  // matched to their clients with bounded memory.
  static constexpr std::size_t kFenceEvery = 256;

 private:
  enum class Kind : std::uint8_t { kRead, kAdd, kWait, kSingle };
  struct Member {
    ConnId client;
    std::int64_t delta = 0;  // ADD
    bool gone = false;       // left (disconnected, or its wait ended) after joining
  };
  struct Batch {
    Kind kind{};
    protocol::Request request;  // what goes upstream (ADD: the sum)
    std::string ident;          // what identical requests share ("" when it is never joined)
    std::vector<Member> members;
    std::uint64_t id = 0;
    std::uint64_t tag = 0;  // 0 until sent
    std::uint64_t cost = 0;
    bool canceled = false;  // a WAIT every member left: CANCEL_WAIT sent, its frames still to come
    std::size_t live() const;
  };
  struct Client {
    std::uint64_t floor = 0;  // upstream requests sent when its last request was sent or answered
    std::uint64_t wait = 0;   // the batch of its pending WAIT or BARRIER (0: none)
    std::uint64_t held = 0;   // the batch of the request it is held for (0: none)
  };
  struct NoReply {
    std::uint64_t tag;
    ConnId client;
  };

  ExecResult join_wait(ConnId client, Client& cl, const protocol::Request& r);
  ExecResult combine(ConnId client, Client& cl, const protocol::Request& r, Kind kind);
  ExecResult single(ConnId client, Client& cl, const protocol::Request& r, Kind kind);
  ExecResult send_without_reply(ConnId client, Client& cl, const protocol::Request& r);
  Batch& make_batch(Kind kind, const protocol::Request& r, std::string ident, std::uint64_t cost);
  void send_batch(Batch& b);
  void leave_wait(Client& cl, ConnId client);
  void leave(std::uint64_t batch, ConnId client);
  void finish(Batch& b);  // answered or refused: the batch goes, the next identical one may go up
  void answer(const Batch& b, protocol::Reply& reply);
  void reply_to(ConnId client, ReplyBuffer& out, const Batch& b, const std::vector<BlobPtr>& values,
                const std::string& encoded, std::int64_t integer);
  void maybe_fence();
  void drop_no_reply_before(std::uint64_t tag);
  bool fits(std::uint64_t growth) const { return bytes_ + io_bytes_ + growth <= max_total_bytes_; }
  ExecResult too_big(const protocol::Request& r, std::uint64_t cost) const;
  Batch* batch(std::uint64_t id);

  RelayPort& port_;
  std::uint64_t max_total_bytes_;
  std::uint64_t bytes_ = 0;
  std::uint64_t io_bytes_ = 0;
  std::uint64_t next_id_ = 1;
  std::uint64_t next_tag_ = 1;  // tags are sent in increasing order: a tag is also a position in the stream
  std::unordered_map<std::uint64_t, std::unique_ptr<Batch>> batches_;  // by id
  std::unordered_map<std::uint64_t, std::uint64_t> by_tag_;            // in flight: tag -> batch id
  std::unordered_map<std::string, std::uint64_t> open_;                // ident -> batch not sent yet
  std::unordered_map<std::string, std::uint64_t> in_flight_;           // ident -> newest batch sent and unanswered
  std::vector<std::uint64_t> due_;                                     // batches to send at the next flush
  std::unordered_map<ConnId, Client> clients_;
  std::deque<NoReply> no_reply_;                // requests without a reply, whose refusal may still come
  std::unordered_set<std::string> queue_keys_;  // keys seen in QUEUE_* requests: WAITs on them are not joined
  std::uint64_t fence_ = 0;                     // the tag of the PING in flight as a fence (0: none)
  std::vector<ConnId> congested_;
  RelayCounters counters_;
};

}  // namespace ctrun::store::detail
