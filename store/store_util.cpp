#include "store/store_util.hpp"

#include <cctype>
#include <limits>
#include <random>
#include <thread>

#include <fmt/format.h>

namespace ctrun::store {

std::string printable_key(std::string_view key, std::size_t max_len) {
  std::string out;
  for (std::size_t i = 0; i < key.size() && i < max_len; ++i) {
    auto c = static_cast<unsigned char>(key[i]);
    if (std::isprint(c) && c != '\\')
      out.push_back(static_cast<char>(c));
    else
      out += fmt::format("\\x{:02x}", c);
  }
  if (key.size() > max_len) out += fmt::format("...({} bytes)", key.size());
  return out;
}

std::string wait_timeout_message(const std::vector<std::string>& keys, Duration timeout) {
  std::string list;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    // Appended piecewise: gcc 12 gives a false -Wrestrict warning on "'" + std::string + "'".
    if (i) list.append(", ");
    list.push_back('\'');
    list.append(printable_key(keys[i]));
    list.push_back('\'');
  }
  return fmt::format(
      "wait timeout after {} ms for keys [{}]: no process set them in time. "
      "Check that every rank/agent started and reached this point, or raise the timeout.",
      timeout.count(), list);
}

std::optional<std::int64_t> parse_stoll(std::string_view v) {
  std::size_t i = 0;
  while (i < v.size() && std::isspace(static_cast<unsigned char>(v[i]))) ++i;
  bool neg = false;
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) neg = v[i++] == '-';
  if (i >= v.size() || !std::isdigit(static_cast<unsigned char>(v[i]))) return std::nullopt;
  // Accumulate as a negative number so that INT64_MIN parses.
  std::int64_t acc = 0;
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  for (; i < v.size() && std::isdigit(static_cast<unsigned char>(v[i])); ++i) {
    int d = v[i] - '0';
    if (acc < (kMin + d) / 10) return std::nullopt;
    acc = acc * 10 - d;
  }
  if (neg) return acc;
  if (acc == kMin) return std::nullopt;
  return -acc;
}

std::int64_t parse_add_operand(const std::string& key, std::string_view value) {
  auto n = parse_stoll(value);
  if (!n)
    throw StoreError(fmt::format("add on key '{}': its value '{}' is not a decimal integer", printable_key(key),
                                 printable_key(value, 40)));
  return *n;
}

std::int64_t add_result(const std::string& key, const std::string* current, std::int64_t delta) {
  if (!current) return delta;
  std::int64_t sum = 0;
  if (__builtin_add_overflow(parse_add_operand(key, *current), delta, &sum))
    throw StoreError(fmt::format("add on key '{}': {} + {} overflows int64", printable_key(key),
                                 printable_key(*current, 40), delta));
  return sum;
}

void check_multi_set_sizes(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size())
    throw StoreError(fmt::format("multi_set: {} keys but {} values", keys.size(), values.size()));
}

Clock::time_point deadline_after(Duration d) {
  auto now = Clock::now();
  if (d <= Duration::zero()) return now;
  if (d >= std::chrono::duration_cast<Duration>(Clock::time_point::max() - now)) return Clock::time_point::max();
  return now + d;
}

std::string append_probe_nonce() {
  std::random_device rd;
  std::string nonce =
      "\x01"
      "ctrun-append-probe-";
  for (int i = 0; i < 4; ++i) nonce += fmt::format("{:08x}", rd());
  return nonce;
}

void barrier_by_add(const std::function<std::int64_t(const std::string&, std::int64_t)>& add, const std::string& key,
                    std::int64_t world_size, Duration timeout) {
  constexpr Duration kPoll{10};
  const auto deadline = deadline_after(timeout);
  auto count = add(key, 1);
  while (count < world_size) {
    if (Clock::now() >= deadline)
      throw TimeoutError(
          fmt::format("barrier on key '{}' timed out after {} ms: {} of {} participants arrived. Check that every "
                      "participant started and reached the barrier, or raise the timeout.",
                      printable_key(key), timeout.count(), count, world_size));
    std::this_thread::sleep_for(kPoll);
    count = add(key, 0);
  }
}

}  // namespace ctrun::store
