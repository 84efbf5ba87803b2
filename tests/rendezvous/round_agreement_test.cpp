// The c10d round's restart-count agreement (rendezvous/round_agreement.hpp) over an in-process store, members as
// threads.
#include "rendezvous/round_agreement.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "store/memory_store.hpp"

namespace ctrun::rdzv {
namespace {

using namespace std::chrono_literals;

TEST(RoundAgreement, EveryMemberGetsTheLargestCount) {
  store::MemoryStore s;
  const std::vector<int> mine = {0, 2, 1, 2, 0};
  std::vector<std::optional<int>> got(mine.size());
  std::vector<std::thread> members;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    members.emplace_back(
        [&, i] { got[i] = agree_restart_count(s, mine[i], static_cast<int>(mine.size()), 10s, [] { return false; }); });
  }
  for (auto& t : members) t.join();
  for (const auto& g : got) EXPECT_EQ(g, std::optional<int>(2));
}

TEST(RoundAgreement, ABrokenRoundIsLeftInsteadOfWaitingOut) {
  store::MemoryStore s;
  std::atomic<int> asked{0};
  auto start = std::chrono::steady_clock::now();
  // Two members, one never arrives (died after the round completed): the round is reported broken.
  auto got = agree_restart_count(s, 1, 2, 30s, [&] { return ++asked >= 2; });
  EXPECT_FALSE(got.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(RoundAgreement, TimesOutWhenAMemberNeverArrives) {
  store::MemoryStore s;
  EXPECT_THROW(agree_restart_count(s, 0, 2, 1s, [] { return false; }), store::TimeoutError);
}

}  // namespace
}  // namespace ctrun::rdzv
