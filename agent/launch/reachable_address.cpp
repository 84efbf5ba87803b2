#include "agent/launch/reachable_address.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "agent/launch/rendezvous_factory.hpp"
#include "common/text.hpp"
#include "rendezvous/factory.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::agent {
namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool resolve(const std::string& host, std::uint16_t port, int socktype, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  return ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &out.list) == 0 && out.list;
}

bool loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family == AF_INET6) {
    const auto* in6 = &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(in6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(in6)) return in6->s6_addr[12] == 127;
  }
  return false;
}

std::string numeric(const sockaddr* a, socklen_t len) {
  char host[NI_MAXHOST];
  if (::getnameinfo(a, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return host;
}

// The rendezvous endpoint (etcd: the first of its members).
std::optional<rdzv::Endpoint> endpoint_of(const LaunchConfig& config) {
  if (config.rdzv.endpoint.empty()) return std::nullopt;
  const auto first = text::split(config.rdzv.endpoint, ',').front();
  const std::uint16_t port =
      config.rdzv.backend == rdzv::Backend::kEtcd ? rdzv::kDefaultEtcdPort : rdzv::kDefaultC10dPort;
  try {
    auto ep = rdzv::parse_endpoint(first, port);
    if (ep.host.find("://") != std::string::npos) return std::nullopt;
    return ep;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

bool resolves_to_loopback(const std::string& host) {
  AddrInfo r;
  if (!resolve(host, 0, SOCK_STREAM, r)) return false;
  return loopback(r.list->ai_addr);
}

std::optional<std::string> local_address_towards(const std::string& host, std::uint16_t port) {
  AddrInfo r;
  if (!resolve(host, port, SOCK_DGRAM, r)) return std::nullopt;
  for (auto* a = r.list; a; a = a->ai_next) {
    Fd s{::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0)};
    // A connected UDP socket only picks the route and the source address: nothing is sent.
    if (s.fd < 0 || ::connect(s.fd, a->ai_addr, a->ai_addrlen) != 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(s.fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    std::string out = numeric(reinterpret_cast<sockaddr*>(&local), len);
    if (!out.empty()) return out;
  }
  return std::nullopt;
}

PublishedAddress publishable_store_host(const LaunchConfig& config, const std::string& store_host) {
  PublishedAddress out{store_host, ""};
  if ((config.rdzv.local_addr && !config.rdzv.local_addr->empty()) || is_single_node(config)) return out;
  if (config.rdzv.backend != rdzv::Backend::kC10d && config.rdzv.backend != rdzv::Backend::kEtcd) return out;
  const auto ep = endpoint_of(config);
  if (!ep || !resolves_to_loopback(store_host) || resolves_to_loopback(ep->host)) return out;
  if (rdzv::is_local_host(ep->host)) {
    out.host = ep->host;
    out.why = "this host's name '" + store_host +
              "' resolves to a loopback address here (/etc/hosts), which other "
              "hosts cannot reach: the workers' store is published as " +
              ep->host +
              ", the rendezvous endpoint's host, by which the other nodes reach this one (--local-addr sets it)";
    return out;
  }
  const auto local = local_address_towards(ep->host, ep->port);
  if (!local || resolves_to_loopback(*local)) return out;
  out.host = *local;
  out.why = "this host's name '" + store_host +
            "' resolves to a loopback address here (/etc/hosts), which other "
            "hosts cannot reach: the workers' store is published as " +
            *local + ", this host's address on its route to the rendezvous endpoint " + ep->to_string() +
            " (--local-addr sets it)";
  return out;
}

std::string node_listen_host(const LaunchConfig& config, const std::string& store_host, bool static_multi_node) {
  if (!static_multi_node) return store_host;
  const std::string own = node_address(config);  // --local-addr, else the host name
  if ((config.rdzv.local_addr && !config.rdzv.local_addr->empty()) || !resolves_to_loopback(own)) return own;
  const auto master = rdzv::static_endpoint(rendezvous_parameters(config));
  const auto local = local_address_towards(master.host, master.port);
  return local && !resolves_to_loopback(*local) ? *local : own;
}

std::string unreachable_reason(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  AddrInfo r;
  if (!resolve(host, port, SOCK_STREAM, r)) return "'" + host + "' does not resolve here";
  std::string why;
  for (auto* a = r.list; a; a = a->ai_next) {
    Fd s{::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
    if (s.fd < 0) continue;
    const std::string addr = numeric(a->ai_addr, a->ai_addrlen);
    int rc = ::connect(s.fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
      if (rc == 0) {
        why = addr + ": no answer within " + std::to_string(timeout.count()) + " ms";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (rc > 0 && err == 0) return {};
      why = addr + ": " + std::strerror(err ? err : errno);
      continue;
    }
    if (rc == 0) return {};
    why = addr + ": " + std::strerror(errno);
  }
  return why;
}

std::string unreachable_store_message(const std::string& host, std::uint16_t port, const std::string& why) {
  std::string out = "the workers' store at " + host + ":" + std::to_string(port) +
                    " (MASTER_ADDR and MASTER_PORT, served by group rank 0's node) cannot be reached from this node (" +
                    why + "): its workers would hang in init_process_group.";
  if (resolves_to_loopback(host))
    out += " '" + host +
           "' is a loopback address here: give group rank 0's node --local-addr with an address the "
           "other nodes reach (or fix /etc/hosts there)";
  else
    out += " Check that group rank 0's node is reachable on that port from here (firewall, --local-addr)";
  return out;
}

}  // namespace ctrun::agent
