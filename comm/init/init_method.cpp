#include "comm/init/init_method.hpp"

#include <map>

#include "common/worker_env.hpp"
#include "store/file_store.hpp"
#include "store/prefix_store.hpp"
#include "store/server.hpp"
#include "store/tcp_store.hpp"

namespace ctrun::comm::init {
namespace {

int parse_int(const std::string& text, const std::string& what) {
  if (auto v = parse_unsigned(text, std::size_t{1} << 30)) return static_cast<int>(*v);
  throw InvalidArgumentError("comm init: " + what + " must be a non-negative integer, got '" + text + "'");
}

// `given`, else the worker environment's value `v` of variable `name`.
int from_env(int given, const std::string& v, const char* name) {
  if (given >= 0) return given;
  if (v.empty()) {
    throw InvalidArgumentError(std::string("comm init: env:// needs ") + name +
                               " in the environment (launch with ctrun/torchrun, or pass rank and world_size)");
  }
  return parse_int(v, name);
}

// "?rank=1&world_size=4" -> map
std::map<std::string, std::string> parse_query(const std::string& query) {
  std::map<std::string, std::string> out;
  std::size_t pos = 0;
  while (pos < query.size()) {
    const auto amp = query.find('&', pos);
    const std::string item = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    const auto eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  return out;
}

std::uint16_t parse_port(const std::string& text) {
  const int port = parse_int(text, "port");
  if (port == 0 || port > 65535) throw InvalidArgumentError("comm init: port out of range: " + text);
  return static_cast<std::uint16_t>(port);
}

// Rank 0 hosts the store server (unless told another process already does); everyone connects as a client.
void host_or_connect(Rendezvous& rv, const std::string& host, std::uint16_t port, bool host_server, Duration timeout) {
  if (host_server && rv.rank == 0) {
    store::ServerOptions so;
    so.host = "0.0.0.0";  // as torch's TCPStore: peers may come from other hosts
    so.port = port;
    auto server = std::make_shared<store::Server>(so);
    server->start();
    rv.keepalive = server;
  }
  store::TcpStoreOptions co;
  co.host = host;
  co.port = port;
  co.timeout = timeout;
  co.connect_timeout = timeout;
  rv.store = std::make_shared<store::TcpStore>(co);
}

void check_rank(int rank, int world_size) {
  if (world_size < 1 || rank >= world_size) {
    throw InvalidArgumentError("comm init: rank " + std::to_string(rank) + " is out of range for world size " +
                               std::to_string(world_size));
  }
}

}  // namespace

Rendezvous rendezvous(const std::string& init_method, int rank, int world_size, Duration timeout,
                      const WorkerEnvironment& env) {
  Rendezvous rv;
  if (init_method.rfind("env://", 0) == 0) {
    rv.rank = from_env(rank, env.rank, worker_env::kRank);
    rv.world_size = from_env(world_size, env.world_size, worker_env::kWorldSize);
    const std::string& addr = env.master_addr;
    const std::string& port = env.master_port;
    if (addr.empty() || port.empty()) {
      throw InvalidArgumentError("comm init: env:// needs MASTER_ADDR and MASTER_PORT in the environment");
    }
    // As torch: under an elastic agent the agent already hosts the store, and every restart attempt gets its
    // own key space so a stale key from a failed attempt can never be read.
    check_rank(rv.rank, rv.world_size);
    // Under ctrun with several nodes the node's store relay stands for the agent's store
    // (agent/launch/store_relay.hpp).
    const auto relay = env.use_agent_store ? worker_env::relay_endpoint(env.store_relay) : std::nullopt;
    if (relay)
      host_or_connect(rv, relay->first, parse_port(relay->second), false, timeout);
    else
      host_or_connect(rv, addr, parse_port(port), !env.use_agent_store, timeout);
    if (env.use_agent_store) {
      const std::string& attempt = env.restart_count;
      rv.store = std::make_shared<store::PrefixStore>(
          worker_env::attempt_prefix(attempt.empty() ? 0 : parse_int(attempt, worker_env::kRestartCount)), rv.store);
    }
    rv.prefix = "ctcomm";
  } else if (init_method.rfind("tcp://", 0) == 0) {
    std::string rest = init_method.substr(6);
    const auto q = rest.find('?');
    const auto query = parse_query(q == std::string::npos ? "" : rest.substr(q + 1));
    rest = rest.substr(0, q);
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos)
      throw InvalidArgumentError("comm init: expected tcp://host:port, got " + init_method);
    std::string host = rest.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    rv.rank = rank >= 0 ? rank : query.count("rank") ? parse_int(query.at("rank"), "rank") : -1;
    rv.world_size = world_size >= 0             ? world_size
                    : query.count("world_size") ? parse_int(query.at("world_size"), "world_size")
                                                : -1;
    if (rv.rank < 0 || rv.world_size < 0) {
      throw InvalidArgumentError("comm init: tcp:// needs rank and world_size (arguments or ?rank=&world_size=)");
    }
    check_rank(rv.rank, rv.world_size);
    host_or_connect(rv, host, parse_port(rest.substr(colon + 1)), true, timeout);
    rv.prefix = "ctcomm";
  } else if (init_method.rfind("file://", 0) == 0) {
    std::string rest = init_method.substr(7);
    const auto q = rest.find('?');
    const auto query = parse_query(q == std::string::npos ? "" : rest.substr(q + 1));
    const std::string path = rest.substr(0, q);
    rv.rank = rank >= 0 ? rank : query.count("rank") ? parse_int(query.at("rank"), "rank") : -1;
    rv.world_size = world_size >= 0             ? world_size
                    : query.count("world_size") ? parse_int(query.at("world_size"), "world_size")
                                                : -1;
    if (rv.rank < 0 || rv.world_size < 0 || path.empty()) {
      throw InvalidArgumentError("comm init: file:///path needs a path, rank and world_size");
    }
    rv.store = std::make_shared<store::FileStore>(path, timeout);
    rv.prefix = "ctcomm";
  } else {
    throw InvalidArgumentError("comm init: unsupported init_method '" + init_method +
                               "' (use env://, tcp://host:port or file:///path)");
  }
  check_rank(rv.rank, rv.world_size);
  return rv;
}

}  // namespace ctrun::comm::init
