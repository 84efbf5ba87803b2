#include "agent/status/status_server.hpp"

#include <cstdint>

#include "common/http/server.hpp"

namespace ctrun::agent::status {

struct StatusServer::State {
  // Shared with the routes: a route still queued on the loop when the server goes reads a valid snapshot.
  std::shared_ptr<std::pair<std::string, std::string>> snapshot =
      std::make_shared<std::pair<std::string, std::string>>("no snapshot yet\n", "{}");
  std::unique_ptr<http::Server> server;
};

StatusServer::StatusServer(boost::asio::io_context& io, std::function<void(StacksAnswer)> stacks,
                           const std::string& host, int port)
    : state_(std::make_unique<State>()) {
  auto snapshot = state_->snapshot;
  http::Routes routes = {{"/", http::answer_now([snapshot] {
                            return http::Reply{"text/plain; charset=utf-8", snapshot->first};
                          })},
                         {"/status.json", http::answer_now([snapshot] {
                            return http::Reply{"application/json", snapshot->second + "\n"};
                          })}};
  if (stacks) {
    routes["/stacks"] = [stacks = std::move(stacks)](http::Respond respond) {
      stacks([respond = std::move(respond)](std::string text) {
        respond(http::Reply{"text/plain; charset=utf-8", std::move(text)});
      });
    };
  }
  state_->server = std::make_unique<http::Server>(io, host, static_cast<std::uint16_t>(port), std::move(routes));
}

StatusServer::~StatusServer() = default;

int StatusServer::port() const { return state_->server->port(); }

void StatusServer::publish(std::string text, std::string json) {
  state_->snapshot->first = std::move(text);
  state_->snapshot->second = std::move(json);
}

}  // namespace ctrun::agent::status
