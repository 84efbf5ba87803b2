// The NCCL unique-id handshake through the store (CUDA-free logic: runs everywhere).
#include "comm/nccl/unique_id_exchange.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "store/memory_store.hpp"

namespace ctrun::comm::nccl {
namespace {

using namespace std::chrono_literals;

TEST(UniqueIdExchange, EveryRankGetsRankZerosIdAndOnlyRankZeroMakesOne) {
  store::MemoryStore store(5s);
  constexpr int kSize = 4;
  std::atomic<int> made{0};
  std::vector<std::string> got(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      got[static_cast<std::size_t>(r)] = exchange_unique_id(store, r, kSize, 5s, [&] {
        ++made;
        return std::string("id-\0A", 5);  // ids are binary: embedded NULs must survive
      });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(made.load(), 1);
  for (const auto& id : got) EXPECT_EQ(id, std::string("id-\0A", 5));
}

// Rank 0 may run ahead and publish the second communicator's id before the others read the first one: each rank
// must still get the id of ITS n-th communicator, never a stale or a future one.
TEST(UniqueIdExchange, SuccessiveCommunicatorsGetFreshIds) {
  store::MemoryStore store(5s);
  constexpr int kSize = 3;
  int next = 0;
  auto make = [&] { return "id-" + std::to_string(next++); };
  EXPECT_EQ(exchange_unique_id(store, 0, kSize, 5s, make), "id-0");
  EXPECT_EQ(exchange_unique_id(store, 0, kSize, 5s, make), "id-1");
  std::vector<std::thread> threads;
  for (int r = 1; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      EXPECT_EQ(exchange_unique_id(store, r, kSize, 5s, make), "id-0");
      EXPECT_EQ(exchange_unique_id(store, r, kSize, 5s, make), "id-1");
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(next, 2);
}

TEST(UniqueIdExchange, LastReaderRemovesTheId) {
  store::MemoryStore store(5s);
  std::thread other([&] { exchange_unique_id(store, 1, 2, 5s, [] { return std::string("x"); }); });
  exchange_unique_id(store, 0, 2, 5s, [] { return std::string("id"); });
  other.join();
  for (const auto& key : store.list_keys()) EXPECT_EQ(key.find("nccl/uid/"), std::string::npos) << key;
}

TEST(UniqueIdExchange, MissingRankZeroTimesOutNamingIt) {
  store::MemoryStore store(5s);
  const auto start = std::chrono::steady_clock::now();
  try {
    exchange_unique_id(store, 1, 2, 200ms, [] { return std::string("never"); });
    FAIL() << "expected a TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

}  // namespace
}  // namespace ctrun::comm::nccl
