#include "apps/bench/scale_bench/agent_group.hpp"
#include "apps/bench/scale_bench/child.hpp"

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "agent/checkpoint/exchange.hpp"
#include "agent/status/node_records.hpp"
#include "common/log.hpp"
#include "store/client_loop.hpp"
#include "store/counting_store.hpp"
#include "store/mux_store.hpp"

namespace ctrun::scale_bench {

using namespace std::chrono_literals;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void JoinResult::merge(const JoinResult& o) {
  if (o.nodes == 0) return;
  if (nodes == 0) {
    *this = o;
    return;
  }
  first_start_ns = std::min(first_start_ns, o.first_start_ns);
  first_end_ns = std::min(first_end_ns, o.first_end_ns);
  last_end_ns = std::max(last_end_ns, o.last_end_ns);
  nodes += o.nodes;
  failures += o.failures;
  ops += o.ops;
  bytes += o.bytes;
  rank0_ns = std::max(rank0_ns, o.rank0_ns);
  if (error.empty()) error = o.error;
}

std::string JoinResult::encode() const {
  return fmt::format("joined {} {} {} {} {} {} {} {} {}", first_start_ns, first_end_ns, last_end_ns, nodes, failures,
                     ops, bytes, rank0_ns, error);
}

JoinResult JoinResult::decode(const std::string& line) {
  JoinResult r;
  std::istringstream in(line);
  std::string tag;
  in >> tag >> r.first_start_ns >> r.first_end_ns >> r.last_end_ns >> r.nodes >> r.failures >> r.ops >> r.bytes >>
      r.rank0_ns;
  if (tag != "joined" || in.fail()) throw std::runtime_error("scale_bench: malformed result line '" + line + "'");
  std::getline(in >> std::ws, r.error);
  return r;
}

AgentGroup::AgentGroup(const GroupSpec& spec, const Connect& connect, const std::string& backend)
    : spec_(spec), runner_(std::make_shared<rdzv::Runner>(spec.threads)), rounds_(spec.count) {
  rdzv::C10dConfig config;
  config.run_id = spec.run_id;
  config.min_nodes = spec.min_nodes;
  config.max_nodes = spec.max_nodes;
  config.settings.join_timeout = 300s;  // torchrun's 600 s would hide a stuck round for 10 minutes
  config.backend = backend;
  config.runner = runner_;
  handlers_.reserve(spec.count);
  for (int i = spec.first; i < spec.first + spec.count; ++i) {
    handlers_.push_back(
        std::make_unique<rdzv::C10dHandler>(config, rdzv::NodeSpec{fmt::format("node{}", i), 8, "default"}, connect));
    handlers_.back()->set_worker_store_address(fmt::format("node{}", i), 29500);
  }
}

AgentGroup::~AgentGroup() { handlers_.clear(); }

// Joins in flight: started one by one, waited for together.
struct AgentGroup::Joins {
  std::mutex mutex;
  std::condition_variable done;
  std::size_t left = 0;
  JoinResult result;
};

void AgentGroup::start(Joins& j, int i) {
  {
    std::lock_guard lock(j.mutex);
    ++j.left;
    ++j.result.nodes;
    if (j.result.first_start_ns == 0) j.result.first_start_ns = now_ns();
  }
  handlers_[i]->begin_rendezvous([this, &j, i](std::optional<rdzv::RoundInfo> round, std::exception_ptr error) {
    const auto t = now_ns();
    std::lock_guard lock(j.mutex);
    auto& r = j.result;
    if (round) {
      rounds_[i] = *round;
    } else {
      ++r.failures;
      if (r.error.empty()) {
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          r.error = e.what();
        }
      }
    }
    r.first_end_ns = r.first_end_ns == 0 ? t : std::min(r.first_end_ns, t);
    r.last_end_ns = std::max(r.last_end_ns, t);
    if (--j.left == 0) j.done.notify_all();
  });
}

JoinResult AgentGroup::finish(Joins& j) {
  std::unique_lock lock(j.mutex);
  j.done.wait(lock, [&] { return j.left == 0; });
  std::replace(j.result.error.begin(), j.result.error.end(), '\n', ' ');
  return j.result;
}

// next_rendezvous() of every node at once (begin_rendezvous: no thread per node).
JoinResult AgentGroup::join() {
  Joins j;
  for (std::size_t i = 0; i < handlers_.size(); ++i) start(j, static_cast<int>(i));
  return finish(j);
}

// As the agent's membership poll (check_membership every --monitor-interval): a node whose round broke joins the
// next one at once. The polls cost the store nothing until the round's `over` key fires (c10d_handler.hpp).
JoinResult AgentGroup::follow() {
  Joins j;
  std::vector<bool> started(handlers_.size(), false);
  std::size_t count = 0;
  while (count < handlers_.size()) {
    for (std::size_t i = 0; i < handlers_.size(); ++i) {
      if (started[i]) continue;
      bool changed = false;
      try {
        changed = handlers_[i]->round_broken() || handlers_[i]->num_nodes_waiting() > 0;
      } catch (const std::exception&) {
        changed = true;  // the store failed: the next round says how
      }
      if (!changed) continue;
      started[i] = true;
      ++count;
      start(j, static_cast<int>(i));
    }
    if (count < handlers_.size()) std::this_thread::sleep_for(5ms);
  }
  return finish(j);
}

namespace {

// A thread with a small stack (thousands of them at once: one per simulated node in an exchange).
class SmallThread {
 public:
  explicit SmallThread(std::function<void()> fn) : fn_(std::move(fn)) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    const int rc = pthread_create(&id_, &attr, &SmallThread::run, this);
    pthread_attr_destroy(&attr);
    if (rc != 0) throw std::runtime_error(fmt::format("scale_bench: cannot start a thread: {}", std::strerror(rc)));
  }
  ~SmallThread() { pthread_join(id_, nullptr); }

 private:
  static void* run(void* self) {
    static_cast<SmallThread*>(self)->fn_();
    return nullptr;
  }
  std::function<void()> fn_;
  pthread_t id_{};
};

agent::checkpoint::NodeRecord checkpoint_record(int node, const rdzv::RoundInfo& round) {
  // What each node of a job that saved steps 10 and 20 holds: its ranks' own snapshots, and (--checkpoint-replicas
  // 1) its ring predecessor's as replicas.
  constexpr int kRanks = 8;
  agent::checkpoint::NodeRecord r;
  r.group_rank = round.group_rank;
  r.endpoint = fmt::format("node{}:29600", node);
  r.first_rank = round.group_rank * kRanks;
  r.ranks = kRanks;
  const int before = (round.group_rank + round.group_world_size - 1) % round.group_world_size;
  for (int i = 0; i < kRanks; ++i) {
    r.holdings.own[r.first_rank + i] = {10, 20};
    r.holdings.replicas[before * kRanks + i] = {10, 20};
  }
  return r;
}

}  // namespace

JoinResult AgentGroup::each_node(const std::function<void(int, JoinResult&)>& work) {
  std::vector<JoinResult> results(handlers_.size());
  const auto start = now_ns();
  {
    std::vector<std::unique_ptr<SmallThread>> threads;
    for (std::size_t i = 0; i < handlers_.size(); ++i) {
      threads.push_back(std::make_unique<SmallThread>([&, i] {
        auto& r = results[i];
        r.first_start_ns = now_ns();
        try {
          work(static_cast<int>(i), r);
          if (r.nodes) r.first_end_ns = r.last_end_ns = now_ns();
        } catch (const std::exception& e) {
          r.nodes = 1;
          r.failures = 1;
          r.error = e.what();
          r.first_end_ns = r.last_end_ns = now_ns();
        }
      }));
    }
  }
  JoinResult total;
  for (auto& r : results) total.merge(r);
  if (total.nodes == 0) total.first_start_ns = total.first_end_ns = total.last_end_ns = start;
  std::replace(total.error.begin(), total.error.end(), '\n', ' ');
  return total;
}

// The agent's real exchange (agent/checkpoint/exchange.hpp) on each node's round store, counted.
JoinResult AgentGroup::checkpoint(int restart_count) {
  return each_node([&](int i, JoinResult& r) {
    const auto& round = rounds_[i];
    if (!round.store) throw std::runtime_error(fmt::format("node{} holds no round", spec_.first + i));
    auto traffic = std::make_shared<store::StoreTraffic>();
    store::CountingStore counted(round.store, traffic);
    const auto started = now_ns();
    const auto got =
        agent::checkpoint::exchange_records(counted, restart_count, checkpoint_record(spec_.first + i, round),
                                            round.group_world_size, round.global_world_size, 120s);
    if (round.group_rank == 0) r.rank0_ns = now_ns() - started;
    r.nodes = 1;
    r.ops = traffic->ops;
    r.bytes = traffic->bytes;
    if (!got.plan.off.empty() || got.plan.resume != std::optional<std::int64_t>(20) || got.plan.targets.size() != 1) {
      r.failures = 1;
      r.error = got.plan.off.empty() ? "a plan without resume step 20 and one target" : got.plan.off;
    }
  });
}

// The live view's exchange (agent/status/node_records.hpp): each node's first record of the attempt, or group rank
// 0's read of every published one.
JoinResult AgentGroup::status(int restart_count, bool read) {
  return each_node([&](int i, JoinResult& r) {
    const auto& round = rounds_[i];
    if (!round.store) throw std::runtime_error(fmt::format("node{} holds no round", spec_.first + i));
    if (read != (round.group_rank == 0)) return;
    auto traffic = std::make_shared<store::StoreTraffic>();
    store::CountingStore counted(round.store, traffic);
    agent::status::RecordsStep step;
    // About what a node's checkpoint section says (agent/checkpoint/status_section.cpp): its ranks' newest steps.
    step.record = fmt::format("{{\"checkpoint\":{{\"node\":\"node{}\",\"steps\":[10,20],\"bytes\":8589934592}}}}",
                              spec_.first + i);
    step.write = step.index = !read;
    step.read = read;
    const auto started = now_ns();
    const auto records =
        agent::status::exchange_records(counted, restart_count, round.group_rank, round.group_world_size, step);
    r.nodes = 1;
    r.ops = traffic->ops;
    r.bytes = traffic->bytes;
    if (read) {
      r.rank0_ns = now_ns() - started;
      if (static_cast<int>(records.size()) != round.group_world_size - 1) {
        r.failures = 1;
        r.error = fmt::format("group rank 0 read {} records of {} nodes", records.size(), round.group_world_size - 1);
      }
    }
  });
}

void AgentGroup::shutdown() {
  for (auto& h : handlers_) h->shutdown();
}

int agent_group_main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: scale_bench --agent-group PORT RUN_ID MIN MAX FIRST COUNT THREADS (internal)\n");
    return 2;
  }
  begin_child_process();
  const auto port = static_cast<std::uint16_t>(std::stoi(argv[2]));
  GroupSpec spec{argv[3],           std::stoi(argv[4]), std::stoi(argv[5]), std::stoi(argv[6]), std::stoi(argv[7]),
                 std::stoi(argv[8])};
  auto loop = std::make_shared<store::ClientLoop>();
  std::unique_ptr<AgentGroup> group;
  try {
    group = std::make_unique<AgentGroup>(spec, [port, loop]() -> std::shared_ptr<store::Store> {
      store::MuxStore::Options o;
      o.host = "127.0.0.1";
      o.port = port;
      o.timeout = 120s;
      o.connect_timeout = 30s;
      return std::make_shared<store::MuxStore>(o, loop);
    });
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::printf("error %s\n", what.c_str());
    std::fflush(stdout);
    return 1;
  }
  std::printf("ready %d\n", spec.count);
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::string command;
    int restart = 0;
    words >> command >> restart;
    if (line == "join" || line == "follow" || command == "checkpoint" || command == "status" ||
        command == "status-read") {
      const auto r = line == "join"            ? group->join()
                     : line == "follow"        ? group->follow()
                     : command == "checkpoint" ? group->checkpoint(restart)
                                               : group->status(restart, command == "status-read");
      std::printf("%s\n", r.encode().c_str());
      std::fflush(stdout);
    } else if (line == "quit") {
      group->shutdown();
      group.reset();
      std::printf("bye\n");
      std::fflush(stdout);
      return 0;
    }
  }
  return 0;  // the bench is gone: exit without closing the run
}

}  // namespace ctrun::scale_bench
