#include "rendezvous/loss_watch.hpp"

#include <charconv>
#include <map>

#include <fmt/format.h>

#include "common/text.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/peek.hpp"
#include "rendezvous/records.hpp"

namespace ctrun::rdzv {

std::string on_close_entry(int rank) { return fmt::format("-{},", rank); }
std::string on_silence_entry(int rank) { return fmt::format("!{},", rank); }
std::string on_reconnect_entry(int rank) { return fmt::format("+{},", rank); }

std::set<int> lost_ranks(std::string_view log) {
  std::map<int, int> open;  // rank -> its closes less its reconnects
  while (!log.empty()) {
    auto end = log.find(',');
    auto entry = log.substr(0, end);
    log = end == std::string_view::npos ? std::string_view() : log.substr(end + 1);
    if (entry.size() < 2 || (entry[0] != '-' && entry[0] != '+' && entry[0] != '!')) continue;
    const auto rank = text::parse_int<int>(entry.substr(1));
    if (!rank || *rank < 0) continue;
    open[*rank] += entry[0] == '+' ? -1 : 1;
  }
  std::set<int> out;
  for (auto [rank, closes] : open)
    if (closes > 0) out.insert(rank);
  return out;
}

std::set<int> settlers(const std::set<int>& lost, int members) {
  std::set<int> out;
  if (members <= 0) return out;
  auto live_from = [&](int r) {
    for (int i = 0; i < members; ++i, r = (r + 1) % members)
      if (!lost.count(r)) return r;
    return -1;
  };
  if (int r = live_from(0); r >= 0) out.insert(r);
  for (int s : lost)
    if (s >= 0 && s < members)
      if (int r = live_from((s + 1) % members); r >= 0) out.insert(r);
  return out;
}

LossWatch::Outcome LossWatch::settle(const Membership& m, store::Duration grace) {
  // A peek, not a get: the key is there (its wait fired), and a get over TCP is a WAIT and a GET.
  const auto log = peek(store_, keys_.lost(m.round));
  return log ? settle_log(m, *log, grace) : Outcome::kBlip;
}

LossWatch::Outcome LossWatch::settle_log(const Membership& m, std::string_view log, store::Duration grace) {
  const auto ranks = lost_ranks(log);
  if (ranks.empty()) return Outcome::kBlip;
  if (!settlers(ranks, m.members).count(m.rank)) return Outcome::kNothing;
  // A round that ended well: its members close their connections as they exit, one before another.
  if (store_.check({keys_.exit_done(m.round)})) return Outcome::kBlip;
  bool declared = false;
  for (int rank : ranks) {
    if (rank >= m.members || rank == m.rank) continue;
    if (store_.check({keys_.exit(m.round, rank)})) continue;  // it left the round before its connection closed
    auto who = NodeRecord::decode(store_.get(keys_.member(m.round, rank))).describe();
    const bool silent = log.find(on_silence_entry(rank)) != std::string::npos;
    declared |= mark_exit(
        store_, keys_, m.round, rank, m.members, "dead", kOverDead,
        silent ? fmt::format("node {} (group rank {}) lost heartbeat: its agent sent the rendezvous store nothing "
                             "for {:.1f} s (hung, or its host is cut off)",
                             who, rank, std::chrono::duration<double>(silence_).count())
               : fmt::format("node {} (group rank {}) closed its connection to the rendezvous store (its agent "
                             "exited or was killed) and did not reconnect within {:.1f} s",
                             who, rank, std::chrono::duration<double>(grace).count()));
  }
  return declared ? Outcome::kDeclared : Outcome::kBlip;
}

}  // namespace ctrun::rdzv
