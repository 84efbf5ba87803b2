#include "agent/checkpoint/notices.hpp"

#include <unistd.h>

#include <array>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/datagram_protocol.hpp>

namespace ctrun::agent::checkpoint {

std::optional<Notice> parse_notice(std::string_view datagram) {
  nlohmann::json j = nlohmann::json::parse(datagram, nullptr, false);
  if (!j.is_object() || !j.contains("what") || !j["what"].is_string()) return std::nullopt;
  const std::string what = j["what"].get<std::string>();
  Notice n;
  if (what == "commit") {
    n.event = Event::kCheckpointCommit;
  } else if (what == "load") {
    n.event = Event::kCheckpointLoad;
  } else if (what == "refused") {
    n.event = Event::kCheckpointRefused;
  } else {
    return std::nullopt;
  }
  j.erase("what");
  n.fields = std::move(j);
  return n;
}

struct NoticeSocket::Impl : std::enable_shared_from_this<Impl> {
  using Protocol = boost::asio::local::datagram_protocol;
  Impl(boost::asio::io_context& io, std::string p, std::function<void(const Notice&)> cb)
      : socket(io), path(std::move(p)), on_notice(std::move(cb)) {}

  void receive() {
    socket.async_receive(boost::asio::buffer(buffer),
                         [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
                           if (ec == boost::asio::error::operation_aborted || !self->socket.is_open()) return;
                           if (!ec) {
                             if (auto notice = parse_notice(std::string_view(self->buffer.data(), n)))
                               self->on_notice(*notice);
                           }
                           self->receive();
                         });
  }

  Protocol::socket socket;
  std::string path;
  std::function<void(const Notice&)> on_notice;
  std::array<char, 8192> buffer{};
};

NoticeSocket::NoticeSocket(boost::asio::io_context& io, const std::string& path,
                           std::function<void(const Notice&)> on_notice)
    : impl_(std::make_shared<Impl>(io, path, std::move(on_notice))) {
  ::unlink(path.c_str());
  impl_->socket.open();
  impl_->socket.bind(Impl::Protocol::endpoint(path));
  impl_->receive();
}

NoticeSocket::~NoticeSocket() {
  boost::system::error_code ec;
  impl_->socket.close(ec);
  ::unlink(impl_->path.c_str());
}

}  // namespace ctrun::agent::checkpoint
