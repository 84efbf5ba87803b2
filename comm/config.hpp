#pragma once
// comm's settings table (UCX style): every CTRUN_COMM_* setting is declared once, in config.cpp, with its default
// and its documentation. A group resolves them once, when it is created, into a Config that its backend and
// transports carry: built-in default < environment < ProcessGroupOptions::settings < the typed options fields
// (backend, transport, algorithm, listen_host) when they differ from their defaults. The same resolution reads
// the worker environment comm uses (common/worker_env.hpp's contract) into Config::worker. Nothing else in comm
// reads the environment, and nothing caches it in statics, so tests tune comm through options.

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ctrun::comm {

struct ProcessGroupOptions;

// The worker environment as an agent (ctrun, torchrun) sets it, read once per group. Values are kept as found
// where env:// parses them (it reports a malformed one); everything else receives them from here.
struct WorkerEnvironment {
  std::string rank;               // RANK
  std::string world_size;         // WORLD_SIZE
  std::string master_addr;        // MASTER_ADDR: env://'s store, and the tcp transport's route to advertise
  std::string master_port;        // MASTER_PORT
  std::string store_relay;        // CTRUN_STORE_RELAY: this node's store relay, which env:// uses in agent-store mode
  bool use_agent_store = false;   // TORCHELASTIC_USE_AGENT_STORE is "True": the agent hosts the store
  std::string restart_count;      // TORCHELASTIC_RESTART_COUNT: the attempt's keyspace
  std::optional<int> local_rank;  // LOCAL_RANK (the nccl device rule); none when unset or not an integer
  // The agent's host layout (none when unset or not an integer): this rank's host is the agent GROUP_RANK of
  // GROUP_WORLD_SIZE, which runs LOCAL_WORLD_SIZE ranks, RANK - LOCAL_RANK onwards (comm/cpu/transports.cpp).
  std::optional<int> local_world_size;  // LOCAL_WORLD_SIZE
  std::optional<int> group_rank;        // GROUP_RANK
  std::optional<int> group_world_size;  // GROUP_WORLD_SIZE

  // This process's environment.
  static WorkerEnvironment from_process();
};

// Every field's default comes from the settings table (the default constructor applies it), never from here.
struct Config {
  Config();

  std::string backend;
  std::string transport;
  std::string algorithm;         // override spec, see comm/algorithms/selection.hpp
  std::string host;              // host identity (empty: detected), see make_transport in cpu_backend.cpp
  std::size_t net_latency_us{};  // cost model: between hosts (0: measured)
  std::size_t net_mbps{};        // cost model: between hosts (0: measured)
  std::size_t shm_latency_us{};  // cost model: inside a host
  std::size_t shm_mbps{};        // cost model: inside a host
  std::string ifaddr;            // tcp: advertised address (empty: route to MASTER_ADDR, else 127.0.0.1)
  int device{};                  // nccl: CUDA device (-1: the backend's rule)
  bool nccl_blocking{};          // nccl: blocking communicators (NCCL's default) instead of polled non-blocking
  std::size_t chunk_bytes{};     // pipelining unit of ring/chain (0: per transport, see chunk_bytes_for)
  std::size_t shm_ring_bytes{};
  std::size_t shm_workspace_bytes{};  // shm: one slot of the pipelined shm algorithms
  int shm_slots{};                    // shm: slots per rank
  int shm_cores{};                    // shm: cores the ranks share (0: this machine's online CPUs)
  std::size_t shm_pipeline_bytes{};   // shm: ops this large use the pipelined algorithms
  std::size_t shm_stream_bytes{};     // shm: outputs this large are written with streaming stores
  bool shm_direct{};  // shm: let ranks read each other's buffers (process_vm_readv) where the kernel allows
  std::size_t tcp_buffer_bytes{};  // 0: kernel autotuning
  std::size_t tcp_lowat_bytes{};
  bool progress{};           // progress records for the agent's hang detection (common/progress.hpp)
  WorkerEnvironment worker;  // resolve(): this process's; from_settings() and Config(): empty

  // The pipelining unit over `transport` ("tcp" or "shm"): chunk_bytes when set, else 1 MiB over tcp (every
  // chunk costs syscalls and wake-ups on both sides), 128 KiB over shm.
  std::size_t chunk_bytes_for(const std::string& transport_name) const;

  // Resolves every setting and the worker environment (see above). Throws InvalidArgumentError naming the
  // setting on a bad value or an unknown CTRUN_COMM_* name in options.settings.
  static Config resolve(const ProcessGroupOptions& options);
  // The settings from explicit name -> value pairs over the built-in defaults (no environment): tests.
  static Config from_settings(const std::map<std::string, std::string>& settings);
};

// comm's one integer parser: `text` as a non-negative decimal integer (digits only) of at most `max`, else
// nullopt.
std::optional<std::size_t> parse_unsigned(std::string_view text, std::size_t max);

struct Setting {
  const char* name;                                         // CTRUN_COMM_...
  const char* default_value;                                // as documented ("" = unset)
  const char* doc;                                          // one line, rendered into docs/comm.md
  void (*apply)(Config& config, const std::string& value);  // parses and stores; throws on a bad value
};

// The table, in documentation order.
std::span<const Setting> settings();

// docs/comm.md's settings table, generated from settings() (checked by tests/comm/tables_test.cpp).
std::string settings_markdown();

}  // namespace ctrun::comm
