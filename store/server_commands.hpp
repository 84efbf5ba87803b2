#pragma once
// The server's side of a request: runs one decoded request on the Keyspace (the semantics) and encodes its
// typed result, and the keyspace's events for other connections (ReplySink), with the codec's reply encoders
// (protocol::reply) into the connections' ReplyBuffers. This is all the server adds to the semantics: which
// results close the connection (the protocol has no error frame), and PyTorch's reply order.

#include <cstdint>
#include <optional>
#include <string>

#include "store/keyspace.hpp"
#include "store/protocol.hpp"

namespace ctrun::store::detail {

// Where replies go: the output buffer of each live connection. The keyspace's events become replies here:
// a released waiter gets STOP_WAITING, a watcher 1.13's watch event.
class ReplySink : public KeyspaceEvents {
 public:
  // The output buffer of a live connection, or nullptr if it is gone. Stays valid during one execute().
  virtual ReplyBuffer* output(ConnId conn) = 0;

  // Framed connections (protocol.hpp FRAMED): each pending WAIT or BARRIER waits in the keyspace under an id of its
  // own (a waiter), so that one connection may have several. The owner hands them out and maps them back.
  struct FramedWaiter {
    ConnId conn = 0;        // the connection that sent the request
    std::uint64_t seq = 0;  // the request's number on it
  };
  // A new waiter for request `seq` of framed connection `conn`.
  virtual ConnId open_waiter(ConnId /*conn*/, std::uint64_t /*seq*/) { return 0; }
  // Whose waiter `id` is (nullopt: `id` is a connection, not a waiter).
  virtual std::optional<FramedWaiter> waiter(ConnId /*id*/) { return std::nullopt; }
  // The waiter of request `seq` of `conn`, while it is open.
  virtual std::optional<ConnId> find_waiter(ConnId /*conn*/, std::uint64_t /*seq*/) { return std::nullopt; }
  // The wait is over (answered or withdrawn): the id is forgotten.
  virtual void close_waiter(ConnId /*id*/) {}

  void waiter_released(ConnId conn) final;
  void key_changed(ConnId watcher, KeyChange change, const std::string& key, const BlobPtr& old_value,
                   const BlobPtr& new_value) final;
  std::uint64_t unread_reply_bytes(ConnId conn) final;
};

// What the server must do with the requesting connection afterwards.
struct ExecResult {
  bool close = false;  // the protocol says: fail this request by closing (after sending what was queued)
  std::string reason;  // for the log
  // The request is not finished: call step() with the same request (kept alive and unchanged) after
  // letting other connections run. Big WAITs and MULTI_SETs are executed in slices this way, so that one
  // request cannot hold the loop for long.
  bool more = false;
  Refusal refusal = Refusal::kInvalid;  // with close: which limit or rule (the server counts refusals by it)
};

// Who sent a request and how its replies are framed.
struct RequestContext {
  ConnId conn = 0;
  bool framed = false;    // the connection sent FRAMED before this request
  std::uint64_t seq = 0;  // the request's number when framed
  ConnId waiter = 0;      // a framed WAIT or BARRIER: the waiter it registers as (ReplySink::open_waiter)
};

ExecResult execute(Keyspace& keyspace, ReplySink& sink, RequestContext& context, const protocol::Request& request);
// Continues a request for which execute() (or the previous step()) returned `more`.
ExecResult step(Keyspace& keyspace, ReplySink& sink, RequestContext& context, const protocol::Request& request);

}  // namespace ctrun::store::detail
