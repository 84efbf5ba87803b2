#pragma once
// Rendezvous parameters as torchrun's RendezvousParameters, and the parsers for the flags that feed them:
// --nnodes MIN:MAX, --rdzv-endpoint host[:port] (IPv6 as [addr]:port), --rdzv-conf k1=v1,k2=v2.
// The agent fills RendezvousParameters from its flags and calls create_handler() (factory.hpp).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "store/store.hpp"

namespace ctrun::auth {
class Secret;
}

namespace ctrun::rdzv {

// The well-known ports, written here once: every default elsewhere (the agent, the multi-host launcher, ctstore)
// names these.
inline constexpr std::uint16_t kDefaultC10dPort = 29400;    // torchrun's c10d rendezvous store (and ctstore's)
inline constexpr std::uint16_t kDefaultMasterPort = 29500;  // torchrun's MASTER_PORT (static backend)
inline constexpr std::uint16_t kDefaultEtcdPort = 2379;     // etcd's client port

// --rdzv-backend etcd-v2 (torchrun's etcd backends speak only etcd's v2 API) is refused with this message.
inline constexpr const char* kEtcdV2Refused =
    "--rdzv-backend etcd-v2 is not supported: etcd's v2 API was deprecated in etcd 3.4 and removed in etcd 3.6. "
    "Use --rdzv-backend etcd (the v3 API, any etcd >= 3.4) with the same --rdzv-endpoint";

// The backends --rdzv-backend names: decisions compare these, never the spelling.
enum class Backend { kStatic, kC10d, kEtcd };
// "static", "c10d", "etcd" (alias "etcd-v3"); nullopt for any other name.
inline std::optional<Backend> parse_backend(std::string_view name) {
  if (name == "static") return Backend::kStatic;
  if (name == "c10d") return Backend::kC10d;
  if (name == "etcd" || name == "etcd-v3") return Backend::kEtcd;
  return std::nullopt;
}
// The canonical name of a backend: what parse_backend reads back.
inline std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::kStatic:
      return "static";
    case Backend::kC10d:
      return "c10d";
    case Backend::kEtcd:
      return "etcd";
  }
  return "static";
}
inline bool is_etcd_backend(std::string_view backend) { return parse_backend(backend) == Backend::kEtcd; }

struct RendezvousParameters {
  std::string backend = "static";  // "static", "c10d" or "etcd" ("etcd-v3")
  std::string endpoint;            // host[:port]; static with none -> master_addr:master_port
  std::string run_id = "none";     // --rdzv-id (torchrun's default is the string "none")
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = 0;  // static only (--node-rank)
  // --local-addr as given (empty if not): when set, this node hosts the c10d store only if it names the endpoint's
  // host, so that several agents of one machine (distinct loopback addresses) do not all claim it.
  std::string local_addr;
  std::string master_addr = "127.0.0.1";  // static only, when endpoint is empty
  std::uint16_t master_port = kDefaultMasterPort;
  std::map<std::string, std::string> config;  // --rdzv-conf
  // The job's secret (common/auth/secret.hpp): a c10d store hosted by an agent admits only agents that prove it, and
  // every agent proves it to the store it connects to. The static backend's store is the workers' too (torch's
  // TCPStore clients, which have no handshake): it stays open.
  std::shared_ptr<const auth::Secret> secret;

  // torchrun's get_as_bool: 1/true/t/yes/y and 0/false/f/no/n (case-insensitive); anything else throws.
  std::optional<bool> get_as_bool(const std::string& key) const;
  std::optional<long> get_as_int(const std::string& key) const;
  // Seconds, integer or decimal ("0.5"): ctrun accepts fractions where torchrun needs integers.
  std::optional<store::Duration> get_as_seconds(const std::string& key) const;
};

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const;  // brackets an IPv6 host
};

// Throws std::invalid_argument with a message naming the flag (the agent turns it into exit code 2).
std::pair<int, int> parse_nnodes(std::string_view value);
Endpoint parse_endpoint(std::string_view value, std::uint16_t default_port);
std::map<std::string, std::string> parse_rdzv_conf(std::string_view value);

// The static backend's store (MASTER_ADDR/MASTER_PORT of every worker): --rdzv-endpoint when given, its port
// defaulting to --master-port, else --master-addr:--master-port (torchrun: the endpoint wins, host kept as given).
Endpoint static_endpoint(const RendezvousParameters& params);

// The c10d backend's settings, from --rdzv-conf with torchrun's defaults; validated.
struct C10dSettings {
  store::Duration join_timeout = std::chrono::seconds(600);
  store::Duration last_call_timeout = std::chrono::seconds(30);
  store::Duration close_timeout = std::chrono::seconds(30);
  store::Duration keep_alive_interval = std::chrono::seconds(5);
  int keep_alive_max_attempt = 3;
  store::Duration read_timeout = std::chrono::seconds(60);
  std::optional<bool> is_host;  // unset: host iff the endpoint names this machine
};
C10dSettings c10d_settings(const RendezvousParameters& params);

}  // namespace ctrun::rdzv
