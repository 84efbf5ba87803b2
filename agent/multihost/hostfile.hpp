#pragma once
// The hosts of a multi-host launch: MPI/DeepSpeed hostfiles (`host slots=N`, `#` comments, blank lines),
// `--hosts a,b:2`, and DeepSpeed's --include/--exclude filters (`host1:0,2@host2`: hosts separated by `@`,
// optional slot indices after `:`).

#include <optional>
#include <string>
#include <vector>

namespace ctrun::agent::multihost {

struct Host {
  std::string name;
  std::optional<int> slots;     // from the hostfile / `host:N`; unknown when not given
  std::vector<int> slot_ids;    // the chosen slots when --include/--exclude named some (else every slot)
  bool slots_filtered = false;  // slot_ids is a subset: the host's CUDA_VISIBLE_DEVICES
};

// Throws std::invalid_argument naming the line.
std::vector<Host> parse_hostfile(const std::string& text, const std::string& source);
std::vector<Host> read_hostfile(const std::string& path);
std::vector<Host> parse_host_list(const std::string& text);

// DeepSpeed's semantics: --include keeps only the named hosts (and, with `:i,j`, only those slots); --exclude
// drops named hosts or only the named slots. Both at once, unknown hosts, slots of a host without a slot count or
// beyond it, and an empty result are errors (std::invalid_argument).
std::vector<Host> filter_hosts(std::vector<Host> hosts, const std::optional<std::string>& include,
                               const std::optional<std::string>& exclude);

}  // namespace ctrun::agent::multihost
