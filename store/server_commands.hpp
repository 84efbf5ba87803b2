#pragma once
// The server's side of a request: runs one decoded request on the Keyspace (the semantics) and encodes its
// typed result with the codec's reply encoders (protocol::reply) into the connection's ReplyBuffer. This is
// all the server adds to the semantics: which results close the connection (the protocol has no error
// frame), and PyTorch's reply order.

#include <string>

#include "store/keyspace.hpp"
#include "store/protocol.hpp"

namespace ctrun::store::detail {

// What the server must do with the requesting connection afterwards.
struct ExecResult {
  bool close = false;  // the protocol says: fail this request by closing (after sending what was queued)
  std::string reason;  // for the log
  // The request is not finished: call step() with the same request (kept alive and unchanged) after
  // letting other connections run. Big WAITs and MULTI_SETs are executed in slices this way, so that one
  // request cannot hold the loop for long.
  bool more = false;
};

ExecResult execute(Keyspace& keyspace, ReplySink& sink, ConnId conn, const protocol::Request& request);
// Continues a request for which execute() (or the previous step()) returned `more`.
ExecResult step(Keyspace& keyspace, ReplySink& sink, ConnId conn, const protocol::Request& request);

}  // namespace ctrun::store::detail
