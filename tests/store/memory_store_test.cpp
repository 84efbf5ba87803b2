#include "store/memory_store.hpp"

#include <thread>

#include <gtest/gtest.h>

using namespace ctrun::store;
using namespace std::chrono_literals;

TEST(MemoryStore, CompareSetThreeCases) {
  MemoryStore s;
  EXPECT_EQ(s.compare_set("k", "x", "y"), "x");  // missing, expected non-empty: nothing
  EXPECT_FALSE(s.check({"k"}));
  EXPECT_EQ(s.compare_set("k", "", "v"), "v");  // missing, expected empty: created
  EXPECT_EQ(s.compare_set("k", "v", "w"), "w");  // equal: swapped
  EXPECT_EQ(s.compare_set("k", "zz", "q"), "w");  // not equal: unchanged
}

TEST(MemoryStore, AddStoresDecimal) {
  MemoryStore s;
  EXPECT_EQ(s.add("c", 5), 5);
  EXPECT_EQ(s.add("c", -12), -7);
  EXPECT_EQ(s.get("c"), "-7");
  s.set("n", "40");
  EXPECT_EQ(s.add("n", 2), 42);
  s.set("bad", "x");
  EXPECT_THROW(s.add("bad", 1), StoreError);
}

TEST(MemoryStore, WaitWakesOnSetAndTimesOut) {
  MemoryStore s;
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    s.set("a", "1");
    s.append("b", "x");
  });
  s.wait({"a", "b"}, 5s);
  t.join();
  EXPECT_THROW(s.wait({"never"}, 30ms), TimeoutError);
}

TEST(MemoryStore, QueuesAndBarrier) {
  MemoryStore s(2s);
  s.queue_push("q", "1");
  s.queue_push("q", "2");
  EXPECT_EQ(s.queue_len("q"), 2);
  EXPECT_TRUE(s.check({"q"}));
  EXPECT_EQ(s.queue_pop("q", false), "1");
  EXPECT_EQ(s.queue_pop("q", true), "2");
  EXPECT_EQ(s.queue_pop("q", false), std::nullopt);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) ts.emplace_back([&] { s.barrier("bar", 4, 5s); });
  for (auto& t : ts) t.join();
  EXPECT_EQ(s.get("bar"), "4");
  EXPECT_THROW(s.barrier("bar2", 2, 20ms), TimeoutError);
}
