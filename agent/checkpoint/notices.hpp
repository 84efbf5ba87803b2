#pragma once
// What workers tell the agent about their checkpoints: one datagram per save or load on the job directory's
// notices.sock (layout.hpp), a JSON object {"what": "commit"|"load"|"refused", "rank", "step", "bytes",
// "seconds", "error"}. Sent without blocking: a worker never waits for the agent, and a notice lost to a full
// socket buffer costs only its event-log line (the directory itself is the truth).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent::checkpoint {

struct Notice {
  Event event;            // the event-log kind of its "what"
  nlohmann::json fields;  // everything else it said
};

// nullopt for a datagram that is not a notice (not JSON, no or an unknown "what").
std::optional<Notice> parse_notice(std::string_view datagram);

// Binds `path` (replacing a leftover) and calls `on_notice` on the loop for every notice received, until destroyed.
class NoticeSocket {
 public:
  NoticeSocket(boost::asio::io_context& io, const std::string& path, std::function<void(const Notice&)> on_notice);
  ~NoticeSocket();
  NoticeSocket(const NoticeSocket&) = delete;
  NoticeSocket& operator=(const NoticeSocket&) = delete;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ctrun::agent::checkpoint
