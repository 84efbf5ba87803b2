#include "agent/hang/status_server.hpp"

#include <cstdint>
#include <mutex>

#include "common/http/server.hpp"

namespace ctrun::agent::hang {

struct StatusServer::State {
  std::mutex mutex;
  std::string text = "no snapshot yet\n";
  std::string json = "{}";
  std::unique_ptr<http::Server> server;  // last member: stopped before the snapshot it reads goes

  http::Reply answer(bool as_json) {
    std::lock_guard lock(mutex);
    return as_json ? http::Reply{"application/json", json + "\n"} : http::Reply{"text/plain; charset=utf-8", text};
  }
};

StatusServer::StatusServer(std::function<std::string()> stacks, const std::string& host, int port)
    : state_(std::make_shared<State>()) {
  State* s = state_.get();
  http::Routes routes = {{"/", [s] { return s->answer(false); }}, {"/status.json", [s] { return s->answer(true); }}};
  if (stacks) {
    routes["/stacks"] = [stacks = std::move(stacks)] { return http::Reply{"text/plain; charset=utf-8", stacks()}; };
  }
  s->server = std::make_unique<http::Server>(host, static_cast<std::uint16_t>(port), std::move(routes));
}

StatusServer::~StatusServer() { state_->server.reset(); }

int StatusServer::port() const { return state_->server->port(); }

void StatusServer::publish(std::string text, std::string json) {
  std::lock_guard lock(state_->mutex);
  state_->text = std::move(text);
  state_->json = std::move(json);
}

}  // namespace ctrun::agent::hang
