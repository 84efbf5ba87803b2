#pragma once
// Behaviour checks every Store must pass, shared by the TcpStore tests (our server in both dialects, torch's
// own server) and the PrefixStore tests. Each takes a factory so checks that need a second client (a waker
// on another connection) can make one. Keys are namespaced per check so checks can share one server.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/store.hpp"

namespace ctrun::test {

using store::Store;
using namespace std::chrono_literals;
using StoreFactory = std::function<std::unique_ptr<Store>()>;

// 1 MiB of a pattern with every byte value, NULs included.
inline std::string big_value(std::size_t n = 1 << 20) {
  std::string v(n, '\0');
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 7 + 3) % 251);
  return v;
}

inline void check_set_get(Store& s) {
  s.set("sg/k", "v1");
  EXPECT_EQ(s.get("sg/k"), "v1");
  s.set("sg/k", "v2");
  EXPECT_EQ(s.get("sg/k"), "v2");
  const std::string nul_key("sg/n\0k", 6), nul_value("v\0al\0", 5);
  s.set(nul_key, nul_value);
  EXPECT_EQ(s.get(nul_key), nul_value);
  s.set("sg/empty", "");
  EXPECT_EQ(s.get("sg/empty"), "");
  auto big = big_value();
  s.set("sg/big", big);
  EXPECT_EQ(s.get("sg/big"), big);
  EXPECT_EQ(s.get("sg/k"), "v2") << "the stream stays in sync after a 1 MiB reply";
}

inline void check_add(Store& s) {
  EXPECT_EQ(s.add("add/c", 5), 5);
  EXPECT_EQ(s.add("add/c", -7), -2);
  EXPECT_EQ(s.get("add/c"), "-2");
  s.set("add/forty", "40");
  EXPECT_EQ(s.add("add/forty", 2), 42);
  EXPECT_EQ(s.add("add/zero", 0), 0);
  EXPECT_EQ(s.get("add/zero"), "0");
}

// The same ADD semantics everywhere (Keyspace::add): overflow and a non-integer value are errors
// that leave the value unchanged. Needs a factory: a TcpStore's connection is closed by the error.
inline void check_add_errors(const StoreFactory& make) {
  {
    auto s = make();
    s->set("add/max", "9223372036854775807");
    EXPECT_THROW(s->add("add/max", 1), store::StoreError);
  }
  {
    auto s = make();
    EXPECT_EQ(s->get("add/max"), "9223372036854775807");
    s->set("add/text", "abc");
    EXPECT_THROW(s->add("add/text", 1), store::StoreError);
  }
  auto s = make();
  EXPECT_EQ(s->get("add/text"), "abc");
  EXPECT_EQ(s->add("add/max", -7), 9223372036854775800);
}

inline void check_compare_set(Store& s) {
  s.set("cs/k", "old");
  EXPECT_EQ(s.compare_set("cs/k", "old", "new"), "new");
  EXPECT_EQ(s.compare_set("cs/k", "wrong", "x"), "new");
  EXPECT_EQ(s.compare_set("cs/missing", "exp", "x"), "exp");
  EXPECT_FALSE(s.check({"cs/missing"})) << "case 3 creates nothing";
  EXPECT_EQ(s.compare_set("cs/created", "", "d"), "d");
  EXPECT_EQ(s.get("cs/created"), "d");
  const std::string nul("a\0b", 3);
  s.set("cs/nul", nul);
  EXPECT_EQ(s.compare_set("cs/nul", nul, "z"), "z");
}

inline void check_check_delete_num_keys(Store& s) {
  auto n0 = s.num_keys();
  s.set("cd/a", "1");
  EXPECT_EQ(s.num_keys(), n0 + 1);
  EXPECT_TRUE(s.check({"cd/a"}));
  EXPECT_TRUE(s.check({}));
  EXPECT_FALSE(s.check({"cd/a", "cd/b"}));
  EXPECT_TRUE(s.delete_key("cd/a"));
  EXPECT_FALSE(s.delete_key("cd/a"));
  EXPECT_EQ(s.num_keys(), n0);
  EXPECT_FALSE(s.check({"cd/a"}));
}

inline void check_multi_and_append(Store& s) {
  s.multi_set({"ma/1", "ma/2"}, {"x1", std::string("x\0002", 3)});
  EXPECT_EQ(s.multi_get({"ma/1", "ma/2"}), (std::vector<std::string>{"x1", std::string("x\0002", 3)}));
  EXPECT_TRUE(s.multi_get({}).empty());
  s.append("ma/ap", "ab");
  s.append("ma/ap", std::string("\0cd", 3));
  EXPECT_EQ(s.get("ma/ap"), std::string("ab\0cd", 5));
  // A key that already holds exactly the appended bytes (torch's legacy fallback stops early here).
  s.set("ma/same", "xy");
  s.append("ma/same", "xy");
  EXPECT_EQ(s.get("ma/same"), "xyxy");
  s.set("ma/emptyval", "");
  s.append("ma/emptyval", "z");
  EXPECT_EQ(s.get("ma/emptyval"), "z");
  EXPECT_THROW(s.multi_set({"a"}, {}), store::StoreError);
}

// A two-key wait that a second client completes one key at a time.
inline void check_deferred_wait(Store& s, const StoreFactory& make) {
  auto other = make();
  std::atomic<bool> second_set{false};
  std::thread waker([&] {
    std::this_thread::sleep_for(100ms);
    other->set("dw/late1", "a");
    std::this_thread::sleep_for(100ms);
    second_set = true;
    other->add("dw/late2", 1);
  });
  s.wait({"dw/late1", "dw/late2"}, 10s);
  EXPECT_TRUE(second_set.load()) << "a two-key wait returned before its second key existed";
  waker.join();
  EXPECT_EQ(s.get("dw/late2"), "1");
}

// A wait that times out: TimeoutError naming the key and the timeout, in about the timeout, and the same
// store object keeps working afterwards (v2: after CANCEL_WAIT; legacy: after a transparent reconnect).
inline void check_wait_timeout(Store& s, const StoreFactory& make) {
  auto t0 = std::chrono::steady_clock::now();
  try {
    s.wait({"wt/never", "wt/also"}, 300ms);
    ADD_FAILURE() << "wait on missing keys did not time out";
  } catch (const store::TimeoutError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("wt/never"), std::string::npos) << msg;
    EXPECT_NE(msg.find("300 ms"), std::string::npos) << msg;
  }
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 5s);

  // The timed-out key appears later: a stale registration must not corrupt this client's next replies.
  make()->set("wt/never", "now");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(s.add("wt/counter", 1), 1);
  EXPECT_EQ(s.get("wt/never"), "now");
  EXPECT_TRUE(s.check({"wt/never"}));

  auto old = s.timeout();
  s.set_timeout(200ms);
  try {
    s.get("wt/missing_get");
    ADD_FAILURE() << "get of a missing key did not time out";
  } catch (const store::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("wt/missing_get"), std::string::npos) << e.what();
  }
  s.set_timeout(old);
  EXPECT_EQ(s.add("wt/counter", 1), 2);
}

inline void check_barrier(const StoreFactory& make, int n) {
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto s = make();
      std::this_thread::sleep_for(std::chrono::milliseconds(30 * i));
      s->barrier("br/b1", n, 10s);
      ++done;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), n);
  auto s = make();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(s->barrier("br/alone", 2, 200ms), store::TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// Many threads sharing one client: every request/reply pair must stay matched.
inline void check_thread_safety(Store& s) {
  constexpr int kThreads = 8, kAdds = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        s.add("ts/sum", 1);
        s.set("ts/own" + std::to_string(t), std::to_string(i));
        EXPECT_EQ(s.get("ts/own" + std::to_string(t)), std::to_string(i));
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(s.add("ts/sum", 0), kThreads * kAdds);
}

// Queues (torch >= 2.8; the v2 dialect only): FIFO order, length, a non-blocking pop on an empty queue, a
// non-empty queue counts as a present key (CHECK/WAIT), a blocking pop is woken by another client's push,
// and a queue is not a key (num_keys, list_keys).
inline void check_queues(Store& s, const StoreFactory& make) {
  const auto keys_before = s.num_keys();
  EXPECT_EQ(s.queue_len("q/a"), 0);
  EXPECT_FALSE(s.queue_pop("q/a", false).has_value());
  EXPECT_FALSE(s.check({"q/a"}));
  s.queue_push("q/a", "1");
  s.queue_push("q/a", std::string("\0two", 4));
  EXPECT_EQ(s.queue_len("q/a"), 2);
  EXPECT_TRUE(s.check({"q/a"})) << "a non-empty queue counts as present";
  EXPECT_EQ(s.num_keys(), keys_before) << "a queue is not a key";
  EXPECT_EQ(s.queue_pop("q/a", false), std::optional<std::string>("1"));
  EXPECT_EQ(s.queue_pop("q/a", true), std::optional<std::string>(std::string("\0two", 4)));
  EXPECT_EQ(s.queue_len("q/a"), 0);
  EXPECT_FALSE(s.check({"q/a"})) << "an empty queue is not present";
  auto pusher = make();
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    pusher->queue_push("q/b", "late");
  });
  EXPECT_EQ(s.queue_pop("q/b", true), std::optional<std::string>("late"));
  t.join();
}

// compare_set creating a missing key wakes its waiters (as torch's libuv server); delete_key does not make a
// waited key appear; list_keys lists keys, not queues.
inline void check_compare_set_wakes_and_list_keys(Store& s, const StoreFactory& make) {
  auto setter = make();
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(setter->compare_set("cw/k", "", "v"), "v");
  });
  s.wait({"cw/k"}, 5s);
  t.join();
  EXPECT_EQ(s.get("cw/k"), "v");
  s.set("cw/gone", "x");
  EXPECT_TRUE(s.delete_key("cw/gone"));
  EXPECT_FALSE(s.delete_key("cw/gone"));
  EXPECT_FALSE(s.check({"cw/gone"}));
  auto keys = s.list_keys();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "cw/k"), keys.end());
  EXPECT_EQ(std::find(keys.begin(), keys.end(), "cw/gone"), keys.end());
}

// More keys than the server handles in one slice (detail::kSliceKeys): the answers are the one-shot ones.
inline void check_big_multi(Store& s) {
  std::vector<std::string> keys, values;
  for (int i = 0; i < 5000; ++i) {
    keys.push_back("big/" + std::to_string(i));
    values.push_back(std::to_string(i * 3));
  }
  s.multi_set(keys, values);
  EXPECT_TRUE(s.check(keys));
  EXPECT_EQ(s.multi_get(keys), values);
  keys.push_back("big/absent");
  EXPECT_FALSE(s.check(keys));
}

}  // namespace ctrun::test
