#pragma once
// What a cluster's environment (Slurm, an MPI launcher, Kubeflow's training operator) says about the job, as
// flag values. They rank below everything the user said (command line > --config > PET_*), so explicit flags
// always win; each value remembers the variable it came from, for the one line ctrun prints.

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ctrun::agent::cluster {

// An environment variable by name.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
// The value the user gave a flag (by dest: "nnodes"), through the command line, --config or PET_*; nullopt when
// the flag is left at its default.
using GivenLookup = std::function<std::optional<std::string>(const std::string&)>;

struct DerivedValue {
  std::string value;
  std::string from;  // "SLURM_NODEID", "first host of SLURM_STEP_NODELIST=node[01-04]"
};

struct DerivedDefaults {
  std::string source;                                 // "Slurm job 123 step 0", "Open MPI", "Kubeflow"
  std::map<std::string, DerivedValue> flags;          // flag dest -> value (only flags the user did not give)
  std::optional<DerivedValue> initial_restart_count;  // TORCHELASTIC_RESTART_COUNT of the first attempt
  std::vector<std::string> notes;                     // hints that are not values ("MASTER_ADDR not set: ...")

  bool empty() const { return flags.empty() && !initial_restart_count && notes.empty(); }
  // Sets `dest` unless the user gave it.
  void derive(const GivenLookup& given, const std::string& dest, std::string value, std::string from);
  // One line: "ctrun: from Slurm job 12 step 0: --nnodes 2 (SLURM_NNODES), ...".
  std::string describe() const;
};

// A cluster environment that makes no sense for one agent per node (several ctrun tasks on a node under srun).
class ClusterEnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ctrun::agent::cluster
