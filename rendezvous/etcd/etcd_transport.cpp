#include "rendezvous/etcd/etcd_transport.hpp"

#include <atomic>

#include "rendezvous/etcd/http_session.hpp"
#include "rendezvous/etcd/tls_loader.hpp"

namespace ctrun::rdzv::etcd {
namespace {

std::atomic<std::uint64_t> g_wire_bytes{0};

}  // namespace

std::uint64_t http_bytes_exchanged() { return g_wire_bytes.load(); }

// The module and the context it made (OpenSSL's SSL_CTX behind a shared_ptr<void>).
struct TlsContext::Impl {
  const TlsModule* module;
  std::shared_ptr<void> context;
};

TlsContext::TlsContext(const Options& o) : impl_(std::make_unique<Impl>()) {
  impl_->module = &tls_module();
  impl_->context = impl_->module->make_context(o);
}

TlsContext::~TlsContext() = default;

struct Connection::Impl {
  std::unique_ptr<Session> session;
};

Connection::Connection(const Endpoint& endpoint, TlsContext* tls, store::Clock::time_point deadline)
    : impl_(std::make_unique<Impl>()) {
  const std::string host = endpoint.to_string();
  if (tls) {
    impl_->session = tls->impl_->module->connect(endpoint, host, tls->impl_->context.get(), deadline, &g_wire_bytes);
    return;
  }
  using Stream = boost::beast::tcp_stream;
  auto ioc = std::make_unique<boost::asio::io_context>();
  auto stream = std::make_unique<Stream>(*ioc);
  connect_lowest_layer(*ioc, *stream, endpoint, host, deadline);
  impl_->session = std::make_unique<HttpSession<Stream>>(std::move(ioc), std::move(stream), host, &g_wire_bytes);
}

Connection::~Connection() = default;

HttpAnswer Connection::post(const std::string& target, const std::string& body, store::Clock::time_point deadline) {
  return impl_->session->post(target, body, deadline);
}

bool Connection::post_streamed(const std::string& target, const std::string& body, store::Clock::time_point deadline,
                               const std::function<bool(const std::string&)>& on_line) {
  return impl_->session->post_streamed(target, body, deadline, on_line);
}

}  // namespace ctrun::rdzv::etcd
