#pragma once
// A TCPStore server the benchmark drives: ctstore or torch's own server, each a child process on
// 127.0.0.1 whose resident memory can be read from /proc.

#include <cstdint>
#include <memory>
#include <string>

#include "tests/support/child_process.hpp"

namespace ctrun::bench {

struct ServerUnderTest {
  std::string name;
  std::unique_ptr<test::ChildProcess> process;  // killed and reaped when this is destroyed
  std::uint16_t port = 0;

  // VmRSS of the server process in KiB (/proc/PID/status).
  long rss_kib() const;
  // User + system CPU time the server process has used (/proc/PID/stat): separates the server's cost from
  // the client's when both share the machine's cores.
  double cpu_seconds() const;
};

// build/bin/ctstore --host 127.0.0.1 --port 0; the port comes from its "listening" log line.
ServerUnderTest start_ctstore(const std::string& ctstore_path);

// `store_bench --serve-floor` (floor_server.hpp): the physical floor, legacy ADD only.
ServerUnderTest start_floor(const std::string& store_bench_path);

// python3 torch_store_server.py PORT (../shared/peers): torch's TCPStore server; waits for "ready".
ServerUnderTest start_torch_server(const std::string& python, const std::string& script);

}  // namespace ctrun::bench
