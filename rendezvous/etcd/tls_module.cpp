// libctrun_etcd_tls.so: etcd over https (tls_module.hpp says why this is a module of its own).
#include "rendezvous/etcd/tls_module.hpp"

#include <openssl/ssl.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>

namespace ctrun::rdzv::etcd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ssl = asio::ssl;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

std::shared_ptr<void> make_context(const Options& o) {
  auto tls = std::make_shared<ssl::context>(ssl::context::tls_client);
  beast::error_code ec;
  tls->set_verify_mode(ssl::verify_peer, ec);
  if (o.cacert.empty())
    tls->set_default_verify_paths(ec);
  else
    tls->load_verify_file(o.cacert, ec);
  if (ec) throw store::StoreError(fmt::format("etcd: cannot load the CA certificate '{}': {}", o.cacert, ec.message()));
  if (o.cert.empty()) return tls;
  tls->use_certificate_chain_file(o.cert, ec);
  if (ec)
    throw store::StoreError(fmt::format("etcd: cannot load the client certificate '{}': {}", o.cert, ec.message()));
  tls->use_private_key_file(o.key, ssl::context::pem, ec);
  if (ec) throw store::StoreError(fmt::format("etcd: cannot load the client key '{}': {}", o.key, ec.message()));
  return tls;
}

std::unique_ptr<Session> connect(const Endpoint& ep, const std::string& host, void* context,
                                 store::Clock::time_point deadline, std::atomic<std::uint64_t>* wire_bytes) {
  auto ioc = std::make_unique<asio::io_context>();
  auto stream = std::make_unique<TlsStream>(*ioc, *static_cast<ssl::context*>(context));
  beast::error_code ec;
  if (asio::ip::make_address(ep.host, ec); ec)  // SNI for names, not for addresses
    SSL_set_tlsext_host_name(stream->native_handle(), ep.host.c_str());
  stream->set_verify_callback(ssl::host_name_verification(ep.host));
  connect_lowest_layer(*ioc, *stream, ep, host, deadline);
  stream->async_handshake(ssl::stream_base::client, [&](beast::error_code e) { ec = e; });
  HttpSession<TlsStream>::run(*ioc);
  // A certificate the client refuses is refused by every member, every time: say so at once.
  if (ec && ec.category() == asio::error::get_ssl_category())
    throw store::StoreError(fmt::format(
        "TLS handshake with etcd at {} failed: {} (check --rdzv-conf cacert=, cert=, key=)", host, ec.message()));
  if (ec) throw TransientError(fmt::format("TLS handshake with {} failed: {}", host, ec.message()));
  return std::make_unique<HttpSession<TlsStream>>(std::move(ioc), std::move(stream), host, wire_bytes);
}

const TlsModule kModule{kTlsModuleAbi, make_context, connect};

}  // namespace
}  // namespace ctrun::rdzv::etcd

extern "C" __attribute__((visibility("default"))) const ctrun::rdzv::etcd::TlsModule* ctrun_etcd_tls_module() {
  return &ctrun::rdzv::etcd::kModule;
}
