#pragma once
// The variables a preloaded worker cannot have per rank. A warm process (agent/preload/warm_process.hpp) imports
// the --preload modules once, in the job's common environment; whatever a variable changes at import time
// (thread pools sized, libraries loaded, devices enumerated, the interpreter's own settings) is then the same in
// every worker forked from it, whatever that worker's own value. Each is named here, once: when a rank's value
// differs from the warm process's, that rank is launched cold (with a warning) so that the variable means what
// it means without --preload.
//
// The list (exact names, or prefixes ending in '_' or naming a family):
//   PYTHON*            the interpreter reads them at start (PYTHONPATH, PYTHONHASHSEED, PYTHONWARNINGS, ...)
//   LD_*               the dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH, LD_BIND_NOW)
//   MALLOC_*, GLIBC_TUNABLES   the allocator, set up before main
//   OMP_*, KMP_*, GOMP_*, MKL_*, OPENBLAS_*, GOTO*, BLIS_*, VECLIB_*, NUMEXPR_*   thread pools and BLAS choices
//   CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, CUDA_MODULE_LOADING, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES,
//   NVIDIA_VISIBLE_DEVICES     which devices a process may see
//   TORCH_*, PYTORCH_*         read by torch at import (logging, allocator and dispatch settings); not the NCCL
//                              Flight Recorder's, read when a ProcessGroupNCCL is made (after the fork)
//   LANG, LC_*                 the interpreter's locale, its stdio and file system encodings
// ctrun's own per-rank variables (RANK, LOCAL_RANK, TORCHELASTIC_*, MASTER_*) are not on it: programs read them
// at run time, after the fork. A module that reads them at import must not be preloaded (docs/cli.md).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ctrun::agent::preload {

// True for a variable of the list above.
bool is_job_wide_variable(std::string_view name);

// The first job-wide variable whose value in `worker` (a rank's "K=V" environment) is not its value in `warm`
// (the warm process's), set in one and unset in the other included, as "NAME (warm process: A, this rank: B)";
// nullopt when there is none.
std::optional<std::string> job_wide_difference(const std::vector<std::string>& warm,
                                               const std::vector<std::string>& worker);

}  // namespace ctrun::agent::preload
