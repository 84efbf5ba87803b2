#pragma once
// The server's side of a request: runs one decoded request on the Keyspace (the semantics) and encodes its
// typed result, and the keyspace's events for other connections (ReplySink), with the codec's reply encoders
// (protocol::reply) into the connections' ReplyBuffers. This is all the server adds to the semantics: which
// results close the connection (the protocol has no error frame), and PyTorch's reply order.

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
  // The connection's later requests wait until the backend resumes it (store/backend.hpp's FrontEnd::resume): a
  // relay holds a client whose reply comes from upstream. With `more`: the request itself was not taken yet and is
  // stepped again on resume (a relay whose upstream is backlogged).
  bool hold = false;
};

ExecResult execute(Keyspace& keyspace, ReplySink& sink, ConnId conn, const protocol::Request& request);
// Continues a request for which execute() (or the previous step()) returned `more`.
ExecResult step(Keyspace& keyspace, ReplySink& sink, ConnId conn, const protocol::Request& request);

}  // namespace ctrun::store::detail
