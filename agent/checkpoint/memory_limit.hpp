#pragma once
// How much memory a node's checkpoints may take (--checkpoint-memory). The default: half of the machine's memory
// (MemTotal), and never more than /dev/shm has free when the job starts (snapshots live there, and a tmpfs that
// fills kills its writers with SIGBUS instead of an error). Workers check it before they allocate anything.

#include <cstdint>
#include <string>

namespace ctrun::agent::checkpoint {

struct MemoryFacts {
  std::uint64_t mem_total = 0;  // /proc/meminfo MemTotal
  std::uint64_t shm_free = 0;   // statvfs of the snapshot root: blocks available to us
};

MemoryFacts read_memory_facts(const std::string& root = "/dev/shm");

std::uint64_t default_checkpoint_memory(const MemoryFacts& facts);

// The rule with this machine's numbers, for the log: "half of 23.4 GiB of memory, at most the 11.7 GiB free in
// /dev/shm".
std::string describe_default(const MemoryFacts& facts, const std::string& root = "/dev/shm");

}  // namespace ctrun::agent::checkpoint
