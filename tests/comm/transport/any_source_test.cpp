// Receives from any source (ProcessGroup::recv/irecv with kAnySource; the matching lives in
// comm/transport/messenger.cpp): the sender is returned, messages of one sender keep their order, a tag matches
// only itself, receives are matched in the order they were posted (from a peer or from any), early and held
// messages are found, and a peer whose connection breaks fails a pending any-source receive, naming it.
// Threads as ranks over both transports.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "../harness.hpp"

namespace ctrun::comm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

ProcessGroupOptions options(const std::string& transport, Duration timeout = seconds(20)) {
  ProcessGroupOptions o;
  o.transport = transport;
  o.timeout = timeout;
  return o;
}

class AnySource : public ::testing::TestWithParam<std::string> {};

TEST_P(AnySource, ReturnsTheSenderOfEachMessage) {
  for (int n : {2, 3, 5}) {
    run_ranks(n, options(GetParam()), [n](int rank, ProcessGroup& pg) {
      if (rank != 0) {
        std::vector<std::int32_t> v(100, rank);
        pg.send(v, 0, 4);
        return;
      }
      std::set<int> senders;
      for (int i = 1; i < n; ++i) {
        std::vector<std::int32_t> v(100, -1);
        const int from = pg.recv(v, kAnySource, 4);
        ASSERT_GE(from, 1);
        ASSERT_LT(from, n);
        EXPECT_EQ(v, std::vector<std::int32_t>(100, from)) << "payload of rank " << from;
        senders.insert(from);
      }
      EXPECT_EQ(static_cast<int>(senders.size()), n - 1) << "every sender once";
    });
  }
}

// Many senders race to one receiver, which keeps several any-source receives posted at once and mixes in blocking
// ones: every message arrives once, with its payload, and each sender's messages of one tag arrive in the order it
// sent them (receives match in the order they were posted). Three sizes, each under its own tag (a receive must
// name the sender's size, as in torch), so some messages go inline with their header and some as payload writes.
TEST_P(AnySource, ManySendersRacingKeepEachSendersOrder) {
  constexpr int kRanks = 6;
  constexpr int kPerSender = 60;
  constexpr std::size_t kSizes[] = {2, 3000, 40000};  // int32 elements
  run_ranks(kRanks, options(GetParam()), [&](int rank, ProcessGroup& pg) {
    if (rank != 0) {
      std::vector<WorkPtr> sends;
      std::vector<std::vector<std::int32_t>> data;
      data.reserve(kPerSender);
      for (int i = 0; i < kPerSender; ++i) {
        data.emplace_back(kSizes[i % 3], rank * 1000 + i);
        data.back()[0] = rank;
        data.back()[1] = i;
        sends.push_back(pg.isend(data.back(), 0, 10 + i % 3));
      }
      for (auto& w : sends) w->wait();
      return;
    }
    std::map<std::pair<int, int>, int> last;  // (sender, tag) -> the sequence number it sent last
    int received = 0;
    auto check = [&](const std::vector<std::int32_t>& v, int from, int tag) {
      ASSERT_GE(from, 1);
      ASSERT_EQ(v[0], from) << "the returned sender must be the one that sent it";
      auto [it, fresh] = last.try_emplace({from, tag}, v[1] - 3);
      EXPECT_EQ(v[1], it->second + 3) << "rank " << from << "'s messages with tag " << tag << " out of order";
      it->second = v[1];
      if (v.size() > 2) {
        EXPECT_EQ(v.back(), from * 1000 + v[1]);
      }
      ++received;
    };
    int left[3] = {0, 0, 0};
    for (int i = 0; i < kPerSender; ++i) left[i % 3] += kRanks - 1;
    while (received < (kRanks - 1) * kPerSender) {
      std::vector<std::pair<WorkPtr, int>> works;
      std::vector<std::vector<std::int32_t>> bufs;
      bufs.reserve(12);
      for (int c = 0; c < 3; ++c) {
        for (int k = 0; k < 4 && left[c] > 0; ++k, --left[c]) {
          bufs.emplace_back(kSizes[c], -1);
          works.emplace_back(pg.irecv(bufs.back(), kAnySource, 10 + c), c);
        }
      }
      for (std::size_t k = 0; k < works.size(); ++k) {
        works[k].first->wait();
        check(bufs[k], works[k].first->source_rank(), 10 + works[k].second);
      }
      if (left[0] > 0) {  // and one blocking receive
        std::vector<std::int32_t> v(kSizes[0], -1);
        --left[0];
        check(v, pg.recv(v, kAnySource, 10), 10);
      }
    }
    EXPECT_EQ(received, (kRanks - 1) * kPerSender);
  });
}

// A tag matches only itself: an any-source receive for tag 2 takes the tag-2 message even when a tag-1 message
// from the same sender arrived first, which then goes to the receive for tag 1.
TEST_P(AnySource, MatchesOnlyItsTag) {
  run_ranks(2, options(GetParam()), [](int rank, ProcessGroup& pg) {
    std::vector<std::int32_t> a{11};
    std::vector<std::int32_t> b{22};
    if (rank == 1) {
      pg.send(a, 0, 1);
      pg.send(b, 0, 2);
      pg.barrier();
      return;
    }
    pg.barrier();  // both messages arrived (buffered) before either receive is posted
    std::vector<std::int32_t> got{0};
    EXPECT_EQ(pg.recv(got, kAnySource, 2), 1);
    EXPECT_EQ(got[0], 22);
    EXPECT_EQ(pg.recv(got, kAnySource, 1), 1);
    EXPECT_EQ(got[0], 11);
  });
}

// Receives are matched in the order they were posted, whether they name the sender or not.
TEST_P(AnySource, PostedOrderDecidesBetweenAnAnySourceAndANamedReceive) {
  for (bool any_first : {true, false}) {
    run_ranks(2, options(GetParam()), [any_first](int rank, ProcessGroup& pg) {
      if (rank == 1) {
        pg.barrier();  // both receives are posted
        std::vector<std::int32_t> first{1};
        std::vector<std::int32_t> second{2};
        pg.send(first, 0, 5);
        pg.send(second, 0, 5);
        return;
      }
      std::vector<std::int32_t> any{0};
      std::vector<std::int32_t> named{0};
      WorkPtr w_any;
      WorkPtr w_named;
      if (any_first) {
        w_any = pg.irecv(any, kAnySource, 5);
        w_named = pg.irecv(named, 1, 5);
      } else {
        w_named = pg.irecv(named, 1, 5);
        w_any = pg.irecv(any, kAnySource, 5);
      }
      pg.barrier();
      w_any->wait();
      w_named->wait();
      EXPECT_EQ(w_any->source_rank(), 1);
      EXPECT_EQ(any[0], any_first ? 1 : 2);
      EXPECT_EQ(named[0], any_first ? 2 : 1);
    });
  }
}

// A message behind a held collective, found by an any-source receive: tests/comm/early_messages_test.cpp.

// A receive from any source stays pending across collectives of the same group, and gets its message after them.
TEST_P(AnySource, StaysPendingAcrossCollectives) {
  run_ranks(3, options(GetParam()), [](int rank, ProcessGroup& pg) {
    std::vector<std::int32_t> got{-1};
    WorkPtr w = rank == 0 ? pg.irecv(got, kAnySource, 0) : nullptr;
    for (int i = 0; i < 5; ++i) {
      std::vector<float> v(1000, 1.0f);
      pg.all_reduce(v);
      EXPECT_EQ(v[999], 3.0f);
    }
    if (rank == 2) {
      std::vector<std::int32_t> mine{2};
      pg.send(mine, 0, 0);
    }
    if (rank == 0) {
      w->wait();
      EXPECT_EQ(w->source_rank(), 2);
      EXPECT_EQ(got[0], 2);
    }
    pg.barrier();
  });
}

TEST_P(AnySource, SizeMismatchIsNamed) {
  const auto errors = run_ranks_collect(2, options(GetParam(), seconds(10)), [](int rank, ProcessGroup& pg) {
    if (rank == 1) {
      std::vector<std::int32_t> v(3, 1);
      pg.send(v, 0, 0);
      return;
    }
    std::vector<std::int32_t> v(4, 0);
    pg.recv(v, kAnySource, 0);
  });
  EXPECT_NE(errors[0].find("rank 1 sent 12 bytes"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("expects 16 bytes"), std::string::npos) << errors[0];
}

TEST_P(AnySource, MisuseIsRefusedOnTheCallingRank) {
  run_ranks(2, options(GetParam()), [](int rank, ProcessGroup& pg) {
    std::vector<std::int32_t> v{0};
    EXPECT_THROW(pg.batch_isend_irecv({P2POp::recv(v, kAnySource, 0)}), InvalidArgumentError);
    EXPECT_THROW(pg.irecv(v, kAnySource, -1), InvalidArgumentError);
    EXPECT_THROW(pg.irecv(v, kAnySource, kMaxUserTag + 1), InvalidArgumentError);
    EXPECT_THROW(pg.irecv(v, -2, 0), InvalidArgumentError);
    (void)rank;
  });
  run_ranks(1, options(GetParam()), [](int, ProcessGroup& pg) {
    std::vector<std::int32_t> v{0};
    EXPECT_THROW(pg.recv(v), InvalidArgumentError);
  });
}

// A sender that finished and closed its group in order has left, not failed: a pending any-source receive keeps
// waiting for the others (a parameter server whose workers finish at different times), while a receive that names
// the rank that left fails at once, saying so.
TEST_P(AnySource, APeerThatClosesItsGroupInOrderLeavesTheWaitPending) {
  run_ranks(3, options(GetParam()), [](int rank, ProcessGroup& pg) {
    std::vector<std::int32_t> v{rank};
    if (rank == 1) {
      pg.send(v, 0, 0);
      pg.shutdown();  // leaves while rank 0 waits for another message
      return;
    }
    if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(500));
      pg.send(v, 0, 0);
      return;
    }
    EXPECT_EQ(pg.recv(v, kAnySource, 0), 1);
    EXPECT_EQ(pg.recv(v, kAnySource, 0), 2);
    EXPECT_EQ(v[0], 2);
    try {
      pg.recv(v, 1, 0);
      ADD_FAILURE() << "a receive from a rank that left completed";
    } catch (const PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 closed its process group"), std::string::npos) << e.what();
    }
  });
}

// Over tcp the waiter below has no connection to rank 0 (a lower rank connects, and rank 0 sends it nothing): it
// watches rank 0 after a second, and rank 0 then closes its group in order. That is a leave, not a failure: the
// wait goes on and takes rank 2's message.
TEST(AnySourceTcp, AnUnconnectedLowerRankThatClosesItsGroupInOrderLeavesTheWaitPending) {
  run_ranks(3, options("tcp"), [](int rank, ProcessGroup& pg) {
    std::vector<std::int32_t> v{rank};
    if (rank == 0) {
      std::this_thread::sleep_for(milliseconds(2000));  // rank 1's watch is made meanwhile
      pg.shutdown();
    } else if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(3000));
      pg.send(v, 1, 0);
    } else {
      EXPECT_EQ(pg.recv(v, kAnySource, 0), 2);
      EXPECT_EQ(v[0], 2);
    }
  });
}

// A peer that fails (here: aborts, so its connections break with an abort notice instead of a goodbye) while an
// any-source receive waits fails that receive at once, naming the peer, long before the group timeout. Over tcp
// only: threads of one process share its pid, which the shm transport watches; comm_any_source_peer_exit_* stop
// real processes (_exit, no goodbye) over both transports.
TEST(AnySourceTcp, APeerThatLeavesFailsTheWaitNamingIt) {
  const auto start = Clock::now();
  const auto errors = run_ranks_collect(3, options("tcp", seconds(60)), [](int rank, ProcessGroup& pg) {
    if (rank == 0) {
      std::vector<std::int32_t> v{0};
      pg.recv(v, kAnySource, 0);
    } else if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(500));
      pg.backend().abort("test: rank 2 fails");
    } else {
      std::this_thread::sleep_for(seconds(3));
    }
  });
  EXPECT_LT(Clock::now() - start, seconds(20));
  EXPECT_NE(errors[0].find("rank 2"), std::string::npos) << errors[0];
}

INSTANTIATE_TEST_SUITE_P(Transports, AnySource, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace ctrun::comm::testing
