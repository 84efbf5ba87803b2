#pragma once
// Ports for tests, without the pick-release-bind race.
//
// Where the test or a program of ours binds, it binds port 0 and reads the port back (ctstore prints it, ctrun's
// event log reports it in agent_start). Some programs must be told their port before they start: etcd's peer URLs,
// one --master-port handed to several agents at once by a launcher. For those a PortReservation holds the port:
// a socket bound to it (SO_REUSEADDR) that never listens. While it is held, no other bind can take the port (a
// bind to port 0 never picks a bound port, an explicit bind without SO_REUSEADDR is refused), but the program it
// is meant for binds it and listens: TCP servers set SO_REUSEADDR (ctrun's store, etcd, torch's TCPStore) and
// Linux lets a SO_REUSEADDR socket share a port with a bound socket that is not listening. Keep it until the
// program has bound, or simply for the whole test.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ctrun::test {

class PortReservation {
 public:
  // host: a numeric IPv4 or IPv6 address. The default, every IPv4 address, keeps the port from every other bind
  // to any address (127.0.0.x included) while the program binds its own one. Throws when it cannot bind.
  explicit PortReservation(const std::string& host = "0.0.0.0") {
    sockaddr_storage s{};
    auto* v4 = reinterpret_cast<sockaddr_in*>(&s);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&s);
    const bool ipv6 = host.find(':') != std::string::npos;
    s.ss_family = ipv6 ? AF_INET6 : AF_INET;
    const bool parsed = ipv6 ? ::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1
                             : ::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1;
    socklen_t len = ipv6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    fd_ = ::socket(s.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (fd_ < 0 || !parsed || ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ::bind(fd_, reinterpret_cast<sockaddr*>(&s), len) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&s), &len) != 0) {
      if (fd_ >= 0) ::close(fd_);
      throw std::runtime_error("cannot reserve a port on " + host);
    }
    port_ = ntohs(ipv6 ? v6->sin6_port : v4->sin_port);
  }
  ~PortReservation() {
    if (fd_ >= 0) ::close(fd_);
  }
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  PortReservation(PortReservation&& o) noexcept : fd_(o.fd_), port_(o.port_) { o.fd_ = -1; }

  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace ctrun::test
