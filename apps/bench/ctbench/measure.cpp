#include "measure.hpp"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#if defined(CTRUN_COMM_WITH_NCCL)
#include "measure_nccl.hpp"
#endif

namespace ctrun::bench {

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter") return static_cast<double>(n - 1) / n;
  return 1.0;  // broadcast, reduce
}

Row measure(comm::ProcessGroup& pg, const std::string& op, std::size_t bytes, int iters, int warmup) {
#if defined(CTRUN_COMM_WITH_NCCL)
  if (pg.backend().name() == "nccl") return measure_nccl(pg, op, bytes, iters, warmup);  // device buffers
#endif
  const int n = pg.size();
  const std::size_t count = std::max<std::size_t>(bytes / 4, 1);
  // Gathers: "bytes" is the gathered total, as in nccl-tests; each rank contributes bytes / n.
  const std::size_t per_rank = std::max<std::size_t>(count / static_cast<std::size_t>(n), 1);
  std::vector<float> a(op == "all_gather" ? per_rank : count, 1.0f);
  std::vector<float> b(op == "all_gather"       ? per_rank * static_cast<std::size_t>(n)
                       : op == "reduce_scatter" ? per_rank
                                                : 0);
  std::vector<float> in(op == "reduce_scatter" ? per_rank * static_cast<std::size_t>(n) : 0, 1.0f);
  auto run_once = [&] {
    if (op == "all_reduce") {
      pg.all_reduce(a);
    } else if (op == "broadcast") {
      pg.broadcast(a, 0);
    } else if (op == "reduce") {
      pg.reduce(a, 0);
    } else if (op == "all_gather") {
      pg.all_gather_into(b, a);
    } else if (op == "reduce_scatter") {
      pg.reduce_scatter_from(b, in);
    } else if (op == "barrier") {
      pg.barrier();
    } else {
      throw std::invalid_argument("unknown op " + op);
    }
  };
  for (int i = 0; i < warmup; ++i) run_once();
  pg.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run_once();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  std::vector<double> slowest{us};
  pg.all_reduce(slowest, comm::ReduceOp::kMax);
  Row row;
  row.op = op;
  row.bytes = op == "barrier"                                ? 0
              : op == "all_gather" || op == "reduce_scatter" ? per_rank * static_cast<std::size_t>(n) * 4
                                                             : count * 4;
  row.time_us = slowest[0];
  row.algbw = static_cast<double>(row.bytes) / (row.time_us * 1e-6) / 1e9;
  row.busbw = row.algbw * bus_factor(op, n);
  return row;
}

double memcpy_gbps(std::size_t bytes) {
  std::vector<char> src(bytes, 1);
  std::vector<char> dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // fault the pages in
  const int reps = 10;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) {
    std::memcpy(dst.data(), src.data(), bytes);
    src[static_cast<std::size_t>(i)] = dst[bytes - 1 - static_cast<std::size_t>(i)];  // keep the copies observable
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(bytes) * reps / s / 1e9;
}

double shm_rw_bytes_per_rank(const std::string& op, int n, std::size_t bytes) {
  const double s = static_cast<double>(bytes);
  if (n <= 1) return 0;
  if (op == "all_reduce") return 2 * s;
  if (op == "all_gather" || op == "reduce_scatter") return s + s / n;
  if (op == "broadcast") return s;
  return 0;
}

double shm_floor_us(const std::string& op, int n, std::size_t bytes, double copy_gbps) {
  // copy_gbps bytes copied per ns = 2 * copy_gbps bytes read or written per ns.
  return n * shm_rw_bytes_per_rank(op, n, bytes) / (2 * copy_gbps * 1e3);
}

double memcpy_gbps_parallel(std::size_t bytes, int threads) {
  threads = std::max(threads, 1);
  std::vector<double> seconds(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  const int reps = 10;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<char> src(bytes, 1);
      std::vector<char> dst(bytes, 0);
      std::memcpy(dst.data(), src.data(), bytes);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) {
        std::memcpy(dst.data(), src.data(), bytes);
        src[static_cast<std::size_t>(i)] = dst[bytes - 1 - static_cast<std::size_t>(i)];
      }
      seconds[static_cast<std::size_t>(t)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  for (auto& th : pool) th.join();
  double slowest = 0;
  for (double sec : seconds) slowest = std::max(slowest, sec);
  return static_cast<double>(bytes) * reps * threads / slowest / 1e9;
}

}  // namespace ctrun::bench
