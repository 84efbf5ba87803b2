#pragma once
// Byte counts as people write and read them: "512M", "8G", "1.5GiB", "4096" in (--checkpoint-memory), "128.0 MiB"
// out (every message that names a size). Binary multiples: K = 1024.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ctrun::agent {

// A count of bytes with an optional unit K, M, G or T (each also as KiB/KB, ...; case-insensitive): nullopt for
// anything else (negative, empty, an unknown unit, past 2^64).
std::optional<std::uint64_t> parse_memory_size(std::string_view text);

// "812 B", "1.5 KiB", "128.0 MiB", "7.8 GiB": one decimal from KiB up.
std::string format_bytes(std::uint64_t bytes);

}  // namespace ctrun::agent
