#pragma once
// comm's settings table (UCX style): every CTRUN_COMM_* setting is declared once, in config.cpp, with its default
// and its documentation. A group resolves them once, when it is created, into a Config that its backend and
// transports carry: built-in default < environment < ProcessGroupOptions::settings < the typed options fields
// (backend, transport, algorithm, listen_host) when they differ from their defaults. Nothing else in comm reads
// CTRUN_COMM_* variables, and nothing caches them in statics, so tests tune comm through options.

#include <cstddef>
#include <map>
#include <span>
#include <string>

namespace ctrun::comm {

struct ProcessGroupOptions;

struct Config {
  std::string backend = "cpu";
  std::string transport = "auto";
  std::string algorithm;  // override spec, see comm/algorithms/selection.hpp
  std::string ifaddr;     // tcp: advertised address (empty: route to MASTER_ADDR, else 127.0.0.1)
  int device = -1;        // nccl: CUDA device (-1: the backend's rule)
  bool nccl_blocking = false;  // nccl: blocking communicators (NCCL's default) instead of polled non-blocking
  std::size_t chunk_bytes = 0;  // pipelining unit of ring/chain (0: per transport, see chunk_bytes_for)
  std::size_t shm_ring_bytes = 1u << 20;
  std::size_t shm_workspace_bytes = 256u << 10;  // shm: one slot of the pipelined shm algorithms
  int shm_slots = 8;                             // shm: slots per rank
  int shm_cores = 0;
  std::size_t shm_pipeline_bytes = 4u << 20;  // shm: ops this large use the pipelined algorithms  // shm: cores the ranks share (0: this machine's online CPUs)
  std::size_t shm_stream_bytes = 4u << 20;  // shm: outputs this large are written with streaming stores
  bool shm_direct = true;  // shm: let ranks read each other's buffers (process_vm_readv) where the kernel allows
  std::size_t tcp_buffer_bytes = 0;  // kernel autotuning
  std::size_t tcp_lowat_bytes = 0;
  bool progress = true;  // progress records for the agent's hang detection (common/progress.hpp)

  // The pipelining unit over `transport` ("tcp" or "shm"): chunk_bytes when set, else 1 MiB over tcp (every
  // chunk costs syscalls and wake-ups on both sides), 128 KiB over shm.
  std::size_t chunk_bytes_for(const std::string& transport_name) const;

  // Resolves every setting (see above). Throws InvalidArgumentError naming the setting on a bad value or an
  // unknown CTRUN_COMM_* name in options.settings.
  static Config resolve(const ProcessGroupOptions& options);
  // The same from explicit name -> value pairs over the built-in defaults (no environment): tests.
  static Config from_settings(const std::map<std::string, std::string>& settings);
};

struct Setting {
  const char* name;           // CTRUN_COMM_...
  const char* default_value;  // as documented ("" = unset)
  const char* doc;            // one line, rendered into docs/comm.md
  void (*apply)(Config& config, const std::string& value);  // parses and stores; throws on a bad value
};

// The table, in documentation order.
std::span<const Setting> settings();

// docs/comm.md's settings table, generated from settings() (checked by tests/comm/tables_test.cpp).
std::string settings_markdown();

}  // namespace ctrun::comm
