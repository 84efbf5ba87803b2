#pragma once
// What an HTTP session with one etcd member offers, plain or TLS (http_session.hpp implements it over a Beast
// stream; the TLS module, tls_module.hpp, hands one across the module boundary).

#include <functional>
#include <stdexcept>
#include <string>

#include "store/store.hpp"

namespace ctrun::rdzv::etcd {

struct HttpAnswer {
  unsigned status = 0;
  std::string body;
  bool keep_alive = false;  // false: the member closes the connection after this answer
};

// A streamed request answered with an error status instead of a stream; the answer is read whole.
class HttpErrorAnswer : public std::runtime_error {
 public:
  HttpErrorAnswer(unsigned status, std::string body)
      : std::runtime_error("HTTP " + std::to_string(status)), status(status), body(std::move(body)) {}
  unsigned status;
  std::string body;
};

// What a Connection (etcd_transport.hpp) holds: an open session to one member.
class Session {
 public:
  virtual ~Session() = default;
  virtual HttpAnswer post(const std::string& target, const std::string& body, store::Clock::time_point deadline) = 0;
  virtual bool post_streamed(const std::string& target, const std::string& body, store::Clock::time_point deadline,
                             const std::function<bool(const std::string&)>& on_line) = 0;
};

}  // namespace ctrun::rdzv::etcd
