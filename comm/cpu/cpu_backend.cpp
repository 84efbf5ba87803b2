#include "comm/cpu/cpu_backend.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/selection.hpp"
#include "comm/cpu/transports.hpp"
#include "comm/cpu/two_level.hpp"
#include "comm/progress_slot.hpp"
#include "comm/reduce/reduce.hpp"
#include "comm/transport/messenger.hpp"
#include "common/log.hpp"
#include "common/progress.hpp"

namespace ctrun::comm::cpu {
namespace {

using algorithms::Algorithm;
using algorithms::Context;
using algorithms::OpKind;
using transport::Clock;

void register_op_names() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    for (const auto& o : algorithms::op_table()) names.emplace_back(o.name);
    transport::set_op_kind_names(std::move(names));
  });
}

// Re-raises the current exception with the op's description in front, keeping its type.

[[noreturn]] void rethrow_with_context(const std::string& what) {
  try {
    throw;
  } catch (const TimeoutError& e) {
    throw TimeoutError(what + ": " + e.what());
  } catch (const PeerError& e) {
    throw PeerError(what + ": " + e.what());
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(what + ": " + e.what());
  } catch (const std::exception& e) {
    throw CommError(what + ": " + e.what());
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(BackendContext context) : Backend(std::move(context)) {
    register_op_names();
    selector_ = algorithms::Selector(context_.config.algorithm);
    std::string kind = context_.config.transport;
    std::optional<algorithms::HostLayout> layout;
    if (kind == "auto") {
      // shm when every rank can map this host's segments (same host, same IPC, mount and pid namespaces), tcp
      // when no two ranks can, two levels (shm inside each host, tcp between) otherwise.
      layout = algorithms::HostLayout::from_identities(exchange_host_identities(context_));
      kind = layout->single_host() ? "shm" : "tcp";
    }
    if (kind == "shm") {
      transport_ = make_shm(context_, context_.store, rank(), size());
    } else if (kind == "tcp") {
      transport_ = make_tcp(context_);
    } else {
      throw InvalidArgumentError("unknown comm transport '" + kind + "' (use auto, tcp or shm)");
    }
    transport_name_ = kind;
    chunk_bytes_ = context_.config.chunk_bytes_for(transport_name_);
    if (auto* ws = transport_->workspace()) {
      available_ = ws->peer_reads() ? algorithms::Needs::kPeerReads : algorithms::Needs::kSharedMemory;
    }
    messenger_ = std::make_unique<transport::Messenger>(*transport_, rank(), size());
    if (layout && !layout->single_host() && !layout->one_rank_per_host()) {
      two_level_ = std::make_unique<TwoLevel>(context_, std::move(*layout), *messenger_, selector_, chunk_bytes_);
      transport_name_ = "shm+tcp";
      log::get("comm")->debug("comm cpu: rank {}/{} in two levels: {}", rank(), size(), two_level_->describe());
    }
    progress_ = claim_progress_slot(context_);
    if (progress_.enabled()) {
      messenger_->set_progress(&progress_);
      transport_->set_progress(&progress_);
    }
    log::get("comm")->debug("comm cpu: rank {}/{} transport {}", rank(), size(), transport_name_);
    worker_ = std::thread([this] { run(); });
  }

  ~CpuBackend() override { stop(); }

  std::string_view name() const override { return "cpu"; }
  bool supports(Device device) const override { return device.is_cpu(); }

  WorkPtr send(Buffer buffer, int dst, int tag) override { return batch_p2p({P2POp::send(buffer, dst, tag)}); }
  WorkPtr recv(Buffer buffer, int src, int tag) override { return batch_p2p({P2POp::recv(buffer, src, tag)}); }
  bool supports_any_source() const override { return true; }

  WorkPtr batch_p2p(std::vector<P2POp> ops) override {
    auto work = std::make_shared<CompletionWork>(context_.options.timeout);
    enqueue([this, ops = std::move(ops), work](std::uint64_t) { post_p2p(ops, work); }, nullptr);
    return work;
  }

  // Every collective: the arguments into OpArgs, the algorithm table does the rest (collective()).
  WorkPtr broadcast(Buffer buffer, int root) override {
    return collective(OpKind::kBroadcast, buffer.dtype(), buffer.bytes(), {.buffer = buffer, .root = root});
  }
  WorkPtr all_reduce(Buffer buffer, ReduceOp op) override {
    return collective(OpKind::kAllReduce, buffer.dtype(), buffer.bytes(), {.buffer = buffer, .op = op});
  }
  WorkPtr reduce(Buffer buffer, int root, ReduceOp op) override {
    return collective(OpKind::kReduce, buffer.dtype(), buffer.bytes(), {.buffer = buffer, .root = root, .op = op});
  }
  WorkPtr all_gather(std::vector<Buffer> outputs, Buffer input) override {
    return collective(OpKind::kAllGather, input.dtype(), input.bytes(),
                      {.buffer = input, .outputs = std::move(outputs)});
  }
  WorkPtr gather(std::vector<Buffer> outputs, Buffer input, int root) override {
    return collective(OpKind::kGather, input.dtype(), input.bytes(),
                      {.buffer = input, .outputs = std::move(outputs), .root = root});
  }
  WorkPtr scatter(Buffer output, std::vector<Buffer> inputs, int root) override {
    return collective(OpKind::kScatter, output.dtype(), output.bytes(),
                      {.buffer = output, .inputs = std::move(inputs), .root = root});
  }
  WorkPtr reduce_scatter(Buffer output, std::vector<Buffer> inputs, ReduceOp op) override {
    return collective(OpKind::kReduceScatter, output.dtype(), output.bytes(),
                      {.buffer = output, .inputs = std::move(inputs), .op = op});
  }
  WorkPtr all_to_all(std::vector<Buffer> outputs, std::vector<Buffer> inputs) override {
    const DataType dtype = inputs.empty() ? DataType::kUInt8 : inputs[0].dtype();
    return collective(OpKind::kAllToAll, dtype, 0, {.outputs = std::move(outputs), .inputs = std::move(inputs)});
  }
  WorkPtr barrier() override { return collective(OpKind::kBarrier, DataType::kUInt8, 0, {}); }

  void abort(const std::string& reason) override {
    auto work = std::make_shared<CompletionWork>(context_.options.timeout);
    enqueue(
        [this, reason](std::uint64_t) {
          auto error = std::make_exception_ptr(CommError("comm: the group was aborted: " + reason));
          messenger_->abort(reason, error);
          if (two_level_) two_level_->abort(reason, error);
        },
        work);
    work->wait();
  }

 private:
  struct Task {
    std::function<void(std::uint64_t)> run;  // called with seq
    std::shared_ptr<CompletionWork> work;    // completed after run() (null: run() completes its own work)
    std::uint64_t seq = 0;                   // the collective's number (0 for other tasks)
  };

  // A p2p request the worker watches for its deadline (and the progress record shows while it is pending).
  struct PendingP2P {
    transport::RequestPtr request;
    Clock::time_point deadline;
    std::int64_t posted_ns = 0;  // CLOCK_MONOTONIC, for the progress record (0 when records are off)
  };

  // The group's collectives are numbered in issue order (under the queue lock, which is also the order they run
  // in): the number goes into every message tag (mismatched ops are caught by it) and into the progress record.
  WorkPtr collective(OpKind kind, DataType dtype, std::size_t bytes, algorithms::OpArgs args) {
    auto work = std::make_shared<CompletionWork>(context_.options.timeout);
    const auto op = static_cast<std::uint32_t>(kind);
    const auto type = static_cast<std::uint32_t>(dtype);
    enqueue_numbered(
        [this, kind, dtype, bytes, op, type, args = std::move(args)](std::uint64_t seq) mutable {
          progress_.running(seq, op, type, bytes);
          struct Finish {  // the record says done however the op ends
            progress::SlotWriter& w;
            bool ok = false;
            ~Finish() { w.finished(ok); }
          } finish{progress_};
          run_collective(seq, kind, dtype, bytes, args);
          finish.ok = true;
        },
        work, [this, op, type, bytes](std::uint64_t seq) { progress_.issued(seq, op, type, bytes); });
    return work;
  }

  void run_collective(std::uint64_t seq, OpKind kind, DataType dtype, std::size_t bytes, algorithms::OpArgs& args) {
    const algorithms::AlgorithmRow* row = selector_.choose(kind, bytes, size(), available_);
    if (!row) throw CommError(std::string("comm: no algorithm implements ") + op_name(kind));
    std::string algorithm = algorithm_name(row->algorithm);
    const std::uint64_t tag = transport::collective_tag(static_cast<int>(kind), dtype, seq);
    const auto deadline = Clock::now() + context_.options.timeout;
    Context ctx(*messenger_, rank(), size(), tag, deadline, scratch_, chunk_bytes_);
    try {
      if (auto fatal = messenger_->fatal_error()) std::rethrow_exception(fatal);
      const algorithms::OpRow& info = algorithms::op_row(kind);
      const bool two_level = two_level_ && TwoLevel::handles(kind);
      if (bytes == 0 && size() > 1 && info.equal_sizes &&
          (two_level || row->needs == algorithms::Needs::kAnyTransport)) {
        exchange_empty_around_ring(ctx);
      } else {
        const ReduceOp requested = args.op;
        if (requested == ReduceOp::kAvg) args.op = ReduceOp::kSum;  // AVG = SUM, then one division here
        if (two_level) {
          two_level_->run(kind, args, tag, deadline, &algorithm);
        } else {
          row->run(ctx, args);
        }
        if (requested == ReduceOp::kAvg) divide_for_avg(info.avg, args);
      }
    } catch (const InvalidArgumentError&) {
      throw;
    } catch (const CommError& e) {
      // A timeout or a broken peer leaves the other ranks mid-collective: abort so they fail fast too.
      const std::string reason =
          std::string(op_name(kind)) + " failed on rank " + std::to_string(rank()) + ": " + e.what();
      messenger_->abort(reason, std::current_exception());
      if (two_level_) two_level_->abort(reason, std::current_exception());
      rethrow_with_context(std::string(op_name(kind)) + " (" + std::string(to_string(dtype)) + ", " +
                           std::to_string(bytes) + " bytes, " + algorithm + ", " + transport_name_ + ") on rank " +
                           std::to_string(rank()) + (two_level_ ? " (" + two_level_->local_ranks_text() + ")" : ""));
    }
  }

  void divide_for_avg(algorithms::AvgOn where, const algorithms::OpArgs& args) {
    if (where == algorithms::AvgOn::kNothing) return;
    if (where == algorithms::AvgOn::kBufferAtRoot && rank() != args.root) return;
    reduce::divide(args.buffer.dtype(), args.buffer.data(), args.buffer.count(), size());
  }

  // The message-passing algorithms send nothing for an empty buffer, so a rank that passed 0 elements while
  // others passed more would leave them waiting until the timeout (or, in a broadcast, let everyone finish
  // silently). Empty ranks instead send an empty message to the right and receive one from the left: a peer
  // running the real algorithm then sees a 0-byte message where it expects data, or sends data where this
  // rank expects 0 bytes, and both report the size mismatch. When every rank is empty this costs one step.
  static void exchange_empty_around_ring(Context& ctx) {
    auto recv = ctx.irecv(ctx.peer(-1), nullptr, 0);
    auto send = ctx.isend(ctx.peer(1), nullptr, 0);
    ctx.wait({recv, send});
  }

  void post_p2p(const std::vector<P2POp>& ops, const std::shared_ptr<CompletionWork>& work) {
    if (ops.empty()) return work->complete();
    struct Batch {
      std::size_t remaining;
      std::exception_ptr error;
    };
    auto batch = std::make_shared<Batch>(Batch{ops.size(), nullptr});
    const auto deadline = Clock::now() + context_.options.timeout;
    for (const auto& op : ops) {
      auto r = std::make_shared<transport::Request>();
      r->kind = op.kind == P2POp::Kind::kSend ? transport::Request::Kind::kSend : transport::Request::Kind::kRecv;
      r->peer = op.peer == kAnySource ? transport::kAnyPeer : op.peer;
      r->tag = static_cast<std::uint64_t>(op.tag);
      r->data = static_cast<char*>(op.buffer.data());
      r->bytes = op.buffer.bytes();
      const bool single_recv = ops.size() == 1 && op.kind == P2POp::Kind::kRecv;
      r->on_done = [batch, work, single_recv](transport::Request& done) {
        if (done.error && !batch->error) batch->error = done.error;
        if (single_recv && !done.error) work->set_source_rank(done.peer);
        if (--batch->remaining == 0) work->complete(batch->error);
      };
      messenger_->post(r);
      if (!r->finished) p2p_.push_back({r, deadline, progress_.enabled() ? progress::now_ns() : 0});
      ++p2p_posted_;
    }
  }

  void enqueue(std::function<void(std::uint64_t)> run, std::shared_ptr<CompletionWork> work) {
    enqueue_numbered(std::move(run), std::move(work), nullptr, false);
  }

  // Queues `run`, handing it the group's next collective number when `numbered` (and `issued` with it, under
  // the lock, so numbers and the issue records follow the queue's order).
  template <class Issued>
  void enqueue_numbered(std::function<void(std::uint64_t)> run, std::shared_ptr<CompletionWork> work, Issued issued,
                        bool numbered = true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) {
        if (work) work->complete(std::make_exception_ptr(CommError("comm: the process group was shut down")));
        return;
      }
      std::uint64_t seq = 0;
      if (numbered) {
        seq = seq_++;
        if constexpr (!std::is_same_v<Issued, std::nullptr_t>) issued(seq);
      }
      queue_.push_back({std::move(run), std::move(work), seq});
    }
    cv_.notify_one();
    if (in_transport_wait_.load()) transport_->interrupt();
  }

  // Fails p2p ops older than the group timeout: like torch, a timed-out op aborts the whole group.
  void expire_p2p() {
    const auto now = Clock::now();
    std::erase_if(p2p_, [](const PendingP2P& p) { return p.request->finished; });
    for (const auto& p : p2p_) {
      if (p.deadline <= now) {
        const auto& r = *p.request;
        const std::string what =
            std::string(r.kind == transport::Request::Kind::kSend ? "send to" : "recv from") +
            (r.peer == transport::kAnyPeer ? std::string(" any rank") : " rank " + std::to_string(r.peer)) + " (tag " +
            std::to_string(r.tag) + ", " + std::to_string(r.bytes) + " bytes) on rank " + std::to_string(rank()) +
            " timed out after " + std::to_string(context_.options.timeout.count()) + " ms";
        messenger_->abort(what, std::make_exception_ptr(TimeoutError(what)));
        p2p_.clear();
        return;
      }
    }
  }

  // The progress record's p2p part: how many p2p ops are pending and the oldest (the record writes only when
  // that changed). On the worker thread, the one writer of that part.
  void note_p2p() {
    if (!progress_.enabled()) return;
    std::uint32_t pending = 0;
    const PendingP2P* oldest = nullptr;
    for (const auto& p : p2p_) {
      if (p.request->finished) continue;
      ++pending;
      if (!oldest) oldest = &p;
    }
    const auto completed = p2p_posted_ - pending;
    if (!oldest) return progress_.p2p(0, progress::P2pKind::kSend, -1, 0, 0, completed);
    const auto& r = *oldest->request;
    progress_.p2p(pending,
                  r.kind == transport::Request::Kind::kRecv ? progress::P2pKind::kRecv : progress::P2pKind::kSend,
                  r.peer, r.bytes, oldest->posted_ns, completed);
  }

  Clock::time_point next_p2p_deadline() const {
    auto t = Clock::now() + std::chrono::seconds(1);
    for (const auto& p : p2p_) t = std::min(t, p.deadline);
    return t;
  }

  void run() {
    for (;;) {
      std::optional<Task> task;
      bool stopping = false;
      in_transport_wait_.store(true);
      const std::uint64_t token = transport_->event_token();
      {
        std::lock_guard lock(mutex_);
        if (!queue_.empty()) {
          task = std::move(queue_.front());
          queue_.pop_front();
        }
        stopping = stopping_;
      }
      if (task) {
        in_transport_wait_.store(false);
        execute(*task);
        note_p2p();
        continue;
      }
      if (messenger_->has_pending()) {
        // Shutting down: flush posted sends (a rank often sends and exits), but never wait for receives.
        if (stopping && (!messenger_->has_pending_sends() || Clock::now() >= stop_deadline_)) break;
        try {
          expire_p2p();
          note_p2p();
          idle_progress(token, stopping);
        } catch (const std::exception& e) {
          // Nothing may escape the worker thread: fail everything pending instead.
          messenger_->abort(std::string("comm worker: ") + e.what(), std::current_exception());
        }
        continue;
      }
      in_transport_wait_.store(false);
      note_p2p();  // nothing pending any more: the record says so before the worker sleeps
      std::unique_lock lock(mutex_);
      if (stopping_ && queue_.empty()) break;
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    }
    in_transport_wait_.store(false);
  }

  // Pending p2p and nothing queued: move bytes, else sleep until an event, a new op, or a p2p deadline.
  void idle_progress(std::uint64_t token, bool stopping) {
    if (messenger_->progress()) return;
    const auto until = stopping ? std::min(next_p2p_deadline(), stop_deadline_) : next_p2p_deadline();
    messenger_->progress_or_wait(token, until);
  }

  void execute(Task& task) {
    std::exception_ptr error;
    try {
      task.run(task.seq);
    } catch (...) {
      error = std::current_exception();
    }
    if (task.work) task.work->complete(error);
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
      // Queued ops still run, and sends already posted get this long to drain (a rank often sends and exits).
      stop_deadline_ = Clock::now() + std::min<Duration>(context_.options.timeout, std::chrono::seconds(10));
    }
    cv_.notify_all();
    transport_->interrupt();
    if (worker_.joinable()) worker_.join();
    // Orderly: peers see our connections close (tcp) or our process exit (shm) only if they still wait on us, and
    // the goodbye first tells them we left rather than failed (their receives from any rank keep waiting).
    messenger_->say_goodbye();
    messenger_->close(std::make_exception_ptr(CommError("comm: the process group was shut down")));
    if (two_level_) two_level_->close(std::make_exception_ptr(CommError("comm: the process group was shut down")));
    progress::release_slot(progress_);
  }

  algorithms::Selector selector_;
  algorithms::Needs available_ = algorithms::Needs::kAnyTransport;  // what the transport offers the table
  std::size_t chunk_bytes_ = 0;
  std::string transport_name_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Messenger> messenger_;
  std::unique_ptr<TwoLevel> two_level_;  // a group spanning hosts with several ranks on some: shm inside them
  algorithms::Scratch scratch_;
  std::uint64_t seq_ = 0;  // the group's collective counter (guarded by mutex_)
  progress::SlotWriter progress_;
  std::vector<PendingP2P> p2p_;
  std::uint64_t p2p_posted_ = 0;  // p2p ops posted (the worker thread's): completed = posted - pending

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  Clock::time_point stop_deadline_{};
  std::atomic<bool> in_transport_wait_{false};
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(BackendContext context) {
  return std::make_unique<CpuBackend>(std::move(context));
}

}  // namespace ctrun::comm::cpu
