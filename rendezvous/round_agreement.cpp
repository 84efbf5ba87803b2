#include "rendezvous/round_agreement.hpp"

#include <string>

namespace ctrun::rdzv {

std::optional<int> agree_restart_count(store::Store& s, int mine, int group_world_size, store::Duration timeout,
                                       const std::function<bool()>& round_over) {
  const std::string key = "restart_count";
  const std::string desired = std::to_string(mine);
  std::string expected;  // missing
  // Each failed try means another member raised the value, so this ends within group_world_size tries.
  for (int tries = 0; tries <= group_world_size; ++tries) {
    std::string now = s.compare_set(key, expected, desired);
    if (now == desired || std::stoi(now) >= mine) break;  // ours is in, or a count at least as large
    expected = now;                                       // a smaller one: replace it
  }
  if (s.add("restart_count_members", 1) >= group_world_size) s.set("restart_count_ready", "1");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const store::Duration slice = std::chrono::milliseconds(500);
  for (;;) {
    try {
      s.wait({"restart_count_ready"}, slice);
      return std::stoi(s.get(key));
    } catch (const store::TimeoutError&) {
      if (std::chrono::steady_clock::now() + slice > deadline) throw;
      if (round_over()) return std::nullopt;
    }
  }
}

}  // namespace ctrun::rdzv
