// comm_sim: the cost model two-level groups choose their cross-host algorithm with, evaluated for jobs too
// large for this machine. For each rank count (ranks = nodes x ranks per node) and message size it prints the
// predicted time of an op (all_reduce by default) with each cross-host algorithm inside comm's two-level scheme and
// the model's choice. With --algorithm, one line per point for that algorithm (or the choice), for scripts that
// set a prediction beside a measured time (scripts/bench/two_level_compare.sh):
//   predict <op> <ranks> <per-rank bytes> <algorithm> <microseconds>
//   comm_sim [--ranks-per-node 8] [--latency-us 5] [--gbps 100] [--shm-us 3] [--shm-mbps 4000]
//            [--ranks 2,8,...] [--bytes 8,...] [--op all_reduce] [--algorithm NAME|choice]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "comm/algorithms/cost_model.hpp"
#include "comm/algorithms/two_level.hpp"

using namespace ctrun::comm::algorithms;

namespace {

std::vector<std::size_t> parse_list(const char* s) {
  std::vector<std::size_t> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == 0) {
      if (!cur.empty()) out.push_back(std::strtoull(cur.c_str(), nullptr, 10));
      cur.clear();
      if (*p == 0) break;
    } else {
      cur += *p;
    }
  }
  return out;
}

std::string size_text(std::size_t b) {
  if (b >= (1u << 30)) return std::to_string(b >> 30) + "G";
  if (b >= (1u << 20)) return std::to_string(b >> 20) + "M";
  if (b >= (1u << 10)) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

std::string time_text(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

[[noreturn]] void usage() {
  std::string ops;  // the ops that run in two levels
  for (const auto& r : two_level_table()) {
    if (!ops.empty()) ops += '|';
    ops += op_name(r.op);
  }
  std::fprintf(stderr,
               "usage: comm_sim [--ranks-per-node N] [--latency-us US] [--gbps G] [--shm-us US] [--shm-mbps M]\n"
               "                [--ranks a,b,...] [--bytes a,b,...] [--chunk-bytes B] [--algorithm NAME|choice]\n"
               "                [--op %s]\n",
               ops.c_str());
  std::exit(2);
}

OpKind parse_op(const std::string& name) {
  for (const auto& r : two_level_table()) {
    if (name == op_name(r.op)) return r.op;
  }
  usage();
}

Shape shape_of(std::size_t ranks, int per_node, std::size_t bytes, std::size_t chunk) {
  const auto p = static_cast<std::size_t>(per_node);
  return Shape{static_cast<int>((ranks + p - 1) / p), static_cast<int>(std::min(ranks, p)), bytes, chunk};
}

int print_points(OpKind op, const std::string& name, const std::vector<std::size_t>& ranks, int per_node,
                 const std::vector<std::size_t>& bytes, std::size_t chunk, const LinkCost& net, const LinkCost& local) {
  // The forced algorithm, checked once against the op's rows.
  std::optional<Algorithm> forced;
  if (name != "choice") {
    try {
      forced = parse_algorithm(name);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "comm_sim: %s\n", e.what());
      return 2;
    }
    if (!cost_row(op, *forced)) {
      std::fprintf(stderr, "comm_sim: %s has no cost row '%s'\n", op_name(op), name.c_str());
      return 2;
    }
  }
  for (std::size_t n : ranks) {
    for (std::size_t b : bytes) {
      const Shape shape = shape_of(n, per_node, b, chunk);
      const Algorithm a = forced.value_or(cheapest(op, shape, net)->algorithm);
      std::printf("predict %s %zu %zu %s %.1f\n", op_name(op), n, b, algorithm_name(a),
                  predict_two_level(op, a, shape, net, local) * 1e6);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int per_node = 8;
  LinkCost net{5e-6, 100e9 / 8};
  LinkCost local{3e-6, 4000e6};
  std::size_t chunk = std::size_t{1} << 20;
  OpKind op = OpKind::kAllReduce;
  std::string algorithm;  // empty: the table of every algorithm
  std::vector<std::size_t> ranks = {2, 8, 16, 64, 256, 1024, 4096, 24576, 32768};
  std::vector<std::size_t> bytes = {8, 1024, 65536, 1 << 20, 16 << 20, 256 << 20, std::size_t{1} << 30};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage();
    const char* v = argv[++i];
    if (a == "--ranks-per-node")
      per_node = std::atoi(v);
    else if (a == "--latency-us")
      net.latency_s = std::atof(v) * 1e-6;
    else if (a == "--gbps")
      net.bytes_per_s = std::atof(v) * 1e9 / 8;
    else if (a == "--shm-us")
      local.latency_s = std::atof(v) * 1e-6;
    else if (a == "--shm-mbps")
      local.bytes_per_s = std::atof(v) * 1e6;
    else if (a == "--ranks")
      ranks = parse_list(v);
    else if (a == "--bytes")
      bytes = parse_list(v);
    else if (a == "--chunk-bytes")
      chunk = std::strtoull(v, nullptr, 10);
    else if (a == "--algorithm")
      algorithm = v;
    else if (a == "--op")
      op = parse_op(v);
    else
      usage();
  }
  if (per_node < 1 || net.bytes_per_s <= 0 || local.bytes_per_s <= 0 || chunk == 0) usage();
  if (!algorithm.empty()) return print_points(op, algorithm, ranks, per_node, bytes, chunk, net, local);
  std::printf("# comm_sim: %s, %d ranks per node, between nodes %.1f us %.1f Gbit/s, inside %.1f us %.0f MB/s\n",
              op_name(op), per_node, net.latency_s * 1e6, net.bytes_per_s * 8 / 1e9, local.latency_s * 1e6,
              local.bytes_per_s / 1e6);
  std::vector<Algorithm> columns;
  for (const auto& r : cost_table()) {
    if (r.op == op) columns.push_back(r.algorithm);
  }
  std::printf("| ranks | nodes | bytes |");
  for (Algorithm a : columns) std::printf(" %s |", algorithm_name(a));
  std::printf(" choice |\n|---|---|---|");
  for (std::size_t i = 0; i < columns.size(); ++i) std::printf("---|");
  std::printf("---|\n");
  for (std::size_t n : ranks) {
    for (std::size_t b : bytes) {
      const Shape shape = shape_of(n, per_node, b, chunk);
      std::printf("| %zu | %d | %s |", n, shape.nodes, size_text(b).c_str());
      for (Algorithm a : columns) std::printf(" %s |", time_text(predict_two_level(op, a, shape, net, local)).c_str());
      std::printf(" %s |\n", shape.nodes > 1 ? algorithm_name(cheapest(op, shape, net)->algorithm) : "(one node: shm)");
    }
  }
  return 0;
}
