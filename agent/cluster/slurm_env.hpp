#pragma once
// Slurm: `srun --ntasks-per-node=1 ctrun ...` runs one agent per node of the step. From the step's variables:
// --nnodes (SLURM_STEP_NUM_NODES, else SLURM_NNODES / SLURM_JOB_NUM_NODES), --node-rank (SLURM_NODEID),
// --master-addr (the first host of SLURM_STEP_NODELIST / SLURM_NODELIST / SLURM_JOB_NODELIST: the host of node
// rank 0, so rank 0 is always there, unlike the `scontrol show hostnames | head -1` recipe with c10d ordering),
// --master-port (15000 + the job id's last 4 digits, as Lightning, the same on every node), --rdzv-id
// (JOBID.STEPID), --nproc-per-node (SLURM_GPUS_ON_NODE, else SLURM_CPUS_PER_TASK, else SLURM_CPUS_ON_NODE), and
// the first restart count (SLURM_RESTART_COUNT, after a requeue). With --rdzv-backend c10d and no endpoint, the
// endpoint is the first host at that port.

#include <optional>

#include "agent/cluster/derived_defaults.hpp"

namespace ctrun::agent::cluster {

// nullopt when this is not a Slurm step (no SLURM_JOB_ID / SLURM_STEP_ID / SLURM_NODEID). A Slurm allocation
// without a step (ctrun run straight from a multi-node batch script) gives notes only. Throws ClusterEnvError
// when srun started several ctrun tasks on one node.
std::optional<DerivedDefaults> derive_slurm(const EnvLookup& env, const GivenLookup& given);

}  // namespace ctrun::agent::cluster
