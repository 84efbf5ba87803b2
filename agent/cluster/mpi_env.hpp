#pragma once
// MPI launchers: `mpirun -np N --map-by ppr:1:node ctrun ...` runs one agent per node. Open MPI's
// OMPI_COMM_WORLD_SIZE/RANK (or MPICH/Hydra's PMI_SIZE/PMI_RANK) give --nnodes and --node-rank; the MPI launcher
// knows no master host, so --master-addr/--master-port come from MASTER_ADDR/MASTER_PORT when the user exported
// them (`mpirun -x MASTER_ADDR=node01`), and a note says so when they are missing for several nodes.

#include <optional>

#include "agent/cluster/derived_defaults.hpp"

namespace ctrun::agent::cluster {

// nullopt when no MPI launcher's variables are set. `pmi` false: only Open MPI's (srun also sets PMI_*).
std::optional<DerivedDefaults> derive_mpi(const EnvLookup& env, const GivenLookup& given, bool pmi);

}  // namespace ctrun::agent::cluster
