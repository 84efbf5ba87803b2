#include "rendezvous/factory.hpp"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/hostname.hpp"
#include "common/log.hpp"
#include "rendezvous/c10d_handler.hpp"
#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_lease.hpp"
#include "rendezvous/etcd/etcd_store.hpp"
#include "rendezvous/etcd/member_lease.hpp"
#include "rendezvous/static_handler.hpp"
#include "store/mux_store.hpp"
#include "store/server.hpp"
#include "store/tcp_store.hpp"

namespace ctrun::rdzv {
namespace {

bool same_address(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET)
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(b)->sin_addr, sizeof(in_addr)) == 0;
  if (a->sa_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  return false;
}

// Serves the rendezvous store on this node if it should; nullptr when another node (or ctstore) serves it.
std::shared_ptr<store::Server> maybe_host(const Endpoint& ep, bool want, std::shared_ptr<const auth::Secret> secret) {
  if (!want) return nullptr;
  store::ServerOptions options;
  options.secret = std::move(secret);
  options.host = ep.host;  // the endpoint's own address: several agents of one machine bind it in turn
  options.port = ep.port;
  auto server = std::make_shared<store::Server>(options);
  try {
    server->start();
    log::get("rdzv")->info("hosting the rendezvous store on {}", Endpoint{ep.host, server->port()}.to_string());
    return server;
  } catch (const store::StoreError& e) {  // another agent of this machine got there first: be its client
    log::get("rdzv")->info("not hosting the rendezvous store ({}): connecting to {} as a client", e.what(),
                           ep.to_string());
    return nullptr;
  }
}

std::shared_ptr<store::Store> connect(const Endpoint& ep, store::Duration timeout, store::Duration connect_timeout,
                                      std::shared_ptr<const auth::Secret> secret = nullptr) {
  store::TcpStoreOptions o;
  o.secret = std::move(secret);
  o.host = ep.host;
  o.port = ep.port;
  o.timeout = timeout;
  o.connect_timeout = connect_timeout;
  try {
    return std::make_shared<store::TcpStore>(o);
  } catch (const store::StoreAuthError& e) {
    throw RendezvousError(fmt::format("the rendezvous store turned this agent away: {}", e.what()));
  } catch (const store::StoreError& e) {
    throw RendezvousConnectionError(
        fmt::format("cannot reach the rendezvous store at {}: {}. Is the host of "
                    "--rdzv-endpoint (or --master-addr) up and reachable?",
                    ep.to_string(), e.what()));
  }
}

// The rendezvous store's one connection for a c10d handler (store/mux_store.hpp): the first connect waits up to
// `first_timeout` for the endpoint to come up (its host may start later); every reconnect after that waits at most
// `timeout` (a lost store is reported in time).
std::shared_ptr<store::Store> connect_shared(const Endpoint& ep, store::Duration timeout, store::Duration first_timeout,
                                             std::shared_ptr<const auth::Secret> secret) {
  store::MuxStore::Options o;
  o.secret = std::move(secret);
  o.host = ep.host;
  o.port = ep.port;
  o.timeout = timeout;
  o.connect_timeout = first_timeout;
  try {
    auto s = std::make_shared<store::MuxStore>(o);
    s->set_connect_timeout(timeout);
    return s;
  } catch (const store::StoreAuthError& e) {
    throw RendezvousError(fmt::format("the rendezvous store turned this agent away: {}", e.what()));
  } catch (const store::RefusedError& e) {
    throw RendezvousConnectionError(
        fmt::format("the rendezvous store at {} refuses connections: {}", ep.to_string(), e.reason()));
  } catch (const store::StoreError& e) {
    throw RendezvousConnectionError(
        fmt::format("cannot reach the rendezvous store at {}: {}. Is the host of "
                    "--rdzv-endpoint (or --master-addr) up and reachable?",
                    ep.to_string(), e.what()));
  }
}

// An agent of this machine that names the endpoint binds it within this long of starting.
constexpr auto kHostGrace = std::chrono::seconds(2);

// True if a store answers at ep within `within` (connection refused is retried until then).
bool answers(const Endpoint& ep, store::Duration within, const std::shared_ptr<const auth::Secret>& secret) {
  try {
    connect(ep, within, within, secret);
    return true;
  } catch (const RendezvousError&) {
    return false;
  }
}

std::unique_ptr<Handler> make_static(const RendezvousParameters& p, const NodeSpec& node,
                                     const HandlerOptions& options) {
  Endpoint ep = static_endpoint(p);
  auto rank = p.get_as_int("rank").value_or(p.node_rank);
  StaticConfig config{p.run_id, p.max_nodes, static_cast<int>(rank), ep};
  auto store = options.store;
  std::shared_ptr<store::Server> server;
  if (!store) {
    const auto timeout = p.get_as_seconds("timeout").value_or(std::chrono::seconds(900));
    if (rank == 0 && options.agent_store_port) {
      // The agent's own worker store: named explicitly, never guessed from "the port is taken" (which may be
      // anybody's server).
      config.master.port = *options.agent_store_port;
    } else if (rank == 0) {
      store::ServerOptions so;
      so.host = ep.host;
      so.port = ep.port;
      server = std::make_shared<store::Server>(so);
      try {
        server->start();
      } catch (const store::StoreError& e) {
        throw RendezvousError(fmt::format(
            "static rendezvous: node rank 0 cannot serve the store on {} ({}). If another process holds that port, "
            "stop it or choose a free one with --master-port (the same on every node)",
            ep.to_string(), e.what()));
      }
      config.master.port = server->port();
    }
    store = connect(config.master, timeout, timeout);
  }
  return std::make_unique<StaticHandler>(config, node, store, server);
}

std::unique_ptr<Handler> make_c10d(const RendezvousParameters& p, const NodeSpec& node, const HandlerOptions& options) {
  C10dConfig config{p.run_id, p.min_nodes, p.max_nodes, c10d_settings(p)};
  if (options.store) {
    auto store = options.store;
    return std::make_unique<C10dHandler>(
        config, node, [store] { return store; }, options.clock);
  }
  if (p.endpoint.empty()) throw std::invalid_argument("--rdzv-backend c10d needs --rdzv-endpoint host[:port]");
  auto ep = parse_endpoint(p.endpoint, kDefaultC10dPort);
  // torchrun 2.x: host iff the endpoint resolves to any address of this machine, whatever --local-addr says; when
  // the bind fails, another agent of this machine (or a ctstore) serves it: be its client. One refinement: an
  // agent whose --local-addr names ANOTHER address of this machine (several "nodes" on one machine) first gives
  // the agent that names the endpoint kHostGrace to serve it, so that the host is that one, as users expect.
  bool want = false;
  if (config.settings.is_host) {
    want = *config.settings.is_host;
  } else if (p.local_addr.empty() || same_host(p.local_addr, ep.host)) {
    want = is_local_host(ep.host) || (!p.local_addr.empty());
  } else if (is_local_host(ep.host)) {
    want = ep.port == 0 || !answers(ep, kHostGrace, p.secret);
  }
  auto server = maybe_host(ep, want, p.secret);
  if (server) {
    ep.port = server->port();  // port 0 (--standalone, tests): the port the OS picked
    config.served_store = ep.to_string();
  }
  if (ep.port == 0) throw std::invalid_argument("--rdzv-endpoint port 0 needs this node to host the store");
  // Reaching the endpoint the first time may take until join_timeout (its host may start later); after that every
  // call, and every reconnect after a store loss, waits at most read_timeout (a lost store is reported in time).
  const auto timeout = config.settings.read_timeout;
  const auto first_timeout = std::max(config.settings.join_timeout, timeout);
  return std::make_unique<C10dHandler>(
      config, node,
      [ep, timeout, first_timeout, secret = p.secret] { return connect_shared(ep, timeout, first_timeout, secret); },
      options.clock, server);
}

// The c10d state machine (JoinOp, Liveness) on etcd: no store to host; every agent talks to the etcd cluster, with
// failover between its members. The worker store is still group rank 0's agent's, as with c10d.
std::unique_ptr<Handler> make_etcd(const RendezvousParameters& p, const NodeSpec& node, const HandlerOptions& options) {
  C10dConfig config{p.run_id, p.min_nodes, p.max_nodes, c10d_settings(p)};
  config.backend = "etcd";
  if (options.store) {  // tests: the same handler over a given store
    auto store = options.store;
    return std::make_unique<C10dHandler>(
        config, node, [store] { return store; }, options.clock);
  }
  auto eo = etcd::parse_options(p);
  std::shared_ptr<etcd::RunLease> lease;
  try {
    // The lease's own client answers within a third of the TTL, so a keep-alive never outlasts its period.
    auto lease_options = eo;
    lease_options.request_timeout = std::min<store::Duration>(
        eo.request_timeout, std::max<store::Duration>(eo.lease_ttl / 3, std::chrono::seconds(1)));
    lease = std::make_shared<etcd::RunLease>(std::make_shared<etcd::Client>(lease_options),
                                             etcd::EtcdStore::to_etcd(Keys(p.run_id).lease()), eo.lease_ttl);
  } catch (const store::StoreError& e) {
    throw RendezvousConnectionError(fmt::format("rendezvous '{}': {}", p.run_id, e.what()));
  }
  // A killed agent is noticed member_ttl after its last keep-alive, not when its heartbeats time out.
  if (eo.member_ttl.count() > 0) config.presence = std::make_shared<etcd::MemberLease>(eo, eo.member_ttl);
  const auto timeout = config.settings.read_timeout;
  return std::make_unique<C10dHandler>(
      config, node,
      [eo, lease, timeout] {
        return std::make_shared<etcd::EtcdStore>(std::make_shared<etcd::Client>(eo), lease, timeout);
      },
      options.clock);
}

std::vector<sockaddr_storage> resolve(const std::string& host) {
  std::vector<sockaddr_storage> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &resolved) != 0) return out;
  for (auto* r = resolved; r; r = r->ai_next) {
    sockaddr_storage s{};
    std::memcpy(&s, r->ai_addr, std::min<std::size_t>(r->ai_addrlen, sizeof s));
    out.push_back(s);
  }
  ::freeaddrinfo(resolved);
  return out;
}

}  // namespace

bool same_host(const std::string& a, const std::string& b) {
  if (a == b) return true;
  for (const auto& x : resolve(a))
    for (const auto& y : resolve(b))
      if (same_address(reinterpret_cast<const sockaddr*>(&x), reinterpret_cast<const sockaddr*>(&y))) return true;
  return false;
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == host::name()) return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &resolved) != 0) return false;
  ifaddrs* ifs = nullptr;
  ::getifaddrs(&ifs);
  bool local = false;
  for (auto* r = resolved; r && !local; r = r->ai_next) {
    if (is_loopback(r->ai_addr)) local = true;
    for (auto* i = ifs; i && !local; i = i->ifa_next)
      if (i->ifa_addr && same_address(i->ifa_addr, r->ai_addr)) local = true;
  }
  if (ifs) ::freeifaddrs(ifs);
  ::freeaddrinfo(resolved);
  return local;
}

std::unique_ptr<Handler> create_handler(const RendezvousParameters& p, const NodeSpec& node,
                                        const HandlerOptions& options) {
  if (p.min_nodes < 1 || p.min_nodes > p.max_nodes)
    throw std::invalid_argument(fmt::format("--nnodes {}:{}: need 0 < MIN <= MAX", p.min_nodes, p.max_nodes));
  if (p.backend == "static") return make_static(p, node, options);
  if (p.backend == "c10d") return make_c10d(p, node, options);
  if (p.backend == "etcd" || p.backend == "etcd-v3") return make_etcd(p, node, options);
  if (p.backend == "etcd-v2") throw std::invalid_argument(kEtcdV2Refused);
  throw std::invalid_argument(
      fmt::format("--rdzv-backend '{}' is not supported: use 'c10d', 'etcd' (etcd v3) or 'static'", p.backend));
}

}  // namespace ctrun::rdzv
