#include "apps/bench/rdzv_bench/agent_group.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <sstream>

#include <fmt/format.h>

namespace ctrun::rdzv_bench {
namespace {

using namespace std::chrono_literals;

double seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; }

void process_usage(double& cpu, double& sys, std::uint64_t& csw) {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  cpu = seconds(u.ru_utime) + seconds(u.ru_stime);
  sys = seconds(u.ru_stime);
  csw = static_cast<std::uint64_t>(u.ru_nvcsw + u.ru_nivcsw);
}

}  // namespace

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void GroupResult::merge(const GroupResult& o) {
  if (o.agents == 0) return;
  if (agents == 0) {
    *this = o;
    return;
  }
  first_start_ns = std::min(first_start_ns, o.first_start_ns);
  last_start_ns = std::max(last_start_ns, o.last_start_ns);
  first_end_ns = std::min(first_end_ns, o.first_end_ns);
  last_end_ns = std::max(last_end_ns, o.last_end_ns);
  agents += o.agents;
  failures += o.failures;
  ops += o.ops;
  bytes += o.bytes;
  cpu_s += o.cpu_s;
  sys_s += o.sys_s;
  csw += o.csw;
}

std::string GroupResult::encode() const {
  return fmt::format("result {} {} {} {} {} {} {} {} {:.6f} {:.6f} {}", first_start_ns, last_start_ns, first_end_ns,
                     last_end_ns, agents, failures, ops, bytes, cpu_s, sys_s, csw);
}

GroupResult GroupResult::decode(const std::string& line) {
  GroupResult r;
  std::istringstream in(line);
  std::string tag;
  in >> tag >> r.first_start_ns >> r.last_start_ns >> r.first_end_ns >> r.last_end_ns >> r.agents >> r.failures >>
      r.ops >> r.bytes >> r.cpu_s >> r.sys_s >> r.csw;
  if (tag != "result" || in.fail()) throw std::runtime_error("rdzv_bench: malformed result line '" + line + "'");
  return r;
}

AgentGroup::AgentGroup(const GroupSpec& spec, const Connect& connect)
    : spec_(spec), traffic_(std::make_shared<store::StoreTraffic>()), starts_(spec.count), ends_(spec.count) {
  rdzv::C10dConfig config;
  config.run_id = spec.run_id;
  config.min_nodes = config.max_nodes = spec.total;
  config.settings.join_timeout = 120s;
  config.settings.keep_alive_interval = 60s;  // heartbeats are per interval, not per round: keep them out
  config.backend = spec.backend;
  handlers_.reserve(spec.count);
  for (int i = spec.first; i < spec.first + spec.count; ++i) {
    bool first = true;  // the first connection (joins, polls) is counted; the heartbeat one is not
    auto counted = [&]() -> std::shared_ptr<store::Store> {
      auto s = connect();
      if (!first) return s;
      first = false;
      return std::make_shared<store::CountingStore>(s, traffic_);
    };
    handlers_.push_back(
        std::make_unique<rdzv::C10dHandler>(config, rdzv::NodeSpec{fmt::format("node{}", i), 8, "default"}, counted));
    handlers_.back()->set_worker_store_address(fmt::format("node{}", i), 29500);
  }
  threads_.reserve(spec.count);
  for (int i = 0; i < spec.count; ++i)
    threads_.emplace_back([this, i] {
      parked_.fetch_add(1);
      go_.wait(false);  // a futex: no CPU until release()
      starts_[i] = now_ns();
      try {
        handlers_[i]->next_rendezvous();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "agent %d: %s\n", spec_.first + i, e.what());
        failures_++;
      }
      ends_[i] = now_ns();
    });
  while (parked_.load() < spec.count) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);  // the last ones from "parked" into the futex wait
  traffic_->bytes = 0;
  traffic_->ops = 0;
}

AgentGroup::~AgentGroup() {
  if (!go_) release();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void AgentGroup::release() {
  process_usage(cpu_at_release_, sys_at_release_, csw_at_release_);
  go_ = true;
  go_.notify_all();
}

GroupResult AgentGroup::join() {
  for (auto& t : threads_) t.join();
  GroupResult r;
  double cpu = 0, sys = 0;
  std::uint64_t csw = 0;
  process_usage(cpu, sys, csw);
  r.cpu_s = cpu - cpu_at_release_;
  r.sys_s = sys - sys_at_release_;
  r.csw = csw - csw_at_release_;
  r.agents = static_cast<std::uint64_t>(spec_.count);
  r.failures = failures_;
  r.ops = traffic_->ops;
  r.bytes = traffic_->bytes;
  if (!starts_.empty()) {
    r.first_start_ns = *std::min_element(starts_.begin(), starts_.end());
    r.last_start_ns = *std::max_element(starts_.begin(), starts_.end());
    r.first_end_ns = *std::min_element(ends_.begin(), ends_.end());
    r.last_end_ns = *std::max_element(ends_.begin(), ends_.end());
  }
  return r;
}

void AgentGroup::shutdown() {
  for (auto& h : handlers_) h->shutdown();
}

}  // namespace ctrun::rdzv_bench
