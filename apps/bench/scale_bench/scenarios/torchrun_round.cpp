// The peer: Debian torch's own c10d rendezvous (DynamicRendezvousHandler + C10dRendezvousBackend), N agents as
// threads of one Python process over one torch TCPStore (torchrun_rdzv.py), one round, at --torch-sizes (it does
// not finish 256 agents here). Its time runs from the last agent's start to every agent holding its round.
#include <cstdio>

#include <fmt/format.h>

#include "apps/bench/scale_bench/scenario.hpp"

namespace ctrun::scale_bench {

std::vector<Row> torchrun_rounds(const BenchOptions& options) {
  std::vector<Row> rows;
  std::string args;
  for (int n : options.torch_sizes)
    if (n > 0) args += fmt::format(" {}", n);
  if (args.empty()) return rows;
  const auto cmd = fmt::format("{} {}{}", CTRUN_TORCH_PYTHON, SCALE_BENCH_TORCHRUN_PEER, args);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return rows;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    int n = 0;
    double s = 0;
    unsigned long long bytes = 0, ops = 0;
    if (std::sscanf(line, "torchrun N=%d seconds=%lf bytes=%llu ops=%llu", &n, &s, &bytes, &ops) != 4) continue;
    Row r;
    r.scenario = "round (torchrun's rendezvous)";
    r.nodes = n;
    r.seconds = s;
    r.note = fmt::format("{} store bytes/agent, {:.1f} store ops/agent (agents: threads of one Python)", bytes / n,
                         static_cast<double>(ops) / n);
    rows.push_back(r);
  }
  ::pclose(p);
  return rows;
}

}  // namespace ctrun::scale_bench
