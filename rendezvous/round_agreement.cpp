#include "rendezvous/round_agreement.hpp"

#include <string>

#include <spdlog/spdlog.h>

#include "common/log.hpp"
#include "common/text.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::rdzv {

std::optional<int> agree_restart_count(store::Store& s, int mine, int group_world_size, store::Duration timeout,
                                       const std::function<bool()>& round_over) {
  const std::string key = "restart_count";
  const std::string desired = std::to_string(mine);
  std::string expected;  // missing
  // Each failed try means another member raised the value, so this ends within group_world_size tries.
  for (int tries = 0; tries <= group_world_size; ++tries) {
    std::string now = s.compare_set(key, expected, desired);
    if (now == desired || text::parse_int<int>(now).value_or(-1) >= mine) break;  // ours is in, or one as large
    expected = now;                                                               // a smaller one: replace it
  }
  if (s.add("restart_count_members", 1) >= group_world_size) s.set("restart_count_ready", "1");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const store::Duration slice = std::chrono::milliseconds(500);
  for (;;) {
    try {
      s.wait({"restart_count_ready"}, slice);
      const std::string agreed = s.get(key);
      if (auto count = text::parse_int<int>(agreed)) return count;
      throw RendezvousError("the round's restart count in the rendezvous store is not a number: '" + agreed + "'");
    } catch (const store::TimeoutError&) {
      if (std::chrono::steady_clock::now() + slice > deadline) throw;
      if (round_over()) return std::nullopt;
    }
  }
}

AgreedRound next_agreed_round(Handler& handler, int restart_count, store::Duration agreement_timeout,
                              int max_broken_rounds) {
  // A round that breaks before every member arrived is left at once; each try waits at most join_timeout.
  for (int tries = 0;; ++tries) {
    RoundInfo round = handler.next_rendezvous();
    if (round.group_world_size <= 1 || !round.store || parse_backend(handler.backend()) == Backend::kStatic)
      return {std::move(round), restart_count};
    std::optional<int> agreed;
    try {
      agreed = agree_restart_count(*round.store, restart_count, round.group_world_size, agreement_timeout,
                                   [&] { return handler.num_nodes_waiting() > 0 || handler.round_broken(); });
    } catch (const store::StoreError& e) {
      throw RendezvousError(std::string("the members of the round did not all agree on a restart count: ") + e.what());
    }
    if (agreed) return {std::move(round), *agreed};
    log::get("rdzv")->warn("round {} ended before it started ({}); joining the next round", round.round,
                           handler.restart_reason());
    if (tries >= max_broken_rounds) throw RendezvousError("rounds kept breaking before they started");
  }
}

MembershipCheck check_membership(Handler& handler) {
  MembershipCheck c;
  try {
    c.waiting = handler.num_nodes_waiting();
    c.broken = c.waiting == 0 && handler.round_broken();
    if (c.changed()) c.reason = handler.restart_reason();
  } catch (const std::exception& e) {
    // The rendezvous store is gone: the round ends; joining the next one says what failed.
    c.broken = true;
    c.store_lost = true;
    c.reason = std::string("the rendezvous store failed: ") + e.what();
  }
  return c;
}

}  // namespace ctrun::rdzv
