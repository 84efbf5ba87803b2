#pragma once
// What a TCPStore server's connections run their requests against, apart from the connections themselves. The
// server (server.cpp: accepting, reading, decoding both dialects under the limits, flow control, writing) hands
// every decoded request to a Backend; two implementations: the store's own keyspace (keyspace_backend.hpp, the
// store and ctstore) and an upstream store reached over one connection (relay_backend.hpp, the agent's store relay).
// A backend answers through the FrontEnd: replies into a connection's output, now or later.
//
// Everything here runs on the server's loop thread.

#include <chrono>
#include <cstdint>
#include <string>

#include "store/protocol.hpp"
#include "store/reply_buffer.hpp"
#include "store/server_commands.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::store::detail {

// A backend's part of the server's statistics (ServerStats).
struct BackendStats {
  std::uint64_t keys = 0;
  std::uint64_t bytes = 0;  // of keys and values held
  std::uint64_t pending_waits = 0;  // a relay: its requests not answered by the store yet
};

// What a backend may ask of the server's connection handling.
class FrontEnd {
 public:
  virtual ~FrontEnd() = default;
  // The output of a live connection (its replies, in order), or null when it is gone. What is written here goes
  // out at the end of the current handler, or at flush().
  virtual ReplyBuffer* output(ConnId conn) = 0;
  // A connection held by ExecResult::hold goes on: its held request is stepped again (hold with more), or its
  // next requests are read.
  virtual void resume(ConnId conn) = 0;
  // Fails one connection as the protocol does (it has no error frame): logged with the reason, replies already
  // queued still go out (bounded), then it is closed.
  virtual void fail(ConnId conn, Refusal kind, const std::string& reason) = 0;
  // Closes every connection at once (the store behind the backend is gone), logged once with the reason.
  virtual void fail_all(const std::string& reason) = 0;
  // Writes the replies queued outside a request's handling (an upstream's reply arrived).
  virtual void flush() = 0;
  // The server's memory is full: close the connections holding the most unread replies (never `except`).
  virtual bool reclaim(std::uint64_t bytes, ConnId except) = 0;
  // The loop everything here runs on (a backend's own sockets and timers go on it).
  virtual boost::asio::io_context& loop() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // One decoded request of conn, in the connection's order. ExecResult says what the connection does next.
  virtual ExecResult execute(ConnId conn, const protocol::Request& request) = 0;
  // The same request again, after `more` (at once) or `hold` with `more` (after FrontEnd::resume).
  virtual ExecResult step(ConnId conn, const protocol::Request& request) = 0;
  // The connection is gone (closed, failed, or its client left): drop what it holds.
  virtual void forget(ConnId conn) = 0;
  // Bytes held for clients, counted against the server's memory limit, and the server's own buffers' bytes, which
  // the backend counts in its refusals.
  virtual std::uint64_t held_bytes() const = 0;
  virtual void set_io_bytes(std::uint64_t bytes) = 0;
  // Deferred cleanup, a slice at a time between other work; true while more remains.
  virtual bool has_cleanup() const { return false; }
  virtual bool cleanup_step() { return false; }
  // Tagged mode (MULTIPLEX): true if a WAIT or BARRIER may be run for a virtual connection of its own per tag.
  virtual bool serves_tagged() const { return false; }
  // ON_SILENCE (ctrun's): conn has sent nothing for `quiet`; true if a registration of its fired. conn spoke again
  // after one fired. Only a backend that takes ON_SILENCE has registrations.
  virtual bool quiet(ConnId /*conn*/, std::chrono::milliseconds /*quiet*/) { return false; }
  virtual void spoke(ConnId /*conn*/) {}
  // The server is stopping: release what refers to it.
  virtual void stop() {}
  virtual BackendStats stats() const = 0;
};

}  // namespace ctrun::store::detail
