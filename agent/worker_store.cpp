#include "agent/worker_store.hpp"

#include "store/server.hpp"

#include <utility>

namespace ctrun::agent {

WorkerStore::WorkerStore(const std::string& host, std::uint16_t port, FailureHandler on_failure) {
  store::ServerOptions options;
  options.host = host;
  options.port = port;
  options.on_failure = std::move(on_failure);
  server_ = std::make_unique<store::Server>(options);
  server_->start();
}

WorkerStore::~WorkerStore() { server_->stop(); }

std::uint16_t WorkerStore::port() const { return server_->port(); }
void WorkerStore::clear() { server_->clear(); }
std::uint64_t WorkerStore::keys() const { return server_->stats().keys; }

}  // namespace ctrun::agent
