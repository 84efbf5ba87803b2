// Slurm / MPI / Kubeflow variables -> launch defaults, and how they meet explicit flags in parse_command_line.
#include <gtest/gtest.h>

#include <map>

#include "agent/cluster/cluster_env.hpp"
#include "agent/cluster/kubeflow_env.hpp"
#include "agent/cluster/mpi_env.hpp"
#include "agent/cluster/slurm_env.hpp"
#include "agent/config/cli.hpp"

namespace ctrun::agent::cluster {
namespace {

using Vars = std::map<std::string, std::string>;

EnvLookup lookup(const Vars& vars) {
  return [vars](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const Vars kSlurm = {{"SLURM_JOB_ID", "4242"},
                     {"SLURM_STEP_ID", "0"},
                     {"SLURM_NODEID", "2"},
                     {"SLURM_NNODES", "4"},
                     {"SLURM_STEP_NUM_NODES", "4"},
                     {"SLURM_STEP_NODELIST", "gpu[07-10]"},
                     {"SLURM_JOB_NODELIST", "gpu[01-10]"},
                     {"SLURM_CPUS_ON_NODE", "16"},
                     {"SLURM_STEP_TASKS_PER_NODE", "1(x4)"}};

std::string value(const DerivedDefaults& d, const std::string& dest) {
  auto it = d.flags.find(dest);
  return it == d.flags.end() ? "<unset>" : it->second.value;
}

TEST(Slurm, DerivesTheStep) {
  auto d = derive_slurm(lookup(kSlurm), lookup({}));
  ASSERT_TRUE(d);
  EXPECT_EQ(value(*d, "nnodes"), "4");
  EXPECT_EQ(d->flags.at("nnodes").from, "SLURM_STEP_NUM_NODES");
  EXPECT_EQ(value(*d, "node_rank"), "2");
  EXPECT_EQ(value(*d, "master_addr"), "gpu07");  // the step's first host, not the job's
  EXPECT_EQ(value(*d, "master_port"), "19242");  // 15000 + 4242
  EXPECT_EQ(value(*d, "rdzv_id"), "4242.0");
  EXPECT_EQ(value(*d, "nproc_per_node"), "16");
  EXPECT_FALSE(d->initial_restart_count);
  std::string line = d->describe();
  EXPECT_NE(line.find("--node-rank 2 (SLURM_NODEID)"), std::string::npos) << line;
  EXPECT_NE(line.find("first host of SLURM_STEP_NODELIST=gpu[07-10]"), std::string::npos) << line;
}

TEST(Slurm, GpusRestartsAndC10d) {
  Vars v = kSlurm;
  v["SLURM_GPUS_ON_NODE"] = "8";
  v["SLURM_RESTART_COUNT"] = "2";
  auto d = derive_slurm(lookup(v), lookup({{"rdzv_backend", "c10d"}}));
  ASSERT_TRUE(d);
  EXPECT_EQ(value(*d, "nproc_per_node"), "8");
  EXPECT_EQ(value(*d, "rdzv_endpoint"), "gpu07:19242");
  EXPECT_EQ(value(*d, "master_addr"), "<unset>");
  ASSERT_TRUE(d->initial_restart_count);
  EXPECT_EQ(d->initial_restart_count->value, "2");
}

TEST(Slurm, GivenFlagsAreLeftAlone) {
  auto d = derive_slurm(lookup(kSlurm), lookup({{"nnodes", "2"}, {"master_addr", "head"}, {"nproc_per_node", "1"}}));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->flags.count("nnodes"), 0u);
  EXPECT_EQ(d->flags.count("master_addr"), 0u);
  EXPECT_EQ(d->flags.count("nproc_per_node"), 0u);
  EXPECT_EQ(value(*d, "node_rank"), "2");
}

TEST(Slurm, OutsideAStepOrSeveralTasksPerNode) {
  EXPECT_FALSE(derive_slurm(lookup({}), lookup({})));
  auto batch = derive_slurm(lookup({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NUM_NODES", "3"}}), lookup({}));
  ASSERT_TRUE(batch);
  EXPECT_TRUE(batch->flags.empty());
  ASSERT_EQ(batch->notes.size(), 1u);
  EXPECT_NE(batch->notes[0].find("srun --ntasks-per-node=1"), std::string::npos);
  EXPECT_FALSE(derive_slurm(lookup({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NUM_NODES", "1"}}), lookup({})));
  Vars v = kSlurm;
  v["SLURM_STEP_TASKS_PER_NODE"] = "2(x4)";
  EXPECT_THROW(derive_slurm(lookup(v), lookup({})), ClusterEnvError);
  v["SLURM_STEP_TASKS_PER_NODE"] = "1(x4)";
  v["SLURM_STEP_NODELIST"] = "gpu[07-";
  EXPECT_THROW(derive_slurm(lookup(v), lookup({})), ClusterEnvError);
}

TEST(Mpi, OpenMpiAndPmi) {
  Vars v = {{"OMPI_COMM_WORLD_SIZE", "2"},
            {"OMPI_COMM_WORLD_RANK", "1"},
            {"MASTER_ADDR", "127.0.0.2"},
            {"MASTER_PORT", "1234"}};
  auto d = derive_mpi(lookup(v), lookup({}), false);
  ASSERT_TRUE(d);
  EXPECT_EQ(value(*d, "nnodes"), "2");
  EXPECT_EQ(value(*d, "node_rank"), "1");
  EXPECT_EQ(value(*d, "master_addr"), "127.0.0.2");
  EXPECT_EQ(value(*d, "master_port"), "1234");
  EXPECT_TRUE(d->notes.empty());
  auto c10d = derive_mpi(lookup(v), lookup({{"rdzv_backend", "c10d"}}), false);
  EXPECT_EQ(value(*c10d, "rdzv_endpoint"), "127.0.0.2:1234");
  Vars pmi = {{"PMI_SIZE", "3"}, {"PMI_RANK", "0"}};
  EXPECT_FALSE(derive_mpi(lookup(pmi), lookup({}), false));
  auto p = derive_mpi(lookup(pmi), lookup({}), true);
  ASSERT_TRUE(p);
  EXPECT_EQ(value(*p, "nnodes"), "3");
  ASSERT_EQ(p->notes.size(), 1u);  // no MASTER_ADDR for 3 nodes: say where rank 0 is expected
  EXPECT_NE(p->notes[0].find("MASTER_ADDR"), std::string::npos);
}

TEST(Kubeflow, RankIsANodeRank) {
  Vars v = {{"PET_NNODES", "2"},
            {"PET_NPROC_PER_NODE", "4"},
            {"PET_MASTER_ADDR", "job-master-0"},
            {"PET_MASTER_PORT", "23456"},
            {"RANK", "1"},
            {"WORLD_SIZE", "2"}};
  auto given = [&](const std::string& dest) -> std::optional<std::string> {
    std::string pet = "PET_";
    for (char c : dest) pet += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return lookup(v)(pet);
  };
  auto d = derive_kubeflow(lookup(v), given);
  ASSERT_TRUE(d);
  EXPECT_EQ(value(*d, "node_rank"), "1");
  EXPECT_EQ(d->flags.count("rdzv_backend"), 0u);  // static: PET_NNODES is a fixed N
  v["PET_NODE_RANK"] = "0";
  v["PET_NNODES"] = "1:3";
  v["PET_RDZV_ENDPOINT"] = "job-worker-0:29400";
  auto e = derive_kubeflow(lookup(v), given);
  EXPECT_EQ(e->flags.count("node_rank"), 0u);  // PET_NODE_RANK is the user's (the operator's) word
  EXPECT_EQ(value(*e, "rdzv_backend"), "c10d");
  EXPECT_EQ(e->flags.count("rdzv_endpoint"), 0u);
  v.erase("PET_RDZV_ENDPOINT");
  EXPECT_EQ(value(*derive_kubeflow(lookup(v), given), "rdzv_endpoint"), "job-master-0:23456");
  EXPECT_FALSE(derive_kubeflow(lookup({{"RANK", "3"}}), lookup({})));
}

TEST(ClusterEnv, WhoSpeaks) {
  Vars v = kSlurm;
  v["OMPI_COMM_WORLD_SIZE"] = "2";
  v["OMPI_COMM_WORLD_RANK"] = "0";
  EXPECT_EQ(derive_cluster_defaults(lookup(v), lookup({}), false)->source.rfind("Open MPI", 0), 0u);
  Vars s = kSlurm;
  s["PMI_SIZE"] = "4";
  s["PMI_RANK"] = "3";
  EXPECT_EQ(derive_cluster_defaults(lookup(s), lookup({}), false)->source.rfind("Slurm", 0), 0u);
  EXPECT_FALSE(derive_cluster_defaults(lookup(s), lookup({}), true));  // --no-slurm: srun's PMI_* too
  EXPECT_FALSE(derive_cluster_defaults(lookup({}), lookup({}), false));
}

// The whole chain: command line > --config > PET_* > derived > defaults.
TEST(ClusterEnv, ThroughTheCommandLine) {
  Vars v = kSlurm;
  v["SLURM_NNODES"] = v["SLURM_STEP_NUM_NODES"] = "4";
  v["SLURM_RESTART_COUNT"] = "3";
  auto c = parse_command_line({"t.py"}, lookup(v));
  EXPECT_EQ(c.rdzv.max_nodes, 4);
  EXPECT_EQ(c.rdzv.node_rank, 2);
  EXPECT_EQ(c.rdzv.master_addr, "gpu07");
  EXPECT_EQ(c.rdzv.master_port, 19242);
  EXPECT_EQ(c.rdzv.id, "4242.0");
  EXPECT_EQ(c.workers.nproc_per_node, 16);
  EXPECT_EQ(c.restarts.initial_restart_count, 3);
  EXPECT_NE(c.cluster_summary.find("Slurm job 4242 step 0"), std::string::npos);

  auto explicit_flags = parse_command_line({"--nnodes", "3", "--master-port", "1111", "t.py"}, lookup(v));
  EXPECT_EQ(explicit_flags.rdzv.max_nodes, 3);
  EXPECT_EQ(explicit_flags.rdzv.master_port, 1111);
  EXPECT_EQ(explicit_flags.rdzv.node_rank, 2);

  Vars pet = v;
  pet["PET_NODE_RANK"] = "0";
  EXPECT_EQ(parse_command_line({"t.py"}, lookup(pet)).rdzv.node_rank, 0);

  for (auto off : {std::vector<std::string>{"--no-slurm", "t.py"}, std::vector<std::string>{"t.py"}}) {
    Vars o = v;
    if (off.size() == 1) o["PET_NO_SLURM"] = "1";
    auto none = parse_command_line(off, lookup(o));
    EXPECT_EQ(none.rdzv.max_nodes, 1);
    EXPECT_EQ(none.rdzv.id, "none");
    EXPECT_EQ(none.restarts.initial_restart_count, 0);
    EXPECT_TRUE(none.cluster_summary.empty());
  }
  Vars bad = v;
  bad["SLURM_NODEID"] = "9";
  try {
    parse_command_line({"t.py"}, lookup(bad));
    ADD_FAILURE() << "a node id beyond the node count was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_NODEID"), std::string::npos) << e.what();
  }
}

TEST(ClusterEnv, KubeflowGivesTheSameJobAsFlags) {
  Vars kf = {{"PET_NNODES", "2"},          {"PET_NPROC_PER_NODE", "2"}, {"PET_MASTER_ADDR", "10.0.0.1"},
             {"PET_MASTER_PORT", "23456"}, {"PET_MAX_RESTARTS", "3"},   {"RANK", "1"},
             {"WORLD_SIZE", "2"}};
  auto env_only = parse_command_line({"t.py"}, lookup(kf));
  auto flags = parse_command_line({"--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "10.0.0.1",
                                   "--master-port", "23456", "--max-restarts", "3", "--node-rank", "1", "t.py"},
                                  lookup({}));
  EXPECT_EQ(env_only.rdzv.max_nodes, flags.rdzv.max_nodes);
  EXPECT_EQ(env_only.workers.nproc_per_node, flags.workers.nproc_per_node);
  EXPECT_EQ(env_only.rdzv.master_addr, flags.rdzv.master_addr);
  EXPECT_EQ(env_only.rdzv.master_port, flags.rdzv.master_port);
  EXPECT_EQ(env_only.restarts.max_restarts, flags.restarts.max_restarts);
  EXPECT_EQ(env_only.rdzv.node_rank, flags.rdzv.node_rank);
  EXPECT_EQ(env_only.rdzv.backend, flags.rdzv.backend);
}

}  // namespace
}  // namespace ctrun::agent::cluster
