#include "agent/status/status_server.hpp"

#include <algorithm>
#include <cstdint>

#include "common/http/server.hpp"

namespace ctrun::agent::status {
namespace {

constexpr int kDefaultLogLines = 100;
constexpr int kMaxLogLines = 2000;

http::Reply page(std::string content_type, std::string body) {
  return http::Reply{std::move(content_type), std::move(body), 200, {{"Cache-Control", "no-store"}}};
}

std::string event_of(const std::string& json) { return "data: " + json + "\n\n"; }

}  // namespace

struct StatusServer::State {
  std::shared_ptr<http::EventStream> viewers = std::make_shared<http::EventStream>(kMaxViewers);
  std::unique_ptr<http::Server> server;
};

StatusServer::StatusServer(boost::asio::io_context& io, Pages pages, const std::string& host, int port)
    : state_(std::make_unique<State>()) {
  auto p = std::make_shared<Pages>(std::move(pages));
  auto html = [p] { return page("text/html; charset=utf-8", p->html()); };
  http::Routes routes = {
      {"/", http::answer_now([p, html](const http::Request& request) {
         if (request.wants_html()) return html();
         auto reply = page("text/plain; charset=utf-8", p->text());
         reply.headers.emplace_back("Vary", "Accept");
         return reply;
       })},
      {"/index.html", http::answer_now(html)},
      {"/status.json", http::answer_now([p] { return page("application/json", p->json() + "\n"); })},
      {"/progress.json", http::answer_now([p] { return page("application/json", p->progress() + "\n"); })},
      {"/logs", http::answer_now([p](const http::Request& request) {
         const std::string rank = request.param("rank").value_or("all");
         int lines = kDefaultLogLines;
         try {
           lines = std::clamp(std::stoi(request.param("lines").value_or("100")), 1, kMaxLogLines);
         } catch (const std::exception&) {
           return http::Reply{"text/plain", "lines=N: a number of lines, 1 to 2000\n", 400};
         }
         auto text = p->logs(rank, lines);
         if (!text)
           return http::Reply{"text/plain", "no rank " + rank + " runs on this node (its agent has its logs)\n", 404};
         return page("text/plain; charset=utf-8", std::move(*text));
       })},
      {"/events", http::answer_now([p, viewers = state_->viewers] {
         http::Reply reply{"text/event-stream", "retry: 2000\n" + event_of(p->json()), 200, {}, viewers};
         if (p->viewer_joined && viewers->clients() < viewers->max_clients()) p->viewer_joined();
         return reply;
       })}};
  if (p->stacks) {
    routes["/stacks"] = [p](http::Respond respond) {
      p->stacks([respond = std::move(respond)](std::string text) {
        respond(page("text/plain; charset=utf-8", std::move(text)));
      });
    };
  }
  state_->server = std::make_unique<http::Server>(io, host, static_cast<std::uint16_t>(port), std::move(routes));
}

StatusServer::~StatusServer() = default;

int StatusServer::port() const { return state_->server->port(); }

int StatusServer::viewers() const { return state_->viewers->clients(); }

void StatusServer::push(const std::string& json) { state_->viewers->publish(event_of(json)); }

}  // namespace ctrun::agent::status
