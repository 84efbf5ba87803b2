#pragma once
// Which cluster environment speaks for this agent, first match wins: Open MPI's mpirun (the process's direct
// launcher), a Slurm step (unless --no-slurm / PET_NO_SLURM=1), MPICH/Hydra's PMI, Kubeflow's variables.

#include <optional>

#include "agent/cluster/derived_defaults.hpp"

namespace ctrun::agent::cluster {

std::optional<DerivedDefaults> derive_cluster_defaults(const EnvLookup& env, const GivenLookup& given, bool no_slurm);

}  // namespace ctrun::agent::cluster
