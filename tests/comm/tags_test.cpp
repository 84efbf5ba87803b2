// Point-to-point tags: users get 0 .. kMaxUserTag, and a tag comm reserves for its own messages is refused on the
// caller before anything is sent, with the allowed range in the error. monitored_barrier runs over those tags.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

namespace ctrun::comm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

ProcessGroupOptions quick(const std::string& transport) {
  ProcessGroupOptions o;
  o.transport = transport;
  o.timeout = seconds(5);
  return o;
}

// The InvalidArgumentError `call` throws; fails the test when it throws nothing.
template <class Call>
std::string refusal(Call&& call) {
  try {
    call();
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

class Tags : public ::testing::TestWithParam<std::string> {};

TEST_P(Tags, ReservedAndNegativeTagsAreRefusedNamingTheUserRange) {
  static_assert(kMaxUserTag + 1 == kFirstReservedTag && kMonitoredBarrierReleaseTag <= INT_MAX);
  const std::string range = "use a tag in 0.." + std::to_string(kMaxUserTag);
  run_ranks(2, quick(GetParam()), [&](int rank, ProcessGroup& pg) {
    const int peer = 1 - rank;
    std::vector<float> f(4);
    for (int tag : {kFirstReservedTag, kMonitoredBarrierArriveTag, kMonitoredBarrierReleaseTag, INT_MAX}) {
      const std::string what = refusal([&] { pg.isend(f, peer, tag); });
      EXPECT_NE(what.find("send: tag " + std::to_string(tag) + " is reserved for comm's own messages"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(range), std::string::npos) << what;
      EXPECT_NE(refusal([&] { pg.recv(f, peer, tag); }).find(range), std::string::npos);
      EXPECT_NE(refusal([&] { pg.batch_isend_irecv({P2POp::recv(f, peer, tag)}); }).find(range), std::string::npos);
    }
    EXPECT_NE(refusal([&] { pg.send(f, peer, -1); }).find("tag -1 is negative; " + range), std::string::npos);

    // The highest user tag works, and nothing the refused calls did reached the peer: the exchange on it matches.
    std::vector<float> out{static_cast<float>(rank + 1)}, in{0};
    auto sent = pg.isend(out, peer, kMaxUserTag);
    pg.recv(in, peer, kMaxUserTag);
    sent->wait();
    EXPECT_EQ(in[0], static_cast<float>(peer + 1));
  });
}

TEST_P(Tags, MonitoredBarrierPassesAmidUserTrafficAndNamesTheRanksThatDoNotArrive) {
  run_ranks(3, quick(GetParam()), [](int rank, ProcessGroup& pg) {
    // A user message on the highest user tag is pending around the barrier: neither takes the other's.
    std::vector<std::int32_t> out{rank}, in{-1};
    const int next = (rank + 1) % 3, prev = (rank + 2) % 3;
    auto sent = pg.isend(out, next, kMaxUserTag);
    pg.monitored_barrier(seconds(5));
    pg.recv(in, prev, kMaxUserTag);
    sent->wait();
    EXPECT_EQ(in[0], prev);

    // Rank 2 does not come (its group lives on meanwhile): rank 0 names it when the timeout expires; rank 1 is
    // never released and fails too (its own timeout, or rank 0 leaving).
    if (rank == 2) {
      std::this_thread::sleep_for(seconds(2));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      pg.monitored_barrier(milliseconds(500), /*wait_all_ranks=*/true);
      ADD_FAILURE() << "rank " << rank << " passed a barrier rank 2 never reached";
    } catch (const TimeoutError& e) {
      if (rank == 0) {
        EXPECT_EQ(std::string(e.what()), "Rank 2 failed to pass monitoredBarrier in 500 ms");
        EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(450));
      }
    } catch (const CommError& e) {
      EXPECT_EQ(rank, 1) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(2));
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, Tags, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace ctrun::comm::testing
