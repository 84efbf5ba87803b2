#pragma once
// A snapshot's digest (docs/checkpoint.md, "Digests"): a worker of a multi-node job, when it saves, ends the snapshot
// file with a 64-byte trailer that says what its bytes were, and an agent checks it before it keeps or loads a copy
// that crossed from another node: a replica before it is committed, a fetched snapshot before it is committed, a
// replica before it becomes a rank's snapshot. So a snapshot corrupted in a holder's memory or on the way is never
// loaded; the job resumes from the newest step every rank holds intact.
//
//   trailer = "CTRUNDG1" | u32 algorithm (1) | u32 root | u64 chunk bytes | u64 payload bytes | 32 zero bytes
//   root    = CRC-32 of the chunks' CRC-32s (little-endian u32 each), the chunks being the payload (every byte of the
//             file before the trailer: the header, the pickle and the storages) cut every `chunk bytes`
//
// CRC-32 (zlib's, on both sides: Python's zlib.crc32 and the crypto module's), not a cryptographic hash: it detects
// corruption at 3x SHA-256's speed (5 GB/s against 1.5 per core), and a forger never gets to send a replica (only an
// agent that proved the job's secret, from the node the ring assigns, does: replica_transfer.hpp). The chunks let
// both sides spread the work over a few threads. Written by agent/checkpoint/python/checkpoint/_snapshot.py.

#include <cstdint>
#include <string>

namespace ctrun::agent::checkpoint {

inline constexpr std::size_t kTrailerBytes = 64;
inline constexpr std::uint64_t kDigestChunk = 16 << 20;  // what workers cut payloads by (_snapshot.DIGEST_CHUNK)

// The trailer of a snapshot whose bytes before it are `payload` (as a worker writes it; tests and benchmarks seal
// the snapshots they make with it).
std::string digest_trailer(const void* payload, std::uint64_t size, std::uint64_t chunk = kDigestChunk);

// "" when the file at `path` ends with a trailer that matches its bytes and its header names `rank` and `step`;
// otherwise why not (no trailer: saved by a single-node attempt; another rank or step; a digest mismatch).
std::string check_snapshot(const std::string& path, int rank, std::int64_t step);

}  // namespace ctrun::agent::checkpoint
