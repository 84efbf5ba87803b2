// Replication between agents (agent/checkpoint/replica_wire, replica_transfer, exchange): the frames, a push and a
// fetch over a real loopback connection, the receiver's byte limit, a peer that dies mid-transfer (nothing held
// is lost, nothing partial stays), replicas pruned, and the pure parts of the nodes' agreement.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "agent/checkpoint/exchange.hpp"
#include "agent/checkpoint/job_directory.hpp"
#include "agent/checkpoint/layout.hpp"
#include "agent/checkpoint/replica_transfer.hpp"
#include "agent/checkpoint/replica_wire.hpp"
#include "agent/checkpoint/snapshot_digest.hpp"
#include "common/auth/secret.hpp"
#include "store/counting_store.hpp"
#include "store/memory_store.hpp"

namespace ctrun::agent::checkpoint {
namespace {
namespace fs = std::filesystem;

std::string temp_root() {
  std::string pattern = (fs::temp_directory_path() / "ctrun-ckrep-test-XXXXXX").string();
  return ::mkdtemp(pattern.data());
}

std::string pattern_bytes(std::size_t n, int seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + static_cast<std::size_t>(seed)) & 0xff);
  return s;
}

// A snapshot as a worker of a multi-node job writes it (_snapshot.py): the magic, the header naming its rank and step,
// `body` standing for the pickle and the storages, and the digest trailer (snapshot_digest.hpp) over all of that.
std::string snapshot_bytes(int rank, std::int64_t step, const std::string& body) {
  const std::string header = "{\"step\": " + std::to_string(step) + ", \"rank\": " + std::to_string(rank) + "}";
  std::string out = "CTRUNCK1";
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header + body;
  return out + digest_trailer(out.data(), out.size());
}

// The snapshot of (rank, step) whose body is pattern_bytes(n, seed).
std::string snapshot_of(int rank, std::int64_t step, std::size_t n, int seed) {
  return snapshot_bytes(rank, step, pattern_bytes(n, seed));
}

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::int64_t> steps(const std::vector<HeldStep>& held) {
  std::vector<std::int64_t> out;
  for (const auto& h : held) out.push_back(h.step);
  return out;
}

bool any_partial(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (is_partial(e.path().filename().string())) return true;
  return false;
}

// Two "nodes": job directories under roots of their own, the receiver serving on 127.0.0.1.
struct Pair {
  explicit Pair(std::uint64_t receiver_limit = 1u << 30)
      : root_a(temp_root()),
        root_b(temp_root()),
        a(1000, root_a),
        b(1001, root_b),
        server(b.path(), receiver_limit, "127.0.0.1", std::chrono::milliseconds(2000)) {
    ::signal(SIGPIPE, SIG_IGN);  // as in ctrun (agent.cpp): sendfile(2) to a peer that left has no MSG_NOSIGNAL
  }
  ~Pair() {
    std::error_code ec;
    fs::remove_all(root_a, ec);
    fs::remove_all(root_b, ec);
  }
  fs::path own_file(int rank, std::int64_t step) const {
    return fs::path(a.path()) / rank_dir_name(rank) / step_file_name(step);
  }
  std::string root_a, root_b;
  JobDirectory a, b;
  ReplicaServer server;
  std::atomic<bool> stop{false};
};

TEST(ReplicaWire, FramesRoundTripAndStrangersAreRefused) {
  const Frame f{FrameKind::kPut, 7, 123456789012, 42};
  const Frame g = decode_frame(encode_frame(f));
  EXPECT_EQ(g.kind, FrameKind::kPut);
  EXPECT_EQ(g.rank, 7);
  EXPECT_EQ(g.step, 123456789012);
  EXPECT_EQ(g.size, 42u);
  auto bytes = encode_frame(f);
  bytes[0] ^= 1;
  EXPECT_THROW(decode_frame(bytes), std::runtime_error);  // not our peer (an HTTP client, a port scanner)
  bytes = encode_frame(f);
  bytes[4] = 99;
  EXPECT_THROW(decode_frame(bytes), std::runtime_error);
  EXPECT_THROW(decode_frame(encode_frame({FrameKind::kGet, -1, 0, 0})), std::runtime_error);
}

TEST(ReplicaTransfer, PushKeepsAReplicaAndFetchBringsItBack) {
  Pair p;
  const std::string bytes = snapshot_of(2, 5, 3 << 20, 1);
  write(p.own_file(2, 5), bytes);
  push_snapshot(p.server.endpoint(), 2, 5, p.own_file(2, 5).string(), p.stop);
  EXPECT_EQ(steps(p.b.held_replicas(2)), (std::vector<std::int64_t>{5}));
  EXPECT_EQ(read(fs::path(p.b.path()) / replica_dir_name(2) / step_file_name(5)), bytes);
  EXPECT_EQ(p.server.bytes_received(), bytes.size());
  EXPECT_TRUE(p.b.held(2).empty());  // a replica, not the node's own rank

  // A third node (a spare) fetches it into its own rank directory.
  const std::string root_c = temp_root();
  {
    JobDirectory c(1002, root_c);
    EXPECT_EQ(fetch_snapshot(p.server.endpoint(), 2, 5, c.path(), 1u << 30, p.stop), bytes.size());
    EXPECT_EQ(steps(c.held(2)), (std::vector<std::int64_t>{5}));
    EXPECT_EQ(read(fs::path(c.path()) / rank_dir_name(2) / step_file_name(5)), bytes);
    // A step nobody holds: a clear error, nothing left behind.
    EXPECT_THROW(
        try { fetch_snapshot(p.server.endpoint(), 2, 6, c.path(), 1u << 30, p.stop); } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find("holds no step 6 of rank 2"), std::string::npos) << e.what();
          throw;
        },
        std::runtime_error);
    EXPECT_EQ(steps(c.held(2)), (std::vector<std::int64_t>{5}));
    // Over the fetching node's own limit: refused before anything is allocated.
    EXPECT_THROW(fetch_snapshot(p.server.endpoint(), 3, 5, c.path(), 1u << 30, p.stop), std::runtime_error);
    EXPECT_THROW(fetch_snapshot(p.server.endpoint(), 2, 5, c.path(), c.used_bytes() + 4096, p.stop),
                 std::runtime_error);
    EXPECT_FALSE(any_partial(c.path()));
  }
  fs::remove_all(root_c);
}

TEST(ReplicaTransfer, TheReceiverRefusesBeyondItsLimitAndKeepsWhatItHeld) {
  Pair p(4u << 20);  // room for one 3 MiB replica, not two
  write(p.own_file(0, 1), snapshot_of(0, 1, 3 << 20, 1));
  write(p.own_file(0, 2), snapshot_of(0, 2, 3 << 20, 2));
  push_snapshot(p.server.endpoint(), 0, 1, p.own_file(0, 1).string(), p.stop);
  try {
    push_snapshot(p.server.endpoint(), 0, 2, p.own_file(0, 2).string(), p.stop);
    FAIL() << "a replica beyond the receiver's --checkpoint-memory was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--checkpoint-memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(steps(p.b.held_replicas(0)), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(read(fs::path(p.b.path()) / replica_dir_name(0) / step_file_name(1)), snapshot_of(0, 1, 3 << 20, 1));
  EXPECT_FALSE(any_partial(p.b.path()));
}

TEST(ReplicaTransfer, APeerThatDiesMidTransferLeavesNothingAndTakesNothing) {
  Pair p;
  write(p.own_file(1, 4), snapshot_of(1, 4, 1 << 20, 4));
  push_snapshot(p.server.endpoint(), 1, 4, p.own_file(1, 4).string(), p.stop);

  // A sender that announces step 5 (2 MiB), sends half, and dies.
  const auto colon = p.server.endpoint().rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(p.server.endpoint().substr(colon + 1))));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const auto put = encode_frame({FrameKind::kPut, 1, 5, 2u << 20});
  ASSERT_EQ(::send(fd, put.data(), put.size(), 0), static_cast<ssize_t>(put.size()));
  std::array<char, kFrameBytes> ok{};
  ASSERT_EQ(::recv(fd, ok.data(), ok.size(), MSG_WAITALL), static_cast<ssize_t>(ok.size()));
  EXPECT_EQ(decode_frame(ok).kind, FrameKind::kOk);
  const std::string half = pattern_bytes(1 << 20, 5);
  ASSERT_EQ(::send(fd, half.data(), half.size(), 0), static_cast<ssize_t>(half.size()));
  ::close(fd);

  // The receiver drops the partial file once it sees the connection end (bounded wait).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (any_partial(p.b.path()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(any_partial(p.b.path()));
  EXPECT_EQ(steps(p.b.held_replicas(1)), (std::vector<std::int64_t>{4}));
  EXPECT_EQ(read(fs::path(p.b.path()) / replica_dir_name(1) / step_file_name(4)), snapshot_of(1, 4, 1 << 20, 4));
}

TEST(ReplicaTransfer, ReplicasKeepTheNewestStepsAndDropAnAbandonedTimeline) {
  Pair p;
  for (std::int64_t s : {1, 2, 3}) {
    write(p.own_file(0, s), snapshot_of(0, s, 4096, static_cast<int>(s)));
    push_snapshot(p.server.endpoint(), 0, s, p.own_file(0, s).string(), p.stop);
  }
  EXPECT_EQ(steps(p.b.held_replicas(0)), (std::vector<std::int64_t>{2, 3}));
  // The job resumed from step 1 and saved step 2 again: the old timeline's step 3 goes.
  write(p.own_file(0, 2), snapshot_of(0, 2, 4096, 22));
  push_snapshot(p.server.endpoint(), 0, 2, p.own_file(0, 2).string(), p.stop);
  EXPECT_EQ(steps(p.b.held_replicas(0)), (std::vector<std::int64_t>{2}));
  EXPECT_EQ(read(fs::path(p.b.path()) / replica_dir_name(0) / step_file_name(2)), snapshot_of(0, 2, 4096, 22));
}

TEST(ReplicaTransfer, AStoppedTransferEndsWithinItsSlice) {
  Pair p;
  p.stop = true;
  write(p.own_file(0, 1), snapshot_of(0, 1, 4096, 1));
  const auto began = std::chrono::steady_clock::now();
  EXPECT_THROW(push_snapshot(p.server.endpoint(), 0, 1, p.own_file(0, 1).string(), p.stop), std::runtime_error);
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(1));
}

// A snapshot whose bytes changed after its save (in memory, on the way), one without a digest, or a valid one under
// another rank or step is never kept: not as a replica, not by a fetch.
TEST(ReplicaTransfer, ACorruptedOrMislabelledSnapshotIsNeverKept) {
  Pair p;
  auto refused = [&](int rank, std::int64_t step, const std::string& bytes, const std::string& why) {
    write(p.own_file(rank, step), bytes);
    try {
      push_snapshot(p.server.endpoint(), rank, step, p.own_file(rank, step).string(), p.stop);
      ADD_FAILURE() << "kept: " << why;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  std::string flipped = snapshot_of(0, 1, 1 << 20, 1);
  flipped[flipped.size() / 2] ^= 0x40;
  refused(0, 1, flipped, "do not match the digest");
  refused(0, 2, "CTRUNCK1" + pattern_bytes(4096, 2), "carries no digest");
  refused(0, 3, snapshot_of(0, 4, 4096, 3), "not of rank 0 step 3");
  refused(1, 3, snapshot_of(0, 3, 4096, 3), "not of rank 1 step 3");
  EXPECT_TRUE(p.b.held_replicas(0).empty());
  EXPECT_TRUE(p.b.held_replicas(1).empty());
  EXPECT_FALSE(any_partial(p.b.path()));

  // A replica corrupted in the holder's memory after it was kept: a fetch refuses it and leaves nothing.
  write(p.own_file(2, 7), snapshot_of(2, 7, 2 << 20, 7));
  push_snapshot(p.server.endpoint(), 2, 7, p.own_file(2, 7).string(), p.stop);
  const fs::path held = fs::path(p.b.path()) / replica_dir_name(2) / step_file_name(7);
  EXPECT_EQ(check_snapshot(held.string(), 2, 7), "");
  {
    std::fstream f(held, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1 << 20);
    f.put('\x5a');
  }
  EXPECT_NE(check_snapshot(held.string(), 2, 7), "");
  const std::string root_c = temp_root();
  {
    JobDirectory c(1002, root_c);
    try {
      fetch_snapshot(p.server.endpoint(), 2, 7, c.path(), 1u << 30, p.stop);
      ADD_FAILURE() << "a corrupted replica was fetched";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("failed its check"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(c.held(2).empty());
    EXPECT_FALSE(any_partial(c.path()));
  }
  fs::remove_all(root_c);
}

// With the job's secret, the endpoint serves only agents that prove it; a push is taken only for the ranks the ring
// assigns to this node.
TEST(ReplicaTransfer, WithASecretOnlyTheJobsAgentsGetInAndOnlyForTheirRing) {
  const auto secret = std::make_shared<const auth::Secret>("the-job-secret-0123456789", "test");
  const auth::Secret other("another-secret-0123456789", "test");
  const std::string root_a = temp_root(), root_b = temp_root();
  {
    JobDirectory a(1000, root_a), b(1001, root_b);
    ReplicaServer server(b.path(), 1u << 30, "127.0.0.1", std::chrono::milliseconds(2000), secret);
    std::atomic<bool> stop{false};
    const auto file = [&](int rank, std::int64_t step) {
      const fs::path f = fs::path(a.path()) / rank_dir_name(rank) / step_file_name(step);
      write(f, snapshot_of(rank, step, 64 << 10, rank));
      return f.string();
    };
    push_snapshot(server.endpoint(), 0, 1, file(0, 1), stop, std::chrono::milliseconds(2000), secret.get());
    EXPECT_EQ(steps(b.held_replicas(0)), (std::vector<std::int64_t>{1}));
    auto refused = [&](int rank, const auth::Secret* with, const std::string& why) {
      try {
        push_snapshot(server.endpoint(), rank, 2, file(rank, 2), stop, std::chrono::milliseconds(2000), with);
        ADD_FAILURE() << "taken: " << why;
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      }
    };
    refused(0, nullptr, "holds a job secret and this one none");
    refused(0, &other, "does not hold this job's secret");
    server.accept_pushes_of(std::set<int>{0, 1});
    refused(2, secret.get(), "does not hold replicas of rank 2");
    EXPECT_EQ(steps(b.held_replicas(0)), (std::vector<std::int64_t>{1}));
    EXPECT_TRUE(b.held_replicas(2).empty());
    // A fetch without the secret: nothing but the refusal.
    const std::string root_c = temp_root();
    {
      JobDirectory c(1002, root_c);
      EXPECT_THROW(fetch_snapshot(server.endpoint(), 0, 1, c.path(), 1u << 30, stop), std::runtime_error);
      EXPECT_TRUE(c.held(0).empty());
      EXPECT_EQ(fetch_snapshot(server.endpoint(), 0, 1, c.path(), 1u << 30, stop, std::chrono::milliseconds(2000),
                               secret.get()),
                snapshot_of(0, 1, 64 << 10, 0).size());
    }
    fs::remove_all(root_c);
  }
  fs::remove_all(root_a);
  fs::remove_all(root_b);
}

TEST(Exchange, RecordsMergeIntoEveryRanksStepsAndSayWhereEachIs) {
  NodeRecord a{0, "127.0.0.2:1", "", {{{0, {2, 3}}, {1, {2, 3}}}, {{2, {3}}, {3, {2, 3}}}}, 0, 2, 1};
  NodeRecord c{1, "127.0.0.4:2", "", {{}, {{0, {3}}}}, 2, 2, 1};
  const NodeRecord back = decode_record(encode_record(a));
  EXPECT_EQ(back.endpoint, a.endpoint);
  EXPECT_EQ(back.holdings.own, a.holdings.own);
  EXPECT_EQ(back.holdings.replicas, a.holdings.replicas);
  EXPECT_EQ(back.first_rank, 0);
  EXPECT_EQ(back.ranks, 2);
  EXPECT_THROW(decode_record("{\"v\": 9}"), std::runtime_error);

  const auto merged = merged_steps({a, c}, 4);
  EXPECT_EQ(merged.at(0), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(merged.at(2), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(merged.size(), 4u);
  // Own snapshots before replicas; never the asking node itself.
  EXPECT_EQ(holders_of({a, c}, 0, 3, 5), (std::vector<std::string>{"127.0.0.2:1", "127.0.0.4:2"}));
  EXPECT_EQ(holders_of({a, c}, 0, 3, 0), (std::vector<std::string>{"127.0.0.4:2"}));
  EXPECT_TRUE(holders_of({a, c}, 2, 2, 5).empty());

  EXPECT_EQ(ring_targets(0, 3, 1), (std::vector<int>{1}));
  EXPECT_EQ(ring_targets(2, 3, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(ring_targets(1, 2, 5), (std::vector<int>{0}));  // never itself, never twice
  EXPECT_TRUE(ring_targets(0, 1, 1).empty());
}

// Group rank 0's plan: the resume step every rank holds somewhere, each node's ring targets, and for each rank a node
// runs without the resume step, where it is (own snapshots first, never the node itself).
TEST(Exchange, GroupRankZeroPlansWhatEachNodeMustBring) {
  // Node 0 runs ranks 0-1 and holds their steps 2,3 and a replica of rank 2's 3; node 1 runs ranks 2-3 and holds
  // rank 3's steps 2,3 and a replica of rank 0's 3; node 2 runs nothing of its own yet (a spare), holds rank 2's 3.
  const NodeRecord a{0, "a:1", "", {{{0, {2, 3}}, {1, {2, 3}}}, {{2, {3}}}}, 0, 2, 1};
  const NodeRecord b{1, "b:1", "", {{{3, {2, 3}}}, {{0, {3}}}}, 2, 2, 2};
  const NodeRecord c{2, "c:1", "", {{{2, {3}}}, {}}, 4, 0, 1};
  const auto plans = plan_nodes({a, b, c}, 4);
  ASSERT_EQ(plans.size(), 3u);
  for (const auto& p : plans) {
    EXPECT_TRUE(p.off.empty());
    EXPECT_EQ(p.resume, std::optional<std::int64_t>(3));
    EXPECT_TRUE(p.listed);
  }
  EXPECT_EQ(plans[0].targets, (std::vector<std::string>{"b:1"}));
  EXPECT_EQ(plans[1].targets, (std::vector<std::string>{"c:1", "a:1"}));  // its own --checkpoint-replicas 2
  EXPECT_TRUE(plans[0].holders.empty());                                  // it holds steps 3 of ranks 0 and 1
  // Node 1 lacks rank 2's step 3: node 2 holds it as its own, node 0 as a replica.
  ASSERT_EQ(plans[1].holders.size(), 1u);
  EXPECT_EQ(plans[1].holders.at(2), (std::vector<std::string>{"c:1", "a:1"}));
  EXPECT_TRUE(plans[2].holders.empty());

  const NodePlan back = decode_plan(encode_plan(plans[1]));
  EXPECT_EQ(back.resume, plans[1].resume);
  EXPECT_EQ(back.targets, plans[1].targets);
  EXPECT_EQ(back.holders, plans[1].holders);
  EXPECT_THROW(decode_plan("{\"v\": 9}"), std::runtime_error);

  // A node with checkpoints off turns them off for every node, saying which.
  NodeRecord off = b;
  off.off = "no /dev/shm";
  for (const auto& p : plan_nodes({a, off, c}, 4)) EXPECT_EQ(p.off, "node 1 has them off (no /dev/shm)");
}

// The exchange costs the store O(N) reads in all: group rank 0 reads every record in one request, every other node
// reads its own part of the plan.
TEST(Exchange, EachNodeReadsOnlyItsOwnPartOfThePlan) {
  using std::chrono::milliseconds;
  auto shared = std::make_shared<store::MemoryStore>();
  constexpr int kNodes = 6;
  std::vector<std::shared_ptr<store::StoreTraffic>> traffic;
  std::vector<std::unique_ptr<store::CountingStore>> stores;
  for (int n = 0; n < kNodes; ++n) {
    traffic.push_back(std::make_shared<store::StoreTraffic>());
    stores.push_back(std::make_unique<store::CountingStore>(shared, traffic.back()));
  }
  std::vector<Exchanged> out(kNodes);
  std::vector<std::thread> threads;
  for (int n = 0; n < kNodes; ++n) {
    threads.emplace_back([&, n] {
      NodeRecord self{n, std::string("h") + std::to_string(n) + ":1", "", {{{n, {1, 2}}}, {}}, n, 1, 1};
      out[n] = exchange_records(*stores[n], 0, self, kNodes, kNodes, milliseconds(5000));
    });
  }
  for (auto& t : threads) t.join();
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_EQ(out[n].plan.resume, std::optional<std::int64_t>(2)) << n;
    EXPECT_EQ(out[n].plan.targets,
              (std::vector<std::string>{std::string("h") + std::to_string((n + 1) % kNodes) + ":1"}));
    // set + wait + get for the others; set + wait + multi_get + multi_set for group rank 0: whatever the nodes.
    EXPECT_LE(traffic[n]->ops.load(), 4u) << n;
  }
  EXPECT_EQ(out[0].steps.size(), static_cast<std::size_t>(kNodes));
  EXPECT_TRUE(out[1].steps.empty());
}

// The static backend keeps one round, and so one store, for every attempt: a node's record of attempt 0 is still
// there when attempt 1 exchanges. Group rank 0 must wait for the other's record of this attempt, never read the old
// one (which said what that node held before its workers saved anything); without it, the plan says so.
TEST(Exchange, AnAttemptReadsOnlyRecordsOfThatAttempt) {
  using std::chrono::milliseconds;
  store::MemoryStore store;
  NodeRecord a{0, "127.0.0.2:1", "", {}, 0, 2, 1}, b{1, "127.0.0.3:1", "", {}, 2, 2, 1};
  std::thread b0([&] { EXPECT_TRUE(exchange_records(store, 0, b, 2, 4, milliseconds(5000)).plan.off.empty()); });
  EXPECT_TRUE(exchange_records(store, 0, a, 2, 4, milliseconds(5000)).plan.off.empty());
  b0.join();

  a.holdings.own = {{0, {2, 3}}, {1, {2, 3}}};
  const auto alone = exchange_records(store, 1, a, 2, 4, milliseconds(50));  // b's attempt-0 record only
  EXPECT_NE(alone.plan.off.find("missing: node 1"), std::string::npos) << alone.plan.off;
  b.holdings.own = {{2, {2, 3}}, {3, {2, 3}}};
  std::thread b2([&] {
    const auto mine = exchange_records(store, 2, b, 2, 4, milliseconds(5000));
    EXPECT_EQ(mine.plan.resume, std::optional<std::int64_t>(3));
  });
  const auto ex = exchange_records(store, 2, a, 2, 4, milliseconds(5000));
  b2.join();
  EXPECT_EQ(ex.plan.resume, std::optional<std::int64_t>(3));
  EXPECT_EQ(ex.steps.at(3), (std::vector<std::int64_t>{2, 3}));
}

TEST(Exchange, TheRingSaysWhichReplicasANodeTakesAndWhetherAnyoneBrings) {
  NodeRecord a{0, "a:1", "", {{{0, {2, 3}}, {1, {2, 3}}}, {}}, 0, 2, 1};
  NodeRecord b{1, "b:1", "", {{{2, {2, 3}}, {3, {2, 3}}}, {}}, 2, 2, 1};
  NodeRecord c{2, "c:1", "", {{}, {{2, {2, 3}}, {3, {3}}}}, 4, 2, 1};
  EXPECT_EQ(ranks_replicated_to({a, b, c}, 1), (std::set<int>{0, 1}));
  EXPECT_EQ(ranks_replicated_to({a, b, c}, 0), (std::set<int>{4, 5}));
  NodeRecord c2 = c;
  c2.replicas = 2;  // c copies to a and b
  EXPECT_EQ(ranks_replicated_to({a, b, c2}, 1), (std::set<int>{0, 1, 4, 5}));
  const auto back = decode_record(encode_record(b));
  EXPECT_EQ(back.first_rank, 2);
  EXPECT_EQ(back.ranks, 2);
  EXPECT_FALSE(anyone_brings({a, b}, 3));
  EXPECT_TRUE(anyone_brings({a, b, c}, 3));  // c's ranks 4 and 5 hold nothing of their own
  // The plan carries both to each node, and survives its encoding.
  const auto plans = plan_nodes({a, b, c}, 6);
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].accepts, (std::set<int>{4, 5}));
  EXPECT_FALSE(plans[2].brings);  // ranks 4 and 5 hold no step: no resume step, nothing to bring
  NodeRecord replicas_only = b;
  std::swap(replicas_only.holdings.own, replicas_only.holdings.replicas);
  EXPECT_FALSE(plan_nodes({a, b}, 4)[1].brings);
  EXPECT_TRUE(plan_nodes({a, replicas_only}, 4)[1].brings);
  const NodePlan again = decode_plan(encode_plan(plans[0]));
  EXPECT_EQ(again.accepts, plans[0].accepts);
  EXPECT_EQ(again.brings, plans[0].brings);
}

// A step that no node could bring intact: group rank 0 plans again without it, every node gets its next plan (an
// older step every rank holds), and a settling with nothing refused ends with no plan.
TEST(Exchange, WhatNoNodeCouldBringIsPlannedAgainWithoutIt) {
  store::MemoryStore store;
  NodeRecord a{0, "a:1", "", {{{0, {2, 3}}, {1, {2, 3}}}, {}}, 0, 2, 1};
  NodeRecord b{1, "b:1", "", {{}, {{2, {2, 3}}, {3, {2, 3}}}}, 2, 2, 1};  // its ranks' steps as replicas only
  Unbrought seen0, seen1;
  std::thread other([&] {
    const auto first = exchange_records(store, 0, b, 2, 4, std::chrono::milliseconds(5000));
    EXPECT_EQ(first.plan.resume, std::optional<std::int64_t>(3));
    EXPECT_TRUE(first.plan.brings);
    Planner none;
    const auto next = settle_brings(store, 0, 0, 1, {{2, 3}}, 2, 4, none, std::chrono::milliseconds(5000), seen1);
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->resume, std::optional<std::int64_t>(2));
    EXPECT_EQ(seen1, (Unbrought{{2, 3}}));
    EXPECT_FALSE(settle_brings(store, 0, 1, 1, {}, 2, 4, none, std::chrono::milliseconds(5000), seen1).has_value());
    EXPECT_TRUE(seen1.empty());
  });
  auto ex = exchange_records(store, 0, a, 2, 4, std::chrono::milliseconds(5000));
  EXPECT_EQ(ex.plan.resume, std::optional<std::int64_t>(3));
  const auto next = settle_brings(store, 0, 0, 0, {}, 2, 4, ex.planner, std::chrono::milliseconds(5000), seen0);
  EXPECT_EQ(seen0, (Unbrought{{2, 3}}));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->resume, std::optional<std::int64_t>(2));
  EXPECT_FALSE(settle_brings(store, 0, 1, 0, {}, 2, 4, ex.planner, std::chrono::milliseconds(5000), seen0).has_value());
  other.join();
  EXPECT_EQ(ex.planner.refused, (Unbrought{{2, 3}}));
  // A node does not say in time: group rank 0's plan (and every node's) says so.
  Planner p;
  const auto late = settle_brings(store, 1, 0, 0, {}, 2, 4, p, std::chrono::milliseconds(50), seen0);
  ASSERT_TRUE(late.has_value());
  EXPECT_NE(late->off.find("not every node said"), std::string::npos) << late->off;
}

// plan_nodes builds its indices once (O(N) for a job of N nodes, where a walk over every record per node was
// O(N^2): minutes of group rank 0's time at 16,384 nodes, scale_bench's checkpoint row). Whatever the records' order,
// replica counts, holes in the endpoints and what each node holds, every node's part is what the per-node functions
// say it is: targets on the ring, the ranks it accepts, and for each rank it must bring, the holders in their order.
TEST(Exchange, ThePlanOfManyNodesIsWhatEachNodesRingAndHoldersSay) {
  constexpr int kNodes = 37, kRanks = 3;
  std::vector<NodeRecord> records;
  unsigned seed = 12345;
  const auto next = [&seed](unsigned mod) {
    seed = seed * 1103515245u + 12345u;
    return static_cast<int>((seed >> 16) % mod);
  };
  for (int n = 0; n < kNodes; ++n) {
    char endpoint[32] = "";  // none on every 11th node (it runs without a replication endpoint)
    if (n % 11 != 5) std::snprintf(endpoint, sizeof endpoint, "h%d:1", n);
    NodeRecord r{n, endpoint, "", {}, n * kRanks, kRanks, 1 + next(3)};
    const int before = (n + kNodes - 1) % kNodes;
    for (int rank = 0; rank < kNodes * kRanks; ++rank) {
      if (rank >= r.first_rank && rank < r.first_rank + kRanks) {
        // One in four of a node's own ranks lost its steps (a replaced node): it brings step 5 from elsewhere.
        if (next(4) != 0) r.holdings.own[rank] = {4, 5};
      } else if (rank / kRanks == before || next(20) == 0) {  // its ring predecessor's ranks, and a few more
        r.holdings.replicas[rank] = next(2) ? std::vector<std::int64_t>{5} : std::vector<std::int64_t>{4, 5};
      }
    }
    records.push_back(std::move(r));
  }
  std::swap(records[3], records[30]);  // the records in any order
  std::swap(records[0], records[17]);
  const auto plans = plan_nodes(records, kNodes * kRanks);
  ASSERT_EQ(plans.size(), records.size());
  ASSERT_EQ(plans[0].resume, std::optional<std::int64_t>(5));
  int bringing = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const NodeRecord& node = records[i];
    std::vector<std::string> targets;
    for (int t : ring_targets(node.group_rank, kNodes, node.replicas))
      for (const auto& other : records)
        if (other.group_rank == t && !other.endpoint.empty()) targets.push_back(other.endpoint);
    EXPECT_EQ(plans[i].targets, targets) << "node " << node.group_rank;
    EXPECT_EQ(plans[i].accepts, ranks_replicated_to(records, node.group_rank)) << "node " << node.group_rank;
    std::map<int, std::vector<std::string>> holders;
    for (int rank = node.first_rank; rank < node.first_rank + node.ranks; ++rank) {
      auto own = node.holdings.own.find(rank);
      if (own != node.holdings.own.end() &&
          std::find(own->second.begin(), own->second.end(), *plans[i].resume) != own->second.end())
        continue;
      auto rep = node.holdings.replicas.find(rank);
      if (rep != node.holdings.replicas.end() &&
          std::find(rep->second.begin(), rep->second.end(), *plans[i].resume) != rep->second.end())
        continue;
      holders[rank] = holders_of(records, rank, *plans[i].resume, node.group_rank);
    }
    bringing += !holders.empty();
    EXPECT_EQ(plans[i].holders, holders) << "node " << node.group_rank;
  }
  EXPECT_GT(bringing, 5) << "the records were meant to make many nodes bring a step";
}

}  // namespace
}  // namespace ctrun::agent::checkpoint
