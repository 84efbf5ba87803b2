// progress_bench: what comm's progress records cost per op (docs/hang.md).
//
//   progress_bench                    ns per op of the records a collective writes (issued + running +
//                                     finished), and of one waiting() note, alone and with a reader polling
//                                     every slot every millisecond (the agent reads far less often); the p2p
//                                     part: a worker's turn with nothing changed, and one op posted and completed
//   progress_bench --make-region PATH N    creates a region with N rows at PATH (for progress_ab.sh) and exits
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "common/progress.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ns per iteration of `body` over `n` iterations, median of 7 runs.
template <class Body>
double ns_per(std::size_t n, Body body) {
  std::vector<double> runs;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < n; ++i) body(i);
    runs.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(n));
  }
  return median(runs);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--make-region") == 0) {
    ctrun::progress::create_region(argv[2], std::atoi(argv[3]), static_cast<int>(::getpid()), 0);
    return 0;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: progress_bench [--make-region PATH LOCAL_RANKS]\n");
    return 2;
  }
  const std::string path = "/dev/shm/progress_bench_" + std::to_string(::getpid());
  auto* region = ctrun::progress::create_region(path, 4, static_cast<int>(::getpid()), 0);
  ::unlink(path.c_str());
  ctrun::progress::Slot& slot = ctrun::progress::row_of(region, 0)->slots[0];
  ctrun::progress::SlotWriter w(&slot);
  constexpr std::size_t kOps = 2'000'000;
  std::uint64_t seq = 0;
  auto op = [&](std::size_t) {
    w.issued(seq, 2, 0, 8);
    w.running(seq, 2, 0, 8);
    w.finished(true);
    ++seq;
  };
  auto now_only = [&](std::size_t) {
    volatile std::int64_t t = ctrun::progress::now_ns();
    (void)t;
  };
  auto wait_note = [&](std::size_t i) { w.waiting(static_cast<int>(i & 3)); };
  // comm's worker per turn: unchanged p2p state (the common case: returns at once), and one post + completion.
  auto p2p_same = [&](std::size_t) { w.p2p(0, ctrun::progress::P2pKind::kSend, -1, 0, 0, 0); };
  std::uint64_t p2p_done = 0;
  auto p2p_op = [&](std::size_t) {
    w.p2p(1, ctrun::progress::P2pKind::kRecv, 1, 8, ctrun::progress::now_ns(), p2p_done);
    w.p2p(0, ctrun::progress::P2pKind::kSend, -1, 0, 0, ++p2p_done);
  };
  const double clock_ns = ns_per(kOps, now_only);
  const double op_ns = ns_per(kOps, op);
  const double wait_ns = ns_per(kOps, wait_note);
  const double p2p_same_ns = ns_per(kOps, p2p_same);
  const double p2p_op_ns = ns_per(kOps, p2p_op);

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0};
  std::thread reader([&] {
    while (!stop) {
      for (int r = 0; r < 4; ++r) {
        for (const auto& s : ctrun::progress::row_of(region, r)->slots) {
          auto v = ctrun::progress::read_consistent(s.run, [](const ctrun::progress::Run& run) {
            return run.seq.load(std::memory_order_relaxed) + run.done.load(std::memory_order_relaxed);
          });
          if (v) reads += 1;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const double op_read_ns = ns_per(kOps, op);
  stop = true;
  reader.join();
  std::printf("# progress_bench: comm's progress records, %zu ops x 7 runs (median)\n", kOps);
  std::printf("clock_gettime(CLOCK_MONOTONIC)            %6.1f ns\n", clock_ns);
  std::printf("records of one op (issued+running+finished) %6.1f ns  (2 clock reads included)\n", op_ns);
  std::printf("  with a reader polling every slot each ms  %6.1f ns  (%llu slot reads)\n", op_read_ns,
              static_cast<unsigned long long>(reads.load()));
  std::printf("one waiting() note (before a blocking wait) %6.1f ns\n", wait_ns);
  std::printf("p2p record, nothing changed (worker's turn) %6.1f ns\n", p2p_same_ns);
  std::printf("p2p records of one op (posted+completed)    %6.1f ns  (1 clock read included)\n", p2p_op_ns);
  ctrun::progress::unmap_region(region);
  return 0;
}
