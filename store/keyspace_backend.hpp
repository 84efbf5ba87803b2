#pragma once
// The store's own backend: requests run on its keyspace (store/keyspace.hpp, the semantics) and their results and
// the keyspace's events encoded as replies (server_commands.hpp). What `Server` runs; the owner's calls (clear,
// set_local, ...) reach the keyspace here.

#include "store/backend.hpp"
#include "store/keyspace.hpp"

namespace ctrun::store::detail {

class KeyspaceBackend final : public Backend, private ReplySink {
 public:
  KeyspaceBackend(FrontEnd& front, std::uint64_t max_total_bytes, std::uint64_t max_reply_bytes)
      : front_(front), keyspace_(*this, max_total_bytes, max_reply_bytes) {}

  Keyspace& keyspace() { return keyspace_; }

  ExecResult execute(ConnId conn, const protocol::Request& request) override {
    return detail::execute(keyspace_, *this, conn, request);
  }
  ExecResult step(ConnId conn, const protocol::Request& request) override {
    return detail::step(keyspace_, *this, conn, request);
  }
  void forget(ConnId conn) override { keyspace_.forget(conn); }
  std::uint64_t held_bytes() const override { return keyspace_.held_bytes(); }
  void set_io_bytes(std::uint64_t bytes) override { keyspace_.set_io_bytes(bytes); }
  bool has_cleanup() const override { return keyspace_.has_cleanup(); }
  bool cleanup_step() override { return keyspace_.cleanup_step(); }
  bool serves_tagged() const override { return true; }
  bool quiet(ConnId conn, std::chrono::milliseconds quiet) override { return keyspace_.quiet(conn, quiet); }
  void spoke(ConnId conn) override { keyspace_.spoke(conn); }
  BackendStats stats() const override {
    return {.keys = keyspace_.num_keys(), .bytes = keyspace_.bytes(), .pending_waits = keyspace_.pending_waits()};
  }

 private:
  ReplyBuffer* output(ConnId conn) override { return front_.output(conn); }
  bool reclaim(std::uint64_t bytes, ConnId except) override { return front_.reclaim(bytes, except); }

  FrontEnd& front_;
  Keyspace keyspace_;
};

}  // namespace ctrun::store::detail
