#pragma once
// A read of a key that may be missing, in one store operation. Store::get waits for the key (over TCP a WAIT and
// a GET: two round trips, since a GET of a missing key makes torch's servers close the connection) and a CHECK
// before it adds a third. compare_set(key, S, S) with a sentinel S that no rendezvous key ever holds is one round
// trip on every store (PyTorch's contract, store.hpp): a missing key returns S and creates nothing; a present one
// returns its value, unchanged (it differs from S). Only for keys whose values cannot be S.

#include <optional>
#include <string>
#include <string_view>

#include "store/store.hpp"

namespace ctrun::rdzv {

// Not a value any rendezvous key holds (decimal counters, JSON records, "kind: reason", tokens, "1").
inline constexpr std::string_view kAbsentSentinel = "\x01";

inline std::optional<std::string> peek(store::Store& store, const std::string& key) {
  auto v = store.compare_set(key, kAbsentSentinel, kAbsentSentinel);
  if (v == kAbsentSentinel) return std::nullopt;
  return v;
}

}  // namespace ctrun::rdzv
