// comm's two tables: the algorithm table (selection and dispatch derive from it) and the settings table (every
// CTRUN_COMM_* setting, resolved once per group). docs/comm.md must carry both as generated here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "comm/algorithms/cost_model.hpp"
#include "comm/algorithms/selection.hpp"
#include "comm/config.hpp"
#include "comm/options.hpp"
#include "comm/types.hpp"

namespace ctrun::comm {
namespace {

using algorithms::Algorithm;
using algorithms::AlgorithmRow;
using algorithms::Needs;
using algorithms::OpKind;
using algorithms::Selector;

// Every size class the table distinguishes, with the values just around each threshold.
std::vector<std::size_t> size_classes() {
  std::vector<std::size_t> out = {0, 1, 7, 4096, std::size_t{1} << 20, std::size_t{64} << 20, std::size_t{1} << 30};
  for (const auto& r : algorithms::algorithm_table()) {
    if (r.min_bytes > 0) {
      out.push_back(r.min_bytes - 1);
      out.push_back(r.min_bytes);
    }
  }
  return out;
}

constexpr Needs kTransports[] = {Needs::kAnyTransport, Needs::kSharedMemory, Needs::kPeerReads};

void expect_implemented(const AlgorithmRow* row, OpKind op, Needs available, const std::string& what) {
  ASSERT_NE(row, nullptr) << what;
  EXPECT_EQ(row->op, op) << what;
  EXPECT_NE(row->run, nullptr) << what;
  EXPECT_LE(static_cast<int>(row->needs), static_cast<int>(available))
      << what << ": picked an algorithm the transport cannot run";
}

TEST(AlgorithmTable, EveryOpSizeAndGroupSizePicksAnImplementedAlgorithm) {
  const Selector table;
  for (const auto& o : algorithms::op_table()) {
    if (o.op == OpKind::kSend) continue;  // p2p: no algorithm
    for (std::size_t bytes : size_classes()) {
      for (int n = 1; n <= 16; ++n) {
        for (Needs t : kTransports) {
          const std::string what = std::string(o.name) + " bytes=" + std::to_string(bytes) +
                                   " ranks=" + std::to_string(n) + " transport level " +
                                   std::to_string(static_cast<int>(t));
          expect_implemented(table.choose(o.op, bytes, n, t), o.op, t, what);
        }
      }
    }
  }
}

TEST(AlgorithmTable, EveryRowIsReachableByOverrideAndItsOwnConditions) {
  for (const auto& r : algorithms::algorithm_table()) {
    const std::string spec = std::string(algorithms::op_name(r.op)) + "=" + algorithms::algorithm_name(r.algorithm);
    const Selector s(spec);
    EXPECT_EQ(s.choose(r.op, 1 << 20, 4, Needs::kPeerReads), &r) << spec;
    EXPECT_EQ(s.choose(r.op, 1 << 20, 4, r.needs), &r) << spec;
    // Where the transport lacks what the row needs, the override falls back to the table (never to an
    // unusable row).
    for (Needs t : kTransports) expect_implemented(s.choose(r.op, 1 << 20, 4, t), r.op, t, spec);
    if (r.automatic) {
      // At its own thresholds, with exactly what it needs, the table picks this row or one listed before it.
      const AlgorithmRow* picked = Selector().choose(r.op, r.min_bytes, std::max(r.min_ranks, 1), r.needs);
      expect_implemented(picked, r.op, r.needs, spec);
      EXPECT_LE(picked, &r) << spec;
    }
  }
}

TEST(AlgorithmTable, SizeThresholdsAsDocumented) {
  const Selector t;
  const Needs tcp = Needs::kAnyTransport;
  EXPECT_EQ(t.choose(OpKind::kAllReduce, 1 << 20, 4, tcp)->algorithm, Algorithm::kRing);
  EXPECT_EQ(t.choose(OpKind::kAllReduce, (1 << 20) - 1, 4, tcp)->algorithm, Algorithm::kHalvingDoubling);
  EXPECT_EQ(t.choose(OpKind::kAllReduce, 64 << 10, 6, tcp)->algorithm, Algorithm::kHalvingDoubling);
  EXPECT_EQ(t.choose(OpKind::kAllReduce, (64 << 10) - 1, 4, tcp)->algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(t.choose(OpKind::kAllReduce, 512 << 10, 2, tcp)->algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(t.choose(OpKind::kAllReduce, 64 << 20, 2, tcp)->algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(t.choose(OpKind::kBroadcast, 256 << 10, 4, tcp)->algorithm, Algorithm::kChain);
  EXPECT_EQ(t.choose(OpKind::kAllGather, 8, 4, tcp)->algorithm, Algorithm::kDirect);
  for (OpKind op : {OpKind::kAllReduce, OpKind::kBroadcast, OpKind::kAllGather, OpKind::kReduceScatter}) {
    EXPECT_EQ(t.choose(op, 64 << 20, 8, Needs::kSharedMemory)->algorithm, Algorithm::kShm) << algorithms::op_name(op);
    // Direct algorithms only by override (slower on the machine measured, see table.cpp).
    EXPECT_EQ(t.choose(op, 64 << 20, 8, Needs::kPeerReads)->algorithm, Algorithm::kShm) << algorithms::op_name(op);
    EXPECT_EQ(Selector("shm_direct").choose(op, 64 << 20, 8, Needs::kPeerReads)->algorithm, Algorithm::kShmDirect);
    EXPECT_EQ(t.choose(op, 8, 8, Needs::kPeerReads)->algorithm, Algorithm::kShm) << algorithms::op_name(op);
  }
}

TEST(AlgorithmTable, OverrideErrorsNameTheBadEntry) {
  EXPECT_THROW(Selector("all_reduce=nonsense"), InvalidArgumentError);
  EXPECT_THROW(Selector("no_such_op=ring"), InvalidArgumentError);
  EXPECT_THROW(Selector("barrier=ring"), InvalidArgumentError);  // ring does not implement barrier
  // A global name applies only where the op has it; the rest comes from the table.
  const Selector ring("ring");
  EXPECT_EQ(ring.choose(OpKind::kAllReduce, 8, 2, Needs::kAnyTransport)->algorithm, Algorithm::kRing);
  EXPECT_EQ(ring.choose(OpKind::kBarrier, 0, 2, Needs::kAnyTransport)->algorithm, Algorithm::kDissemination);
}

TEST(SettingsTable, DefaultsOfTheTableAreConfigsDefaults) {
  const Config from_table = Config::from_settings({});
  const Config built_in;
  // Config's defaults are the table's documented ones (its constructor applies them; a member initialiser
  // that disagreed would not survive it).
  EXPECT_EQ(built_in.backend, "cpu");
  EXPECT_EQ(built_in.transport, "auto");
  EXPECT_EQ(built_in.device, -1);
  EXPECT_EQ(built_in.shm_ring_bytes, 1u << 20);
  EXPECT_EQ(built_in.shm_workspace_bytes, 256u << 10);
  EXPECT_EQ(built_in.shm_slots, 8);
  EXPECT_EQ(built_in.shm_pipeline_bytes, 4u << 20);
  EXPECT_EQ(built_in.shm_stream_bytes, 4u << 20);
  EXPECT_TRUE(built_in.shm_direct);
  EXPECT_FALSE(built_in.nccl_blocking);
  EXPECT_EQ(from_table.backend, built_in.backend);
  EXPECT_EQ(from_table.transport, built_in.transport);
  EXPECT_EQ(from_table.algorithm, built_in.algorithm);
  EXPECT_EQ(from_table.ifaddr, built_in.ifaddr);
  EXPECT_EQ(from_table.device, built_in.device);
  EXPECT_EQ(from_table.chunk_bytes, built_in.chunk_bytes);
  EXPECT_EQ(from_table.shm_ring_bytes, built_in.shm_ring_bytes);
  EXPECT_EQ(from_table.shm_workspace_bytes, built_in.shm_workspace_bytes);
  EXPECT_EQ(from_table.shm_direct, built_in.shm_direct);
  EXPECT_EQ(from_table.tcp_buffer_bytes, built_in.tcp_buffer_bytes);
  EXPECT_EQ(from_table.tcp_lowat_bytes, built_in.tcp_lowat_bytes);
}

TEST(SettingsTable, OptionsOverrideSettingsOverrideDefaults) {
  ProcessGroupOptions o;
  o.settings = {{"CTRUN_COMM_CHUNK_BYTES", "1000"},
                {"CTRUN_COMM_SHM_WORKSPACE_BYTES", "4000"},
                {"CTRUN_COMM_TRANSPORT", "tcp"},
                {"CTRUN_COMM_SHM_RING_BYTES", "70000"}};
  Config c = Config::resolve(o);
  EXPECT_EQ(c.chunk_bytes, 1000u);
  EXPECT_EQ(c.chunk_bytes_for("tcp"), 1000u);
  EXPECT_EQ(c.shm_workspace_bytes, 4032u);  // rounded up to 64 B
  EXPECT_EQ(c.shm_ring_bytes, 128u << 10);  // power of two
  EXPECT_EQ(c.transport, "tcp");
  o.transport = "shm";  // the typed field wins over the settings map
  EXPECT_EQ(Config::resolve(o).transport, "shm");
  EXPECT_EQ(Config::from_settings({}).chunk_bytes_for("tcp"), 1u << 20);
  EXPECT_EQ(Config::from_settings({}).chunk_bytes_for("shm"), 128u << 10);
}

TEST(SettingsTable, BadValuesAndUnknownNamesAreErrors) {
  EXPECT_THROW(Config::from_settings({{"CTRUN_COMM_CHUNK_BYTES", "lots"}}), InvalidArgumentError);
  EXPECT_THROW(Config::from_settings({{"CTRUN_COMM_CHUNK_BYTES", "-5"}}), InvalidArgumentError);
  EXPECT_THROW(Config::from_settings({{"CTRUN_COMM_TRANSPORT", "carrier-pigeon"}}), InvalidArgumentError);
  EXPECT_THROW(Config::from_settings({{"CTRUN_COMM_NO_SUCH", "1"}}), InvalidArgumentError);
  EXPECT_THROW(Config::from_settings({{"CTRUN_COMM_DEVICE", "cuda:0"}}), InvalidArgumentError);
  EXPECT_THROW(Config::from_settings({{"CTRUN_COMM_NCCL_BLOCKING", "yes"}}), InvalidArgumentError);
  EXPECT_EQ(Config::from_settings({{"CTRUN_COMM_DEVICE", "3"}}).device, 3);
  EXPECT_THROW(Config::from_settings({{"CTRUN_COMM_SHM_SLOTS", " 8"}}), InvalidArgumentError);
  EXPECT_THROW(Config::from_settings({{"CTRUN_COMM_SHM_SLOTS", "65"}}), InvalidArgumentError);
  EXPECT_TRUE(Config::from_settings({{"CTRUN_COMM_NCCL_BLOCKING", "1"}}).nccl_blocking);
}

// The worker environment is read once, by Config::resolve, into Config::worker (what env://, the tcp transport
// and the nccl device rule receive); from_settings() reads nothing.
TEST(SettingsTable, ResolveReadsTheWorkerEnvironmentOnce) {
  const std::map<std::string, std::string> env = {{"RANK", "2"},
                                                  {"WORLD_SIZE", "4"},
                                                  {"MASTER_ADDR", "10.1.2.3"},
                                                  {"MASTER_PORT", "29500"},
                                                  {"LOCAL_RANK", "3"},
                                                  {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                  {"TORCHELASTIC_RESTART_COUNT", "1"}};
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  const WorkerEnvironment w = Config::resolve(ProcessGroupOptions{}).worker;
  EXPECT_EQ(w.rank, "2");
  EXPECT_EQ(w.world_size, "4");
  EXPECT_EQ(w.master_addr, "10.1.2.3");
  EXPECT_EQ(w.master_port, "29500");
  EXPECT_EQ(w.local_rank, 3);
  EXPECT_TRUE(w.use_agent_store);
  EXPECT_EQ(w.restart_count, "1");
  EXPECT_EQ(Config::from_settings({}).worker.master_addr, "");
  setenv("LOCAL_RANK", "x", 1);  // not an integer: no device rule from it (as before)
  setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  EXPECT_EQ(WorkerEnvironment::from_process().local_rank, std::nullopt);
  EXPECT_FALSE(WorkerEnvironment::from_process().use_agent_store);
  for (const auto& [k, v] : env) unsetenv(k.c_str());
}

TEST(SettingsTable, OneIntegerParser) {
  EXPECT_EQ(parse_unsigned("0", 10), 0u);
  EXPECT_EQ(parse_unsigned("10", 10), 10u);
  EXPECT_EQ(parse_unsigned("11", 10), std::nullopt);
  EXPECT_EQ(parse_unsigned("", 10), std::nullopt);
  EXPECT_EQ(parse_unsigned("-1", 10), std::nullopt);
  EXPECT_EQ(parse_unsigned("1x", 10), std::nullopt);
  EXPECT_EQ(parse_unsigned("99999999999999999999999", SIZE_MAX), std::nullopt);
}

// The text between the markers in docs/comm.md must be exactly what the tables generate.
std::string generated_section() {
  return "<!-- BEGIN generated comm tables: tests/comm/tables_test.cpp (comm_tables_test --print) -->\n\n"
         "#### Algorithms (comm/algorithms/table.cpp)\n\n" +
         algorithms::algorithm_markdown() + "\n#### Cost model between hosts (comm/algorithms/cost_model.cpp)\n\n" +
         algorithms::cost_markdown() + "\n#### Settings (comm/config.cpp)\n\n" + settings_markdown() +
         "\n<!-- END generated comm tables -->";
}

TEST(Docs, CommMdCarriesTheGeneratedTables) {
  std::ifstream in(std::string(CTRUN_SOURCE_DIR) + "/docs/comm.md");
  ASSERT_TRUE(in) << "cannot read docs/comm.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string want = generated_section();
  EXPECT_NE(doc.find(want), std::string::npos)
      << "docs/comm.md disagrees with comm's tables; replace its generated section with the output of "
         "`build/bin/comm_tables_test --print`:\n"
      << want;
}

}  // namespace
}  // namespace ctrun::comm

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--print") {
      std::printf("%s\n", ctrun::comm::generated_section().c_str());
      return 0;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
