#include "gloo_peer.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "spawn.hpp"

namespace ctrun::bench {

std::map<std::pair<std::string, std::size_t>, Row> run_gloo(int nproc, const std::vector<std::string>& ops,
                                                            const std::vector<std::size_t>& sizes, std::string* why) {
  std::map<std::pair<std::string, std::size_t>, Row> rows;
  const std::string python = "/usr/bin/python3";
  const std::string wrapper = std::string(CTRUN_SHARED_DIR) + "/interop/torchrun_py311.py";
  const std::string script = std::string(CTBENCH_SOURCE_DIR) + "/torch_gloo_bench.py";
  if (!std::filesystem::exists(python) || !std::filesystem::exists(wrapper)) {
    *why = "no " + python + " or " + wrapper;
    return rows;
  }
  std::string op_list;
  for (const auto& op : ops) op_list += (op_list.empty() ? "" : ",") + op;
  std::string size_list;
  for (auto s : sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(s);
  const std::string cmd = "GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 timeout -k 10 600 " + python + " " + wrapper +
                          " --standalone --nproc_per_node=" + std::to_string(nproc) + " --monitor_interval 0.1 " +
                          script + " " + op_list + " " + size_list + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *why = "popen failed";
    return rows;
  }
  char line[512];
  while (fgets(line, sizeof line, p)) {
    char op[64];
    Row row;
    if (std::sscanf(line, "op=%63s bytes=%zu time_us=%lf algbw=%lf busbw=%lf", op, &row.bytes, &row.time_us, &row.algbw,
                    &row.busbw) == 5) {
      row.op = op;
      rows[{row.op, row.bytes}] = row;
    }
  }
  const int rc = pclose(p);
  if (rows.empty()) *why = "the torch gloo run printed nothing (exit status " + std::to_string(rc) + ")";
  return rows;
}

}  // namespace ctrun::bench
