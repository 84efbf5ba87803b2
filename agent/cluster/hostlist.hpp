#pragma once
// Slurm's hostlist syntax, expanded without Slurm: `node[01-04,07],gpu-a[1-2]` -> node01 node02 node03 node04
// node07 gpu-a1 gpu-a2. Several bracket groups multiply (`r[1-2]n[1-2]` -> r1n1 r1n2 r2n1 r2n2); a range keeps
// the width of its lower bound (`n[08-10]` -> n08 n09 n10, `n[9-11]` -> n9 n10 n11), as `scontrol show hostnames`.

#include <cstddef>
#include <string>
#include <vector>

namespace ctrun::agent::cluster {

// Bound on the expansion: a malformed or hostile list cannot make ctrun allocate without limit.
inline constexpr std::size_t kMaxHosts = 1 << 20;

// Throws std::invalid_argument with a message naming the bad part.
std::vector<std::string> expand_hostlist(const std::string& list);

// The first host (the endpoint host of a Slurm step); the whole list is checked.
std::string first_host(const std::string& list);

}  // namespace ctrun::agent::cluster
