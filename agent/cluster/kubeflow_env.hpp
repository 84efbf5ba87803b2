#pragma once
// Kubeflow's training operator (PyTorchJob) starts one pod per node with torchrun's PET_* variables
// (PET_NNODES as N or MIN:MAX, PET_NPROC_PER_NODE, PET_RDZV_ENDPOINT, PET_RDZV_BACKEND, PET_MAX_RESTARTS,
// PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT), which ctrun reads as torchrun does, plus plain `RANK` (the
// pod's index: a *node* rank here, not a worker's), `WORLD_SIZE` (pods) and `MASTER_ADDR`/`MASTER_PORT`. This
// fills what the PET_* variables leave open: --node-rank from RANK, --master-addr/--master-port from
// MASTER_ADDR/MASTER_PORT, c10d for an elastic MIN:MAX, and a c10d endpoint from the master address.

#include <optional>

#include "agent/cluster/derived_defaults.hpp"

namespace ctrun::agent::cluster {

// nullopt unless the operator's variables are there (PET_NNODES, PET_MASTER_ADDR or PET_RDZV_ENDPOINT).
std::optional<DerivedDefaults> derive_kubeflow(const EnvLookup& env, const GivenLookup& given);

}  // namespace ctrun::agent::cluster
