#include "agent/preload/job_wide_env.hpp"

#include <gtest/gtest.h>

namespace ctrun::agent::preload {
namespace {

TEST(JobWideEnv, NamesTheVariablesReadAtImport) {
  for (const char* name : {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "PYTHONHASHSEED",
                           "LD_PRELOAD", "TORCH_CPP_LOG_LEVEL", "KMP_AFFINITY", "GLIBC_TUNABLES"})
    EXPECT_TRUE(is_job_wide_variable(name)) << name;
  // ctrun's per-rank variables are read after the fork.
  for (const char* name : {"RANK", "LOCAL_RANK", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE", "MASTER_PORT",
                           "NCCL_ASYNC_ERROR_HANDLING", "HOME"})
    EXPECT_FALSE(is_job_wide_variable(name)) << name;
}

TEST(JobWideEnv, APerRankValueIsADifference) {
  const std::vector<std::string> warm = {"OMP_NUM_THREADS=4", "PATH=/bin", "CUDA_VISIBLE_DEVICES=0,1"};
  EXPECT_EQ(job_wide_difference(warm, {"CUDA_VISIBLE_DEVICES=0,1", "OMP_NUM_THREADS=4", "RANK=1", "PATH=/usr/bin"}),
            std::nullopt);
  EXPECT_EQ(job_wide_difference(warm, {"OMP_NUM_THREADS=4", "CUDA_VISIBLE_DEVICES=1"}),
            "CUDA_VISIBLE_DEVICES (warm process: '0,1', this rank: '1')");
  EXPECT_EQ(job_wide_difference(warm, {"CUDA_VISIBLE_DEVICES=0,1"}),
            "OMP_NUM_THREADS (warm process: '4', this rank: unset)");
  EXPECT_EQ(job_wide_difference(warm, {"OMP_NUM_THREADS=4", "CUDA_VISIBLE_DEVICES=0,1", "MKL_NUM_THREADS=1"}),
            "MKL_NUM_THREADS (warm process: unset, this rank: '1')");
}

}  // namespace
}  // namespace ctrun::agent::preload
