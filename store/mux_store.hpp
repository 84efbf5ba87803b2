#pragma once
// A TCPStore client whose ONE connection serves every thread of its process at once: requests from any thread are
// pipelined on it (written as they come, several per write when they meet), replies are matched to them in order
// by a reader on a ClientLoop, and a blocked WAIT holds back nobody else's requests. This is how an agent holds a
// single connection to the rendezvous store for its joins, its heartbeats, its loss watch and the round's exchanges.
//
// How waits share the connection depends on the server (found out at connect time, never probed):
// - kTagged: ctrun's server announces tagged mode in its PING reply (protocol.hpp, kPingAskFeatures, kFeatureMultiplex).
//   The client sends MULTIPLEX; every request then carries a tag of its own and every reply comes in a frame under
//   it, a WAIT or BARRIER whenever it completes, so any number may be pending while other requests come and go
//   (CANCEL_WAIT under a wait's tag withdraws it). A request the store refuses fails its own caller only.
// - kPlain: torch >= 2.1's servers answer requests sent after a pending WAIT while it waits and push its
//   STOP_WAITING later, in between their replies: a stream no client could split. So a WAIT is only ever the last
//   request on the wire: whoever sends after it first sends CANCEL_WAIT (answered 01, or 00 01 if the keys
//   appeared meanwhile) and the WAIT is sent again behind its request, all in the same write. With several waits
//   pending at once, none is on the wire: each is polled with CHECK every 20 ms.
// - kLegacy: torch <= 2.0 has no CANCEL_WAIT: waits are CHECK polls; APPEND, MULTI_GET/SET and BARRIER are
//   emulated as TcpStore does; queue ops, list_keys and ping throw.
// Reply-less requests (SET, APPEND, MULTI_SET, QUEUE_PUSH) return once queued. A reply that does not come within
// the store timeout, or any I/O error, drops the connection: what was in flight fails with StoreError (pending
// waits with WaitOutcome::kFailed) and the next call reconnects (ON_CLOSE registrations are restored, saying so
// with their on_reconnect value, as TcpStore). A server over its connection cap refuses at once (RefusedError).

#include <atomic>
#include <memory>
#include <string>

#include "store/store.hpp"
#include "store/tcp_store.hpp"

namespace ctrun::store {

class ClientLoop;

class MuxStore final : public Store {
 public:
  enum class Mode { kTagged, kPlain, kLegacy };

  struct Options : TcpStoreOptions {
    // Use ctrun's tagged mode where the server announces it (false: behave as with torch's v2 server; tests).
    bool tagged = true;
  };

  // Connects (within connect_timeout; throws StoreError, RefusedError). `loop`: the I/O thread to use; null: a
  // loop of this store's own.
  explicit MuxStore(Options options, std::shared_ptr<ClientLoop> loop = nullptr);
  ~MuxStore() override;

  // The same connection under other timeouts: a caller that must not wait long for a reconnect (a heartbeat) or for
  // a reply. The connection lives while any view of it does.
  std::shared_ptr<MuxStore> view(Duration timeout, Duration connect_timeout);

  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key) override;
  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  std::int64_t num_keys() override;
  bool delete_key(const std::string& key) override;
  void append(const std::string& key, std::string_view value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;
  void queue_push(const std::string& key, std::string_view value) override;
  std::optional<std::string> queue_pop(const std::string& key, bool block) override;
  std::int64_t queue_len(const std::string& key) override;
  std::vector<std::string> list_keys() override;
  void barrier(const std::string& key, std::int64_t world_size, Duration timeout) override;
  // Where the server announced ON_CLOSE (ctrun's); registrations are sent again after every reconnect.
  bool append_on_close(const std::string& key, std::string_view on_close, std::string_view on_reconnect) override;
  void cancel_on_close(const std::string& key) override;
  // Where the server announced ON_SILENCE (ctrun's); sent again after every reconnect.
  bool append_on_silence(const std::string& key, std::string_view on_silence, std::string_view on_back,
                         Duration timeout) override;
  void cancel_on_silence(const std::string& key) override;
  std::shared_ptr<AsyncWait> wait_async(const std::vector<std::string>& keys, WaitDone done) override;
  // One write of one COMPARE_SET per key; the replies read together.
  std::vector<std::optional<std::string>> peek(const std::vector<std::string>& keys,
                                               std::string_view sentinel) override;
  Duration timeout() const override;
  void set_timeout(Duration timeout) override;
  void set_connect_timeout(Duration timeout);

  void ping();
  Mode mode() const;
  protocol::Dialect dialect() const;
  const std::string& endpoint() const;

  class Connection;  // the shared connection (mux_store.cpp)

 private:
  MuxStore(std::shared_ptr<Connection> connection, std::shared_ptr<void> life, Duration timeout,
           Duration connect_timeout);
  protocol::Reply call(protocol::Request request);
  void send(protocol::Request request);
  void require_v2(protocol::Command command) const;
  std::string wire(const std::string& key) const;
  std::vector<std::string> wire(const std::vector<std::string>& keys) const;

  std::shared_ptr<Connection> connection_;
  std::shared_ptr<void> life_;  // shared by every view: the last one closes the connection
  std::atomic<Duration::rep> timeout_ms_;
  std::atomic<Duration::rep> connect_timeout_ms_;
};

}  // namespace ctrun::store
