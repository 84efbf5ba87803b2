#pragma once
// Small helpers shared by every Store implementation (and the server): one wording for timeout errors,
// one parser for ADD operands (C++ stoll semantics, as PyTorch's servers), one size check.

#include <cstdint>
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

// Escapes non-printable bytes as \xNN for log and error messages; long keys are cut.
std::string printable_key(std::string_view key, std::size_t max_len = 200);

void check_multi_set_sizes(const std::vector<std::string>& keys, const std::vector<std::string>& values);

}  // namespace ctrun::store
