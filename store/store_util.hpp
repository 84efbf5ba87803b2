#pragma once
// Small helpers shared by every Store implementation (and the server): one wording for timeout errors,
// one parser for ADD operands (C++ stoll semantics, as PyTorch's servers), one size check.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.hpp"

namespace ctrun::store {

// "wait timeout after 1000 ms for keys ['/a', '/b']: ... " — printable even for binary keys.
std::string wait_timeout_message(const std::vector<std::string>& keys, Duration timeout);

// Parses the value of an ADD target like std::stoll: optional whitespace, sign, leading digits
// ("12abc" -> 12). nullopt if there are no digits or the number overflows.
std::optional<std::int64_t> parse_stoll(std::string_view value);

// parse_stoll or StoreError naming the key.
std::int64_t parse_add_operand(const std::string& key, std::string_view value);

// ADD's arithmetic, used by Keyspace::add (every store and the server): the new value of `key` (current
// value or none, plus delta), or StoreError if the current value is not a decimal integer or the sum
// overflows int64 (PyTorch's servers wrap around silently; we refuse, and leave the value unchanged).
std::int64_t add_result(const std::string& key, const std::string* current, std::int64_t delta);

// now + d, saturating (Duration::max() is "forever").
Clock::time_point deadline_after(Duration d);

// Escapes non-printable bytes as \xNN for log and error messages; long keys are cut.
std::string printable_key(std::string_view key, std::size_t max_len = 200);

void check_multi_set_sizes(const std::vector<std::string>& keys, const std::vector<std::string>& values);

// ---- what a client does for torch <= 2.0 servers, which have no APPEND and no BARRIER ----

// A random value no key holds: append_by_compare_set's probe.
std::string append_probe_nonce();

// APPEND as a compare_set loop. torch's own fallback starts with compare_set(key, "", value) and wrongly stops when
// the key already held exactly `value`; instead read the current value with compare_set(key, N, N) for the nonce N
// (a missing key returns N and creates nothing; a present one returns its value unchanged), then swap current ->
// current + value.
template <class CompareSet>
void append_by_compare_set(CompareSet&& compare_set, const std::string& key, std::string_view value,
                           const std::string& nonce) {
  for (;;) {
    auto current = compare_set(key, nonce, nonce);
    if (current == nonce) current.clear();  // missing: compare_set(key, "", ...) creates it
    std::string desired = current + std::string(value);
    if (compare_set(key, current, desired) == desired) return;
  }
}

// BARRIER as torch 1.13's store-based barrier: count arrivals with ADD, poll with ADD 0 every 10 ms. The key ends
// up holding the same decimal count as a server-side BARRIER. TimeoutError after `timeout`.
void barrier_by_add(const std::function<std::int64_t(const std::string&, std::int64_t)>& add, const std::string& key,
                    std::int64_t world_size, Duration timeout);

}  // namespace ctrun::store
