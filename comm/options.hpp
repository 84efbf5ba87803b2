#pragma once
// Options of process groups and point-to-point op descriptors, shared by ProcessGroup and every Backend.

#include <map>
#include <string>

#include "comm/buffer.hpp"
#include "comm/types.hpp"

namespace ctrun::comm {

struct ProcessGroupOptions {
  // "cpu" (TCP + shared memory) or "nccl" (CUDA builds with a GPU). Env CTRUN_COMM_BACKEND overrides the default.
  std::string backend = "cpu";
  // Every op of the group fails with TimeoutError after this long (a dead or stalled peer never hangs a rank).
  Duration timeout = kDefaultTimeout;
  // cpu backend: "auto" (shm when every rank is on this host, else tcp), "tcp" or "shm".
  // Env CTRUN_COMM_TRANSPORT overrides "auto".
  std::string transport = "auto";
  // cpu backend: force one algorithm per op, e.g. "all_reduce=ring,broadcast=tree" or just "ring" for every op
  // that has it; empty -> the size-based table, or env CTRUN_COMM_ALGO. See docs/comm.md.
  std::string algorithm;
  // tcp transport: address peers connect to (default: this host's name resolved, else MASTER_ADDR's interface,
  // else 127.0.0.1). Env CTRUN_COMM_IFADDR overrides.
  std::string listen_host;
  // Any CTRUN_COMM_* setting by name (comm/config.cpp's table, docs/comm.md), overriding the environment for
  // this group, e.g. {{"CTRUN_COMM_CHUNK_BYTES", "1024"}}. The fields above override these.
  std::map<std::string, std::string> settings;
};

// recv/irecv's source for a receive from whichever rank sends first (torch's recv without src, MPI_ANY_SOURCE).
inline constexpr int kAnySource = -1;

// One element of a batched send/recv (torch's P2POp + batch_isend_irecv).
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  Buffer buffer;
  int peer = 0;  // group rank (kAnySource: a receive from any rank, outside batches only)
  int tag = 0;

  static P2POp send(Buffer b, int dst, int tag = 0) { return {Kind::kSend, b, dst, tag}; }
  static P2POp recv(Buffer b, int src, int tag = 0) { return {Kind::kRecv, b, src, tag}; }
};

}  // namespace ctrun::comm
