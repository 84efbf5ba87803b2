// ctbench: collective benchmark of ctrun::comm in the style of nccl-tests (op, bytes, time, algbw, busbw), with
// torch's gloo on the same ops and sizes in the same run, and the machine's memcpy bandwidth for scale.
//
//   ctbench                       launches 4 ranks of itself (env:// on 127.0.0.1), then the gloo peer
//   ctrun --nproc-per-node=4 --no-python ctbench --no-gloo     the same ranks under ctrun
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/backend.hpp"
#include "comm/process_group.hpp"
#include "common/text.hpp"
#include "gloo_peer.hpp"
#include "measure.hpp"
#include "spawn.hpp"
#include "tcp_floor.hpp"

namespace {

using ctrun::bench::Row;

std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string unit = end ? end : "";
  if (unit == "K" || unit == "KiB") v *= 1024;
  if (unit == "M" || unit == "MiB") v *= 1024 * 1024;
  if (unit == "G" || unit == "GiB") v *= 1024.0 * 1024 * 1024;
  return static_cast<std::size_t>(v);
}

int iterations_for(std::size_t bytes, double scale) {
  const double it = static_cast<double>(64u << 20) / static_cast<double>(std::max<std::size_t>(bytes, 1)) * scale;
  return static_cast<int>(std::clamp(it, 5.0, 500.0 * std::max(scale, 0.01)));
}

std::string format_row(const Row& r) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%-15s %12zu %12.1f %9.3f %9.3f %12.1f", r.op.c_str(), r.bytes, r.time_us, r.algbw,
                r.busbw, r.floor_us);
  return buf;
}

// One rank (under ctrun/torchrun or spawned by the parent below).
int run_rank(const std::vector<std::string>& ops, const std::vector<std::size_t>& sizes, const std::string& backend,
             double scale, bool tcp_floor) {
  ctrun::comm::ProcessGroupOptions options;
  options.backend = backend;
  options.timeout = std::chrono::seconds(120);
  auto pg = ctrun::comm::ProcessGroup::init("env://", options);
  std::ofstream results;
  if (const char* path = std::getenv("CTBENCH_RESULTS"); path && pg->rank() == 0) results.open(path);
  if (pg->rank() == 0) {
    std::printf("# ctbench rank 0 of %d, backend %s, float32\n%-15s %12s %12s %9s %9s %12s\n", pg->size(),
                backend.c_str(), "op", "bytes", "time_us", "algbw", "busbw", "tcp_floor_us");
  }
  std::unique_ptr<ctrun::bench::TcpRing> ring;
  if (tcp_floor && pg->size() > 1) {
    // The floor ring runs between the same addresses as comm's sockets (CTRUN_COMM_IFADDR in namespace runs).
    const char* ifaddr = std::getenv("CTRUN_COMM_IFADDR");
    ring = std::make_unique<ctrun::bench::TcpRing>(*pg, ifaddr && *ifaddr ? ifaddr : "127.0.0.1");
  }
  for (const auto& op : ops) {
    for (std::size_t bytes : sizes) {
      if (op == "barrier" && bytes != sizes.front()) break;  // no data: one row
      if (op == "barrier") bytes = 0;
      const int iters = iterations_for(bytes, scale);
      Row row = ctrun::bench::measure(*pg, op, bytes, iters, std::max(2, iters / 10));
      if (ring && op != "barrier") {
        row.floor_us = ring->floor_us(*pg, op, row.bytes, std::clamp(iters / 4, 2, 20));
      }
      if (pg->rank() == 0) {
        std::printf("%s\n", format_row(row).c_str());
        std::fflush(stdout);
        if (results)
          results << row.op << ' ' << row.bytes << ' ' << row.time_us << ' ' << row.algbw << ' ' << row.busbw << ' '
                  << row.floor_us << '\n';
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ctbench: ctrun::comm collectives, nccl-tests style, side by side with torch gloo"};
  int nproc = 4;
  std::string ops_arg = "all_reduce,all_gather,broadcast,reduce_scatter";
  std::string sizes_arg = "8,64,512,4K,32K,256K,1M,4M,16M,64M";
  std::string backend = "cpu";
  bool no_gloo = false;
  double scale = 1.0;
  std::string transport;
  app.add_option("--nproc", nproc, "ranks to launch when not under ctrun/torchrun")->check(CLI::Range(1, 64));
  app.add_option("--ops", ops_arg,
                 "comma-separated: all_reduce, all_gather, broadcast, reduce_scatter, reduce, barrier (one row, no "
                 "data)");
  app.add_option("--sizes", sizes_arg, "comma-separated byte sizes (K/M suffixes)");
  app.add_option("--backend", backend, "cpu or nccl");
  app.add_flag("--no-gloo", no_gloo, "skip the torch gloo peer");
  app.add_option("--iters-scale", scale, "multiply the iteration counts (quick runs: 0.1)");
  app.add_option("--transport", transport,
                 "cpu backend transport of the ranks: auto, tcp or shm "
                 "(sets CTRUN_COMM_TRANSPORT; gloo always uses TCP)")
      ->check(CLI::IsMember({"auto", "tcp", "shm"}));
  CLI11_PARSE(app, argc, argv);

  const auto ops = ctrun::text::split_nonempty(ops_arg, ',');
  std::vector<std::size_t> sizes;
  for (const auto& s : ctrun::text::split_nonempty(sizes_arg, ',')) sizes.push_back(parse_size(s));
  for (const auto& op : ops) {
    if (op != "all_reduce" && op != "all_gather" && op != "broadcast" && op != "reduce_scatter" && op != "reduce" &&
        op != "barrier") {
      std::fprintf(stderr, "ctbench: unknown op '%s'\n", op.c_str());
      return 2;
    }
  }
  if (backend == "nccl" && !ctrun::comm::has_backend("nccl")) {
    std::fprintf(stderr,
                 "ctbench: --backend nccl needs a build with CUDA and NCCL (CTRUN_WITH_NCCL=AUTO/ON finding "
                 "/usr/local/cuda) and a GPU; this build has only the cpu backend\n");
    return 2;
  }
  if (backend != "cpu" && backend != "nccl") {
    std::fprintf(stderr, "ctbench: unknown backend '%s' (cpu or nccl)\n", backend.c_str());
    return 2;
  }

  // The ranks inherit it (launched by us, or by ctrun with this variable in its environment).
  if (!transport.empty()) setenv("CTRUN_COMM_TRANSPORT", transport.c_str(), 1);
  try {
    if (std::getenv("RANK")) return run_rank(ops, sizes, backend, scale, transport == "tcp");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ctbench: %s\n", e.what());
    return 1;
  }

  // Parent: launch the ranks, then the gloo peer, then print both side by side.
  const double memcpy_bw = ctrun::bench::memcpy_gbps(64u << 20);
  // The shm floor's bandwidth: as many copying threads as the ranks can run on at once.
  const int copy_threads = std::min<int>(nproc, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  // Measured before and after the ranks; the better figure counts (a floor must not be inflated by a moment of
  // load, which only ever lowers bandwidth).
  double copy_bw = ctrun::bench::memcpy_gbps_parallel(64u << 20, copy_threads);
  const bool shm_floor = transport != "tcp";
  const std::string results =
      (std::filesystem::temp_directory_path() / ("ctbench-" + std::to_string(getpid()))).string();
  std::vector<std::string> child_argv(argv, argv + argc);
  const int rc =
      ctrun::bench::spawn_ranks(nproc, child_argv, {{"CTBENCH_RESULTS", results}}, std::chrono::seconds(900));
  std::vector<Row> mine;
  {
    std::ifstream in(results);
    Row r;
    while (in >> r.op >> r.bytes >> r.time_us >> r.algbw >> r.busbw >> r.floor_us) mine.push_back(r);
    std::filesystem::remove(results);
  }
  if (rc != 0) {
    std::fprintf(stderr, "ctbench: the ranks failed (exit status %d)\n", rc);
    return 1;
  }
  copy_bw = std::max(copy_bw, ctrun::bench::memcpy_gbps_parallel(64u << 20, copy_threads));
  std::string why;
  std::map<std::pair<std::string, std::size_t>, Row> gloo;
  if (!no_gloo) gloo = ctrun::bench::run_gloo(nproc, ops, sizes, &why);

  std::printf("\n# ctbench summary: %d ranks, ctrun::comm backend %s vs torch 1.13 gloo, float32\n", nproc,
              backend.c_str());
  std::printf("# memcpy (1 thread, 64 MiB): %.2f GB/s; %d threads at once: %.2f GB/s in all (best of before/after)\n",
              memcpy_bw, copy_threads, copy_bw);
  if (!shm_floor) {
    std::printf(
        "# %%floor = TCP floor / ctrun's time; floor = bare blocking sockets between the same rank "
        "processes, comm's socket options, moving the bytes a bandwidth-optimal algorithm must move: a ring of "
        "2(n-1)/n S per rank (all_reduce) or (n-1)/n S (all_gather, reduce_scatter), a chain of S from rank 0 "
        "(broadcast); best of several passes\n");
  }
  if (shm_floor) {
    std::printf(
        "# %%floor = floor time / ctrun's time; floor = n ranks x the bytes each must read+write in its own "
        "buffers (all_reduce 2S, all_gather and reduce_scatter S+S/n, broadcast S) at %.2f GB/s x 2 "
        "(meaningful where buffers exceed the caches: >= 16 MiB)\n",
        copy_bw);
  }
  if (!no_gloo && gloo.empty()) std::printf("# gloo peer unavailable: %s\n", why.c_str());
  std::printf("%-15s %12s | %12s %9s %9s %6s %7s | %12s %9s %9s | %8s %8s\n", "op", "bytes", "ctrun_us", "algbw",
              "busbw", "%mcpy", "%floor", "gloo_us", "algbw", "busbw", "busbw_x", "lat_x");
  for (const Row& r : mine) {
    const double floor_us = shm_floor ? ctrun::bench::shm_floor_us(r.op, nproc, r.bytes, copy_bw) : r.floor_us;
    char floor_pct[16] = "-";
    if (floor_us > 0) std::snprintf(floor_pct, sizeof floor_pct, "%.0f%%", 100.0 * floor_us / r.time_us);
    std::printf("%-15s %12zu | %12.1f %9.3f %9.3f %5.0f%% %7s |", r.op.c_str(), r.bytes, r.time_us, r.algbw, r.busbw,
                100.0 * r.busbw / memcpy_bw, floor_pct);
    auto it = gloo.find({r.op, r.bytes});
    if (it != gloo.end()) {
      const Row& g = it->second;
      std::printf(" %12.1f %9.3f %9.3f | %8.2f %8.2f\n", g.time_us, g.algbw, g.busbw, r.busbw / g.busbw,
                  g.time_us / r.time_us);
    } else {
      std::printf(" %12s %9s %9s | %8s %8s\n", "-", "-", "-", "-", "-");
    }
  }
  return 0;
}
