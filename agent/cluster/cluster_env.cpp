#include "agent/cluster/cluster_env.hpp"

#include "agent/cluster/kubeflow_env.hpp"
#include "agent/cluster/mpi_env.hpp"
#include "agent/cluster/slurm_env.hpp"

namespace ctrun::agent::cluster {

std::optional<DerivedDefaults> derive_cluster_defaults(const EnvLookup& env, const GivenLookup& given, bool no_slurm) {
  if (auto mpi = derive_mpi(env, given, /*pmi=*/false)) return mpi;
  if (!no_slurm) {
    if (auto slurm = derive_slurm(env, given)) return slurm;
  }
  // srun --mpi=pmi2 sets PMI_* too: with --no-slurm, those are Slurm's and stay unused.
  const bool under_slurm = env("SLURM_JOB_ID").has_value();
  if (!(no_slurm && under_slurm)) {
    if (auto mpi = derive_mpi(env, given, /*pmi=*/true)) return mpi;
  }
  return derive_kubeflow(env, given);
}

}  // namespace ctrun::agent::cluster
