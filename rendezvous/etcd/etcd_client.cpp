#include "rendezvous/etcd/etcd_client.hpp"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "rendezvous/etcd/endpoint_failover.hpp"
#include "rendezvous/etcd/etcd_json.hpp"
#include "rendezvous/etcd/etcd_transport.hpp"

namespace ctrun::rdzv::etcd {

std::uint64_t wire_bytes() { return http_bytes_exchanged(); }

struct Client::Impl {
  explicit Impl(const Options& o) : tls(o.https ? std::make_unique<TlsContext>(o) : nullptr), failover(o) {}

  // One request with failover. Holds the mutex: one request at a time on the client's connection.
  nlohmann::json call(const Request& request);

  std::unique_ptr<TlsContext> tls;  // null: plain HTTP
  EndpointFailover failover;
  std::mutex mutex;  // guards conn
  std::unique_ptr<Connection> conn;
};

nlohmann::json Client::Impl::call(const Request& request) {
  const auto text = request.body.dump();
  std::lock_guard lock(mutex);
  return failover.run(request.path, [&](EndpointFailover::Tries& tries) {
    try {
      if (!conn) conn = std::make_unique<Connection>(tries.endpoint(), tls.get(), tries.deadline());
      auto answer = conn->post(request.path, text, tries.deadline());
      if (!answer.keep_alive) conn.reset();
      if (answer.status != 200) throw_error_answer(answer.status, answer.body);
      return parse_answer(answer.body);
    } catch (...) {
      conn.reset();  // a half-used connection is never reused
      throw;
    }
  });
}

Client::Client(Options options) : options_(std::move(options)), impl_(std::make_unique<Impl>(options_)) {}

Client::~Client() = default;

std::string Client::endpoints() const { return impl_->failover.endpoints(); }

void Client::abandon() { impl_->failover.abandon(); }

RangeResult Client::range(const std::string& key, const std::string& range_end, bool keys_only, bool count_only,
                          std::int64_t revision) {
  return read_range(impl_->call(range_request(key, range_end, keys_only, count_only, revision)));
}

std::int64_t Client::put(const std::string& key, const std::string& value, std::int64_t lease) {
  return read_revision(impl_->call(put_request(key, value, lease)));
}

std::int64_t Client::delete_range(const std::string& key, const std::string& range_end) {
  return read_deleted(impl_->call(delete_range_request(key, range_end)));
}

TxnResult Client::txn(const std::vector<Compare>& compare, const std::vector<Op>& success,
                      const std::vector<Op>& failure) {
  return read_txn(impl_->call(txn_request(compare, success, failure)));
}

std::int64_t Client::lease_grant(std::chrono::seconds ttl) {
  return read_lease_grant(impl_->call(lease_grant_request(ttl)));
}

std::int64_t Client::lease_keep_alive(std::int64_t id) {
  return read_lease_ttl(impl_->call(lease_keep_alive_request(id)));
}

void Client::lease_revoke(std::int64_t id) {
  try {
    impl_->call(lease_revoke_request(id));
  } catch (const EtcdError& e) {
    if (e.code() != GrpcStatus::kNotFound) throw;  // revoked already: what the caller wanted
  }
}

bool Client::watch_put(const std::string& key, std::int64_t start_revision, store::Clock::time_point deadline) {
  auto next = start_revision;  // a watch resumed on another member misses nothing and repeats nothing
  auto seen =
      impl_->failover.run_until(fmt::format("watch of '{}'", key), deadline, [&](EndpointFailover::Tries& tries) {
        Connection conn(tries.endpoint(), impl_->tls.get(), tries.deadline());
        const auto request = watch_request(key, next);
        try {
          return conn.post_streamed(request.path, request.body.dump(), deadline, [&](const std::string& line) {
            const auto message = read_watch_message(line);
            tries.answered();
            if (message.canceled)
              throw TransientError(
                  fmt::format("watch canceled: {} (compacted at {})", message.cancel_reason, message.compact_revision));
            next = std::max(next, message.next_revision);
            return message.put_seen;
          });
        } catch (const HttpErrorAnswer& e) {
          throw_error_answer(e.status, e.body);
        }
      });
  return seen.value_or(false);
}

}  // namespace ctrun::rdzv::etcd
