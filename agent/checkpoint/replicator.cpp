#include "agent/checkpoint/replicator.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "agent/checkpoint/layout.hpp"
#include "agent/checkpoint/replica_transfer.hpp"

namespace ctrun::agent::checkpoint {
namespace fs = std::filesystem;
namespace {

// rank-<R>/.replicated = "<step>", replaced whole (a reader never sees half a number).
void mark_replicated(const std::string& job_dir, int rank, std::int64_t step) {
  const fs::path dir = fs::path(job_dir) / rank_dir_name(rank);
  const fs::path tmp = dir / (std::string(kPartialPrefix) + "replicated-" + std::to_string(::getpid()));
  {
    std::ofstream out(tmp);
    out << step;
    if (!out) return;
  }
  std::error_code ec;
  fs::rename(tmp, dir / kReplicatedFile, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

Replicator::Replicator(std::string job_dir, std::function<void(const ReplicationOutcome&)> done,
                       std::shared_ptr<const auth::Secret> secret)
    : dir_(std::move(job_dir)), done_(std::move(done)), secret_(std::move(secret)), thread_([this] { run(); }) {}

Replicator::~Replicator() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Replicator::submit(ReplicationTask task) {
  {
    std::lock_guard lock(mu_);
    pending_ = std::move(task);
  }
  cv_.notify_all();
}

void Replicator::run() {
  for (;;) {
    ReplicationTask task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || pending_; });
      if (stop_) return;
      task = std::move(*pending_);
      pending_.reset();
    }
    ReplicationOutcome out;
    out.step = task.step;
    const auto began = std::chrono::steady_clock::now();
    for (const auto& target : task.targets) {
      try {
        for (const auto& [rank, file] : task.files) {
          push_snapshot(target, rank, task.step, file, stop_, kTransferIdle, secret_.get());
          std::error_code ec;
          const auto size = fs::file_size(file, ec);
          out.bytes += ec ? 0 : size;
          sent_ += ec ? 0 : size;
        }
        out.to.push_back(target);
      } catch (const std::exception& e) {
        out.error += (out.error.empty() ? "" : "; ") + target + ": " + e.what();
      }
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (stop_) return;
    if (out.error.empty() && !task.targets.empty()) {
      for (const auto& [rank, file] : task.files) mark_replicated(dir_, rank, task.step);
      replicated_ = task.step;
    }
    if (done_) done_(out);
  }
}

}  // namespace ctrun::agent::checkpoint
