// Messages that arrive before their receive is posted (a rank ran ahead into the next collective): the messenger
// holds an early collective message in the pipe while nothing else is expected from that peer, and buffers it as
// soon as something behind it is (a point-to-point receive). Results must be exact either way, a peer that
// closes while its message is held must not lose it, and a dead peer still fails the next op within the timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>

#include "harness.hpp"

namespace ctrun::comm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Message-passing algorithms on both transports (shm's own broadcast/all_reduce synchronise every rank at a
// barrier, so no rank runs ahead there).
ProcessGroupOptions options(const std::string& transport, const std::string& algorithm,
                            std::map<std::string, std::string> settings = {}) {
  ProcessGroupOptions o;
  o.transport = transport;
  o.algorithm = algorithm;
  o.timeout = seconds(20);
  o.settings = std::move(settings);
  return o;
}

std::vector<float> pattern(std::size_t count, float seed) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = seed + static_cast<float>(i % 1000);
  return v;
}

class EarlyMessages : public ::testing::TestWithParam<std::string> {};

// Rank 1 is busy in a receive from rank 2 when rank 0's second broadcast arrives (held: nothing else is expected
// from rank 0), then posts a receive for a point-to-point message that rank 0 sent *behind* that broadcast: the
// held broadcast must be buffered to reach it, and still land intact in rank 1's second broadcast. The receive
// names rank 0, then names no source (kAnySource), which must find the message behind the held broadcast too.
TEST_P(EarlyMessages, PointToPointBehindAHeldCollectiveArrives) {
  constexpr std::size_t kCount = 16 << 10;  // 64 KiB: fits the pipe, so rank 0's broadcasts complete early
  for (const int source : {0, kAnySource}) {
    SCOPED_TRACE(source == kAnySource ? "any source" : "source 0");
    run_ranks(3, options(GetParam(), "broadcast=tree"), [source](int rank, ProcessGroup& pg) {
      std::vector<float> b1 = rank == 0 ? pattern(kCount, 1) : std::vector<float>(kCount, -1);
      std::vector<float> b2 = rank == 0 ? pattern(kCount, 7) : std::vector<float>(kCount, -1);
      std::vector<std::int32_t> p2p{rank == 0 ? 99 : rank == 2 ? 33 : 0};
      if (rank == 0) {
        pg.broadcast(b1, 0);
        pg.broadcast(b2, 0);
        pg.send(p2p, 1, 9);
      } else if (rank == 1) {
        pg.broadcast(b1, 0);
        std::vector<std::int32_t> from2{0};
        pg.recv(from2, 2, 3);
        EXPECT_EQ(from2[0], 33);
        EXPECT_EQ(pg.recv(p2p, source, 9), 0);
        EXPECT_EQ(p2p[0], 99);
        pg.broadcast(b2, 0);
      } else {
        pg.broadcast(b1, 0);
        std::this_thread::sleep_for(milliseconds(300));  // rank 0's second broadcast reaches rank 1 meanwhile
        pg.send(p2p, 1, 3);
        pg.broadcast(b2, 0);
      }
      EXPECT_EQ(b1, pattern(kCount, 1)) << "rank " << rank;
      EXPECT_EQ(b2, pattern(kCount, 7)) << "rank " << rank;
    });
  }
}

// The root runs several large broadcasts ahead of a sleeping rank (chains of many chunks, each op's data
// different), and all_reduces of different sizes follow back to back: every op must see exactly its own data.
TEST_P(EarlyMessages, BackToBackCollectivesWithASlowRankStayInOrder) {
  constexpr int kOps = 4;
  constexpr std::size_t kCount = 300 << 10;  // 1.2 MiB: chain, many 64 KiB chunks
  run_ranks(4, options(GetParam(), "broadcast=chain,all_reduce=ring", {{"CTRUN_COMM_CHUNK_BYTES", "65536"}}), [](int rank, ProcessGroup& pg) {
    std::vector<std::vector<float>> bufs;
    for (int k = 0; k < kOps; ++k) {
      bufs.push_back(rank == 0 ? pattern(kCount, static_cast<float>(10 * k)) : std::vector<float>(kCount, -1));
    }
    if (rank == 2) std::this_thread::sleep_for(milliseconds(200));
    std::vector<WorkPtr> works;
    for (int k = 0; k < kOps; ++k) works.push_back(pg.broadcast_async(bufs[static_cast<std::size_t>(k)], 0));
    std::vector<std::vector<float>> sums;
    for (std::size_t count : {std::size_t{3}, std::size_t{70001}, std::size_t{300001}}) {
      sums.emplace_back(count, static_cast<float>(rank + 1));
      works.push_back(pg.all_reduce_async(sums.back()));
    }
    for (auto& w : works) w->wait();
    for (int k = 0; k < kOps; ++k) {
      EXPECT_EQ(bufs[static_cast<std::size_t>(k)], pattern(kCount, static_cast<float>(10 * k)))
          << "broadcast " << k << " on rank " << rank;
    }
    for (const auto& s : sums) EXPECT_EQ(s, std::vector<float>(s.size(), 10.0f)) << "rank " << rank;
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, EarlyMessages, ::testing::Values("shm", "tcp"));

// tcp: rank 0 broadcasts while rank 1 is busy elsewhere (rank 1 holds the message in its socket), then rank 0
// closes its group. Rank 1 still receives the broadcast intact; its next op with rank 0 fails at once, naming
// rank 0, instead of waiting for the timeout. (Threads share one pid, so the shm transport cannot tell that a
// rank's group was destroyed; its dead-peer detection is tested with processes, comm_rank_exits_mid_collective.)
TEST(EarlyMessagesTcp, AHeldMessageOfAPeerThatClosedIsDeliveredAndTheNextOpFailsFast) {
  constexpr std::size_t kCount = 16 << 10;
  ProcessGroupOptions o = options("tcp", "broadcast=tree");
  o.timeout = seconds(10);
  const auto errors = run_ranks_collect(3, o, [](int rank, ProcessGroup& pg) {
    std::vector<float> b = rank == 0 ? pattern(kCount, 5) : std::vector<float>(kCount, -1);
    if (rank == 0) {
      pg.broadcast(b, 0);
      return;  // the group closes here
    }
    if (rank == 1) {
      std::vector<std::int32_t> from2{0};
      pg.recv(from2, 2, 3);
      pg.broadcast(b, 0);
    } else {
      pg.broadcast(b, 0);
      std::this_thread::sleep_for(milliseconds(300));
      std::vector<std::int32_t> v{1};
      pg.send(v, 1, 3);
    }
    EXPECT_EQ(b, pattern(kCount, 5)) << "rank " << rank;
    const auto start = Clock::now();
    std::vector<float> x(1000, 1.0f);
    try {
      pg.all_reduce(x);
      ADD_FAILURE() << "rank " << rank << ": all_reduce with a closed rank 0 succeeded";
    } catch (const PeerError& e) {
      EXPECT_LT(Clock::now() - start, seconds(5)) << e.what();
      throw;
    }
  });
  EXPECT_EQ(errors[0], "");
  for (int r = 1; r < 3; ++r) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("rank"), std::string::npos) << errors[static_cast<std::size_t>(r)];
  }
}

}  // namespace
}  // namespace ctrun::comm::testing
