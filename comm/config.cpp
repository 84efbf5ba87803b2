#include "comm/config.hpp"

#include <charconv>
#include <cstdlib>
#include <limits>

#include "comm/options.hpp"
#include "comm/types.hpp"
#include "common/worker_env.hpp"
#include "common/text.hpp"

namespace ctrun::comm {
namespace {

// A setting's non-negative integer <= max; `what` names the unit in the error ("a byte count", "an integer").
std::size_t parse_setting(const char* name, const std::string& v, std::size_t max, const char* what) {
  if (auto n = parse_unsigned(v, max)) return *n;
  throw InvalidArgumentError(std::string(name) + "='" + v + "': expected " + what + " from 0 to " +
                             std::to_string(max));
}

std::size_t parse_bytes(const char* name, const std::string& v, std::size_t max) {
  return parse_setting(name, v, max, "a byte count");
}

std::size_t parse_count(const char* name, const std::string& v, std::size_t max) {
  return parse_setting(name, v, max, "an integer");
}

void one_of(const char* name, const std::string& v, std::initializer_list<std::string_view> allowed) {
  for (auto a : allowed)
    if (v == a) return;
  throw InvalidArgumentError(std::string(name) + "='" + v + "': expected one of " +
                             text::join_with(allowed, ", ", [](std::string_view a) { return a; }));
}

constexpr std::size_t kGiB = std::size_t{1} << 30;

// The table. Defaults here are the documented ones and Config's: its constructor applies them.
constexpr Setting kSettings[] = {
    {"CTRUN_COMM_BACKEND", "cpu",
     "backend of groups whose options leave `backend` at \"cpu\": `cpu` or `nccl` (CUDA builds)",
     [](Config& c, const std::string& v) { c.backend = v; }},
    {"CTRUN_COMM_TRANSPORT", "auto",
     "cpu backend transport: `auto` (shm when every rank shares this host's IPC namespace, else tcp), `tcp`, `shm`",
     [](Config& c, const std::string& v) {
       one_of("CTRUN_COMM_TRANSPORT", v, {"auto", "tcp", "shm"});
       c.transport = v;
     }},
    {"CTRUN_COMM_ALGO", "",
     "algorithm overrides: `ring` (every op that has it) or `all_reduce=ring,broadcast=tree`; empty: the table",
     [](Config& c, const std::string& v) { c.algorithm = v; }},
    {"CTRUN_COMM_HOST", "",
     "cpu backend, transport `auto`: this rank's host identity; ranks with equal ones pass messages through shared "
     "memory, the others over tcp (two levels when a group spans hosts); empty: host name, boot id and the IPC, "
     "mount and pid namespaces (the ranks that can map each other's /dev/shm segments)",
     [](Config& c, const std::string& v) { c.host = v; }},
    {"CTRUN_COMM_NET_LATENCY_US", "0",
     "cost model: one message's latency between hosts in microseconds; 0: measured when a two-level group is "
     "created (a few messages between the first two hosts)",
     [](Config& c, const std::string& v) {
       c.net_latency_us = parse_count("CTRUN_COMM_NET_LATENCY_US", v, 10'000'000);
     }},
    {"CTRUN_COMM_NET_MBPS", "0",
     "cost model: bandwidth between hosts in MB/s (10^6 bytes) per rank; 0: measured with the latency",
     [](Config& c, const std::string& v) { c.net_mbps = parse_count("CTRUN_COMM_NET_MBPS", v, 100'000'000); }},
    {"CTRUN_COMM_SHM_LATENCY_US", "3", "cost model: one shared-memory step's latency inside a host in microseconds",
     [](Config& c, const std::string& v) {
       c.shm_latency_us = parse_count("CTRUN_COMM_SHM_LATENCY_US", v, 10'000'000);
     }},
    {"CTRUN_COMM_SHM_MBPS", "4000", "cost model: copy bandwidth of a shared-memory step inside a host in MB/s (min 1)",
     [](Config& c, const std::string& v) {
       c.shm_mbps = std::max<std::size_t>(1, parse_count("CTRUN_COMM_SHM_MBPS", v, 100'000'000));
     }},
    {"CTRUN_COMM_IFADDR", "",
     "tcp: address this rank advertises (default: the local address of the route to MASTER_ADDR, else 127.0.0.1)",
     [](Config& c, const std::string& v) { c.ifaddr = v; }},
    {"CTRUN_COMM_CHUNK_BYTES", "0",
     "pipelining unit of ring and chain algorithms (min 64); 0: 1 MiB over tcp, 128 KiB over shm",
     [](Config& c, const std::string& v) {
       const std::size_t n = parse_bytes("CTRUN_COMM_CHUNK_BYTES", v, kGiB);
       c.chunk_bytes = n == 0 ? 0 : std::max<std::size_t>(n, 64);
     }},
    {"CTRUN_COMM_SHM_RING_BYTES", "1048576",
     "shm: message ring per sender (rounded up to a power of two, min 64 KiB; must agree on every rank)",
     [](Config& c, const std::string& v) {
       const std::size_t n = parse_bytes("CTRUN_COMM_SHM_RING_BYTES", v, kGiB);
       std::size_t p = 64 << 10;
       while (p < n) p <<= 1;
       c.shm_ring_bytes = p;
     }},
    {"CTRUN_COMM_SHM_WORKSPACE_BYTES", "262144",
     "shm: one workspace slot of the shm algorithms, the unit they pipeline in (min 1 KiB, rounded up to 64 B)",
     [](Config& c, const std::string& v) {
       const std::size_t n = parse_bytes("CTRUN_COMM_SHM_WORKSPACE_BYTES", v, kGiB);
       c.shm_workspace_bytes = (std::max<std::size_t>(n, 1024) + 63) / 64 * 64;
     }},
    {"CTRUN_COMM_SHM_SLOTS", "8",
     "shm: workspace slots per rank (1 to 64): how many pieces a rank may run ahead of the slowest reader of its "
     "slots before it waits (must agree on every rank)",
     [](Config& c, const std::string& v) {
       const std::size_t n = parse_bytes("CTRUN_COMM_SHM_SLOTS", v, 64);
       if (n == 0) throw InvalidArgumentError("CTRUN_COMM_SHM_SLOTS='" + v + "': expected 1 to 64");
       c.shm_slots = static_cast<int>(n);
     }},
    {"CTRUN_COMM_SHM_STREAM_BYTES", "4194304",
     "shm: the shm algorithms write outputs of at least this many bytes with non-temporal (streaming) stores, "
     "which skip reading the destination first (too large to stay in the caches anyway); 0: always",
     [](Config& c, const std::string& v) {
       c.shm_stream_bytes = parse_bytes("CTRUN_COMM_SHM_STREAM_BYTES", v, std::size_t{1} << 62);
     }},
    {"CTRUN_COMM_SHM_PIPELINE_BYTES", "4194304",
     "shm: ops moving at least this many bytes per rank run the pipelined shm algorithms (per-slot flags), "
     "smaller ones the barrier variants (one all-rank barrier per piece); 0: always pipelined (must agree on "
     "every rank)",
     [](Config& c, const std::string& v) {
       c.shm_pipeline_bytes = parse_bytes("CTRUN_COMM_SHM_PIPELINE_BYTES", v, std::size_t{1} << 62);
     }},
    {"CTRUN_COMM_SHM_CORES", "0",
     "shm: cores the group's ranks share (0: the CPUs this process may run on); with more ranks than that, waits "
     "wake every waiter and all_reduce uses one all-rank barrier per piece (must agree on every rank)",
     [](Config& c, const std::string& v) {
       c.shm_cores = static_cast<int>(parse_bytes("CTRUN_COMM_SHM_CORES", v, 1 << 20));
     }},
    {"CTRUN_COMM_SHM_DIRECT", "1",
     "shm: `1` lets ranks copy straight out of each other's buffers (process_vm_readv, probed at group creation: "
     "off where seccomp, Yama or different users deny it) for the `shm_direct` algorithms; `0`: never",
     [](Config& c, const std::string& v) {
       one_of("CTRUN_COMM_SHM_DIRECT", v, {"0", "1"});
       c.shm_direct = v == "1";
     }},
    {"CTRUN_COMM_TCP_BUFFER_BYTES", "0",
     "tcp: SO_SNDBUF/SO_RCVBUF of every socket (capped by net.core.{w,r}mem_max); 0: kernel autotuning (as gloo)",
     [](Config& c, const std::string& v) { c.tcp_buffer_bytes = parse_bytes("CTRUN_COMM_TCP_BUFFER_BYTES", v, kGiB); }},
    {"CTRUN_COMM_TCP_LOWAT_BYTES", "0",
     "tcp: cap of SO_RCVLOWAT set while a payload is half received (max 1 MiB); 0: off",
     [](Config& c, const std::string& v) {
       c.tcp_lowat_bytes = parse_bytes("CTRUN_COMM_TCP_LOWAT_BYTES", v, std::size_t{1} << 20);
     }},
    {"CTRUN_COMM_DEVICE", "",
     "nccl: CUDA device of the group (default: the current device if not 0, else LOCAL_RANK % device count)",
     [](Config& c, const std::string& v) {
       c.device = v.empty() ? -1 : static_cast<int>(parse_count("CTRUN_COMM_DEVICE", v, 1023));
     }},
    {"CTRUN_COMM_NCCL_BLOCKING", "0",
     "nccl: `1` creates blocking communicators (NCCL's default; a hung peer then blocks the caller inside NCCL); "
     "`0`: non-blocking ones polled against the group's timeout",
     [](Config& c, const std::string& v) {
       one_of("CTRUN_COMM_NCCL_BLOCKING", v, {"0", "1"});
       c.nccl_blocking = v == "1";
     }},
    {"CTRUN_COMM_PROGRESS", "1",
     "`1`: record each op's progress (sequence number, op, bytes, since when, which peer it waits for) in the "
     "region ctrun names in CTRUN_PROGRESS_FILE, for its hang and straggler detection; `0`: never (nothing is "
     "recorded outside ctrun anyway)",
     [](Config& c, const std::string& v) {
       one_of("CTRUN_COMM_PROGRESS", v, {"0", "1"});
       c.progress = v == "1";
     }},
};

const Setting* find(const std::string& name) {
  for (const auto& s : kSettings) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

void apply_all(Config& c, const std::map<std::string, std::string>& settings, const char* where) {
  for (const auto& [name, value] : settings) {
    const Setting* s = find(name);
    if (!s) {
      throw InvalidArgumentError(std::string("unknown comm setting '") + name + "' in " + where + "; known: " +
                                 text::join_with(kSettings, ", ", [](const Setting& k) { return k.name; }));
    }
    s->apply(c, value);
  }
}

}  // namespace

std::span<const Setting> settings() { return kSettings; }

std::optional<std::size_t> parse_unsigned(std::string_view text, std::size_t max) {
  const auto n = text::parse_int<std::size_t>(text);
  if (!n || *n > max) return std::nullopt;
  return n;
}

WorkerEnvironment WorkerEnvironment::from_process() {
  namespace we = worker_env;
  auto get = [](const char* name) { return we::get(name).value_or(""); };
  WorkerEnvironment env;
  env.rank = get(we::kRank);
  env.world_size = get(we::kWorldSize);
  env.master_addr = get(we::kMasterAddr);
  env.master_port = get(we::kMasterPort);
  env.store_relay = get(we::kStoreRelay);
  env.use_agent_store = get(we::kUseAgentStore) == we::kTrue;
  env.restart_count = get(we::kRestartCount);
  const auto number = [&](const char* name) -> std::optional<int> {
    if (auto n = parse_unsigned(get(name), std::numeric_limits<int>::max())) return static_cast<int>(*n);
    return std::nullopt;
  };
  env.local_rank = number(we::kLocalRank);
  env.local_world_size = number(we::kLocalWorldSize);
  env.group_rank = number(we::kGroupRank);
  env.group_world_size = number(we::kGroupWorldSize);
  return env;
}

Config::Config() {
  for (const auto& s : kSettings) s.apply(*this, s.default_value);
}

std::size_t Config::chunk_bytes_for(const std::string& transport_name) const {
  if (chunk_bytes) return chunk_bytes;
  return transport_name == "tcp" ? std::size_t{1} << 20 : std::size_t{128} << 10;
}

Config Config::from_settings(const std::map<std::string, std::string>& settings) {
  Config c;
  apply_all(c, settings, "the settings");
  return c;
}

Config Config::resolve(const ProcessGroupOptions& options) {
  Config c;
  for (const auto& s : kSettings) {
    const char* v = std::getenv(s.name);
    if (v && *v) s.apply(c, v);
  }
  c.worker = WorkerEnvironment::from_process();
  apply_all(c, options.settings, "ProcessGroupOptions::settings");
  if (options.backend != "cpu") c.backend = options.backend;
  if (!options.transport.empty() && options.transport != "auto") c.transport = options.transport;
  if (!options.algorithm.empty()) c.algorithm = options.algorithm;
  if (!options.listen_host.empty()) c.ifaddr = options.listen_host;
  return c;
}

std::string settings_markdown() {
  std::string out = "| setting | default | what it does |\n|---|---|---|\n";
  for (const auto& s : kSettings) {
    out += std::string("| `") + s.name + "` | " + (*s.default_value ? std::string("`") + s.default_value + "`" : "") +
           " | " + s.doc + " |\n";
  }
  return out;
}

}  // namespace ctrun::comm
