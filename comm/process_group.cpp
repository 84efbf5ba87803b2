#include "comm/process_group.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <set>

#include "comm/init/init_method.hpp"
#include "comm/tags.hpp"
#include "store/prefix_store.hpp"

namespace ctrun::comm {
namespace {

void check_tag(int tag, const char* what) {
  if (tag < 0 || tag > kMaxUserTag) {
    throw InvalidArgumentError(std::string(what) + ": tag " + std::to_string(tag) +
                               (tag < 0 ? " is negative" : " is reserved for comm's own messages") +
                               "; use a tag in 0.." + std::to_string(kMaxUserTag));
  }
}

void check_buffer(const Backend& backend, const Buffer& b, const char* what) {
  if (b.count() > 0 && b.data() == nullptr) {
    throw InvalidArgumentError(std::string(what) + ": null data pointer with " + std::to_string(b.count()) +
                               " elements");
  }
  if (!backend.supports(b.device())) {
    throw InvalidArgumentError(std::string(what) + ": buffer on " + to_string(b.device()) + " but backend '" +
                               std::string(backend.name()) + "' cannot use that device" +
                               (b.is_cuda() ? " (use backend \"nccl\" or copy to host)" : ""));
  }
}

void check_same(const Buffer& ref, const Buffer& b, const char* what, std::size_t index, bool same_count = true) {
  if (b.dtype() != ref.dtype()) {
    throw InvalidArgumentError(std::string(what) + ": buffer " + std::to_string(index) + " has dtype " +
                               std::string(to_string(b.dtype())) + " but the op's dtype is " +
                               std::string(to_string(ref.dtype())));
  }
  if (same_count && b.count() != ref.count()) {
    throw InvalidArgumentError(std::string(what) + ": buffer " + std::to_string(index) + " has " +
                               std::to_string(b.count()) + " elements, expected " + std::to_string(ref.count()));
  }
  if (b.device() != ref.device()) {
    throw InvalidArgumentError(std::string(what) + ": buffers are on different devices");
  }
}

void check_op(ReduceOp op, DataType dtype, const char* what) {
  if (static_cast<int>(op) >= kNumReduceOps) throw InvalidArgumentError(std::string(what) + ": invalid reduce op");
  if (is_bitwise(op) && is_floating_point(dtype)) {
    throw InvalidArgumentError(std::string(what) + ": " + std::string(to_string(op)) +
                               " is a bitwise op and needs an "
                               "integer dtype, got " +
                               std::string(to_string(dtype)));
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> ProcessGroup::init(const std::string& init_method, ProcessGroupOptions options, int rank,
                                                 int world_size) {
  // One resolution serves both: env:// takes the worker environment from the group's Config.
  Config config = Config::resolve(options);
  auto rv = init::rendezvous(init_method, rank, world_size, options.timeout, config.worker);
  auto pg = create(rv.store, rv.prefix, rv.rank, rv.world_size, std::move(options), std::move(config));
  pg->keepalive_ = rv.keepalive;
  return pg;
}

std::shared_ptr<ProcessGroup> ProcessGroup::from_store(std::shared_ptr<store::Store> store, const std::string& prefix,
                                                       int rank, int size, ProcessGroupOptions options) {
  Config config = Config::resolve(options);
  return create(std::move(store), prefix, rank, size, std::move(options), std::move(config));
}

std::shared_ptr<ProcessGroup> ProcessGroup::create(std::shared_ptr<store::Store> store, const std::string& prefix,
                                                   int rank, int size, ProcessGroupOptions options, Config config) {
  if (!store) throw InvalidArgumentError("ProcessGroup::from_store: store is null");
  if (size < 1) throw InvalidArgumentError("ProcessGroup: size must be >= 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    throw InvalidArgumentError("ProcessGroup: rank " + std::to_string(rank) + " is out of range for size " +
                               std::to_string(size));
  }
  std::vector<int> ranks(static_cast<std::size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(store), prefix, rank, std::move(ranks),
                                                        std::move(options), std::move(config), nullptr));
}

ProcessGroup::ProcessGroup(std::shared_ptr<store::Store> store, std::string prefix, int rank,
                           std::vector<int> global_ranks, ProcessGroupOptions options, Config config, Backend* parent)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      rank_(rank),
      global_ranks_(std::move(global_ranks)),
      options_(std::move(options)) {
  options_.backend = config.backend;
  if (rank_ < 0) return;
  BackendContext ctx;
  ctx.config = std::move(config);
  ctx.store = std::make_shared<store::PrefixStore>(prefix_, store_);
  ctx.rank = rank_;
  ctx.size = size();
  ctx.global_ranks = global_ranks_;
  ctx.options = options_;
  ctx.parent = parent;
  backend_ = create_backend(options_.backend, std::move(ctx));
}

ProcessGroup::~ProcessGroup() { shutdown(); }

void ProcessGroup::shutdown() { backend_.reset(); }

int ProcessGroup::global_rank(int group_rank) const {
  if (group_rank < 0 || group_rank >= size()) {
    throw InvalidArgumentError("rank " + std::to_string(group_rank) + " is out of range for a group of size " +
                               std::to_string(size()));
  }
  return global_ranks_[static_cast<std::size_t>(group_rank)];
}

int ProcessGroup::group_rank(int global) const {
  auto it = std::find(global_ranks_.begin(), global_ranks_.end(), global);
  return it == global_ranks_.end() ? -1 : static_cast<int>(it - global_ranks_.begin());
}

void ProcessGroup::require_member() const {
  if (rank_ < 0) {
    throw NotMemberError(
        "this rank is not a member of the group (its global ranks are given to new_group); "
        "only members may call its ops");
  }
  if (!backend_) throw CommError("the process group was shut down");
}

Backend& ProcessGroup::backend() {
  require_member();
  return *backend_;
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(std::vector<int> ranks) {
  return new_group(std::move(ranks), options_);
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(std::vector<int> ranks, ProcessGroupOptions options) {
  // Ranks are relative to this group's members' global ranks; every member calls new_group in the same order,
  // so the sequence number names the same subgroup everywhere.
  const int id = next_group_id_++;
  if (ranks.empty()) throw InvalidArgumentError("new_group: the rank list is empty");
  std::set<int> seen;
  // The sub-group's store prefix: sequence number + a hash of the member list (not the list itself, which
  // would make every key of a 1000-rank sub-group kilobytes long).
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (int r : ranks) {
    if (group_rank(r) < 0) {
      throw InvalidArgumentError("new_group: rank " + std::to_string(r) + " is not in the parent group (size " +
                                 std::to_string(size()) + ")");
    }
    if (!seen.insert(r).second) throw InvalidArgumentError("new_group: rank " + std::to_string(r) + " is listed twice");
    hash = (hash ^ static_cast<std::uint64_t>(r)) * 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  const std::string key = prefix_ + "/g" + std::to_string(id) + "-" + std::to_string(ranks.size()) + "-" + hex;
  const int my_global = rank_ >= 0 ? global_ranks_[static_cast<std::size_t>(rank_)] : -1;
  auto it = std::find(ranks.begin(), ranks.end(), my_global);
  const int sub_rank = it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
  auto group = std::shared_ptr<ProcessGroup>(
      new ProcessGroup(store_, key, sub_rank, std::move(ranks), options, Config::resolve(options), backend_.get()));
  group->keepalive_ = keepalive_;
  return group;
}

// ---- point to point ----

void ProcessGroup::send(Buffer buffer, int dst, int tag) { isend(buffer, dst, tag)->wait(); }
int ProcessGroup::recv(Buffer buffer, int src, int tag) {
  auto work = irecv(buffer, src, tag);
  work->wait();
  return work->source_rank();
}
WorkPtr ProcessGroup::isend(Buffer buffer, int dst, int tag) {
  return batch_isend_irecv({P2POp::send(buffer, dst, tag)});
}
WorkPtr ProcessGroup::irecv(Buffer buffer, int src, int tag) {
  if (src != kAnySource) return batch_isend_irecv({P2POp::recv(buffer, src, tag)});
  require_member();
  check_buffer(*backend_, buffer, "recv");
  check_tag(tag, "recv");
  if (!backend_->supports_any_source()) {
    throw UnsupportedError("recv from any source is not supported by backend " + std::string(backend_->name()) +
                           "; pass the source rank");
  }
  if (size() == 1) {
    throw InvalidArgumentError("recv from any source: the group has no other rank (size 1) to receive from");
  }
  return backend_->recv(buffer, kAnySource, tag);
}

namespace {
// A send to this rank can only complete against a receive from it posted in the same batch: the k-th send to self
// pairs with the k-th receive from self, of the same size, and only on backends that run such pairs.
void check_self_pairs(const Backend& backend, const std::vector<P2POp>& ops, int rank) {
  std::vector<std::size_t> sends;
  std::vector<std::size_t> recvs;
  for (const auto& op : ops) {
    if (op.peer == rank) (op.kind == P2POp::Kind::kSend ? sends : recvs).push_back(op.buffer.bytes());
  }
  if (sends.empty() && recvs.empty()) return;
  const std::string self = "batch_isend_irecv: rank " + std::to_string(rank) + " sends to or receives from itself; ";
  if (!backend.supports_self_p2p()) {
    throw InvalidArgumentError(self +
                               "send/recv to self is supported on backend nccl only (in one batch, each send "
                               "to self paired with a receive from self); copy the buffer locally instead");
  }
  if (sends != recvs) {
    throw InvalidArgumentError(self +
                               "every send to self needs a receive from self of the same size in the same "
                               "batch (" +
                               std::to_string(sends.size()) + " sends, " + std::to_string(recvs.size()) +
                               " receives, paired in order)");
  }
}
}  // namespace

WorkPtr ProcessGroup::batch_isend_irecv(std::vector<P2POp> ops) {
  require_member();
  for (const auto& op : ops) {
    const char* what = op.kind == P2POp::Kind::kSend ? "send" : "recv";
    check_buffer(*backend_, op.buffer, what);
    if (op.peer == kAnySource && op.kind == P2POp::Kind::kRecv) {
      throw InvalidArgumentError(
          "batch_isend_irecv: a recv from any source cannot be batched (torch's P2POp names its peer too); post it "
          "with irecv(buffer, kAnySource, tag)");
    }
    if (op.peer < 0 || op.peer >= size()) {
      throw InvalidArgumentError(std::string(what) + ": peer rank " + std::to_string(op.peer) +
                                 " is out of range for a group of size " + std::to_string(size()));
    }
    check_tag(op.tag, what);
  }
  check_self_pairs(*backend_, ops, rank_);
  return backend_->batch_p2p(std::move(ops));
}

// ---- collectives ----

namespace {
void check_root(int root, int size, const char* what) {
  if (root < 0 || root >= size) {
    throw InvalidArgumentError(std::string(what) + ": root rank " + std::to_string(root) +
                               " is out of range for a group of size " + std::to_string(size));
  }
}
}  // namespace

void ProcessGroup::broadcast(Buffer buffer, int root) { broadcast_async(buffer, root)->wait(); }
WorkPtr ProcessGroup::broadcast_async(Buffer buffer, int root) {
  require_member();
  check_buffer(*backend_, buffer, "broadcast");
  check_root(root, size(), "broadcast");
  return backend_->broadcast(buffer, root);
}

void ProcessGroup::all_reduce(Buffer buffer, ReduceOp op) { all_reduce_async(buffer, op)->wait(); }
WorkPtr ProcessGroup::all_reduce_async(Buffer buffer, ReduceOp op) {
  require_member();
  check_buffer(*backend_, buffer, "all_reduce");
  check_op(op, buffer.dtype(), "all_reduce");
  return backend_->all_reduce(buffer, op);
}

void ProcessGroup::reduce(Buffer buffer, int root, ReduceOp op) { reduce_async(buffer, root, op)->wait(); }
WorkPtr ProcessGroup::reduce_async(Buffer buffer, int root, ReduceOp op) {
  require_member();
  check_buffer(*backend_, buffer, "reduce");
  check_root(root, size(), "reduce");
  check_op(op, buffer.dtype(), "reduce");
  return backend_->reduce(buffer, root, op);
}

void ProcessGroup::all_gather(std::vector<Buffer> outputs, Buffer input) {
  all_gather_async(std::move(outputs), input)->wait();
}
WorkPtr ProcessGroup::all_gather_async(std::vector<Buffer> outputs, Buffer input) {
  require_member();
  check_buffer(*backend_, input, "all_gather");
  if (outputs.size() != static_cast<std::size_t>(size())) {
    throw InvalidArgumentError("all_gather: " + std::to_string(outputs.size()) + " output buffers for a group of " +
                               std::to_string(size()));
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    check_buffer(*backend_, outputs[i], "all_gather");
    check_same(input, outputs[i], "all_gather", i);
  }
  return backend_->all_gather(std::move(outputs), input);
}

void ProcessGroup::all_gather_into(Buffer output, Buffer input) { all_gather_into_async(output, input)->wait(); }
WorkPtr ProcessGroup::all_gather_into_async(Buffer output, Buffer input) {
  require_member();
  if (output.count() != input.count() * static_cast<std::size_t>(size())) {
    throw InvalidArgumentError(
        "all_gather_into: output has " + std::to_string(output.count()) +
        " elements, expected size() * input = " + std::to_string(input.count() * static_cast<std::size_t>(size())));
  }
  check_same(input, output, "all_gather_into", 0, false);
  return all_gather_async(output.split(static_cast<std::size_t>(size())), input);
}

void ProcessGroup::gather(std::vector<Buffer> outputs, Buffer input, int root) {
  gather_async(std::move(outputs), input, root)->wait();
}
WorkPtr ProcessGroup::gather_async(std::vector<Buffer> outputs, Buffer input, int root) {
  require_member();
  check_buffer(*backend_, input, "gather");
  check_root(root, size(), "gather");
  if (rank_ == root) {
    if (outputs.size() != static_cast<std::size_t>(size())) {
      throw InvalidArgumentError("gather: the root needs " + std::to_string(size()) + " output buffers, got " +
                                 std::to_string(outputs.size()));
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      check_buffer(*backend_, outputs[i], "gather");
      check_same(input, outputs[i], "gather", i);
    }
  } else {
    outputs.clear();
  }
  return backend_->gather(std::move(outputs), input, root);
}

void ProcessGroup::scatter(Buffer output, std::vector<Buffer> inputs, int root) {
  scatter_async(output, std::move(inputs), root)->wait();
}
WorkPtr ProcessGroup::scatter_async(Buffer output, std::vector<Buffer> inputs, int root) {
  require_member();
  check_buffer(*backend_, output, "scatter");
  check_root(root, size(), "scatter");
  if (rank_ == root) {
    if (inputs.size() != static_cast<std::size_t>(size())) {
      throw InvalidArgumentError("scatter: the root needs " + std::to_string(size()) + " input buffers, got " +
                                 std::to_string(inputs.size()));
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      check_buffer(*backend_, inputs[i], "scatter");
      check_same(output, inputs[i], "scatter", i);
    }
  } else {
    inputs.clear();
  }
  return backend_->scatter(output, std::move(inputs), root);
}

void ProcessGroup::reduce_scatter(Buffer output, std::vector<Buffer> inputs, ReduceOp op) {
  reduce_scatter_async(output, std::move(inputs), op)->wait();
}
WorkPtr ProcessGroup::reduce_scatter_async(Buffer output, std::vector<Buffer> inputs, ReduceOp op) {
  require_member();
  check_buffer(*backend_, output, "reduce_scatter");
  check_op(op, output.dtype(), "reduce_scatter");
  if (inputs.size() != static_cast<std::size_t>(size())) {
    throw InvalidArgumentError("reduce_scatter: " + std::to_string(inputs.size()) + " input buffers for a group of " +
                               std::to_string(size()));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_buffer(*backend_, inputs[i], "reduce_scatter");
    check_same(output, inputs[i], "reduce_scatter", i);
  }
  return backend_->reduce_scatter(output, std::move(inputs), op);
}

void ProcessGroup::reduce_scatter_from(Buffer output, Buffer input, ReduceOp op) {
  reduce_scatter_from_async(output, input, op)->wait();
}
WorkPtr ProcessGroup::reduce_scatter_from_async(Buffer output, Buffer input, ReduceOp op) {
  require_member();
  if (input.count() != output.count() * static_cast<std::size_t>(size())) {
    throw InvalidArgumentError(
        "reduce_scatter_from: input has " + std::to_string(input.count()) +
        " elements, expected size() * output = " + std::to_string(output.count() * static_cast<std::size_t>(size())));
  }
  check_same(output, input, "reduce_scatter_from", 0, false);
  return reduce_scatter_async(output, input.split(static_cast<std::size_t>(size())), op);
}

void ProcessGroup::all_to_all(std::vector<Buffer> outputs, std::vector<Buffer> inputs) {
  all_to_all_async(std::move(outputs), std::move(inputs))->wait();
}
WorkPtr ProcessGroup::all_to_all_async(std::vector<Buffer> outputs, std::vector<Buffer> inputs) {
  require_member();
  const auto n = static_cast<std::size_t>(size());
  if (outputs.size() != n || inputs.size() != n) {
    throw InvalidArgumentError("all_to_all: needs " + std::to_string(n) + " input and output buffers, got " +
                               std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  }
  for (std::size_t i = 0; i < n; ++i) {
    check_buffer(*backend_, inputs[i], "all_to_all");
    check_buffer(*backend_, outputs[i], "all_to_all");
    check_same(inputs[0], inputs[i], "all_to_all", i, false);
    check_same(inputs[0], outputs[i], "all_to_all", i, false);
  }
  if (inputs[static_cast<std::size_t>(rank_)].count() != outputs[static_cast<std::size_t>(rank_)].count()) {
    throw InvalidArgumentError("all_to_all: this rank's own input and output blocks differ in size");
  }
  return backend_->all_to_all(std::move(outputs), std::move(inputs));
}

void ProcessGroup::all_to_all_single(Buffer output, Buffer input, std::vector<std::size_t> output_splits,
                                     std::vector<std::size_t> input_splits) {
  all_to_all_single_async(output, input, std::move(output_splits), std::move(input_splits))->wait();
}
WorkPtr ProcessGroup::all_to_all_single_async(Buffer output, Buffer input, std::vector<std::size_t> output_splits,
                                              std::vector<std::size_t> input_splits) {
  require_member();
  const auto n = static_cast<std::size_t>(size());
  const auto cut = [n](Buffer b, std::vector<std::size_t> splits, const char* which) {
    if (splits.empty()) {
      if (b.count() % n != 0) {
        throw InvalidArgumentError(std::string("all_to_all_single: ") + which + " has " + std::to_string(b.count()) +
                                   " elements, not divisible by the group size; pass splits");
      }
      return b.split(n);
    }
    if (splits.size() != n) {
      throw InvalidArgumentError(std::string("all_to_all_single: ") + which + " splits need " + std::to_string(n) +
                                 " entries, got " + std::to_string(splits.size()));
    }
    const std::size_t total = std::accumulate(splits.begin(), splits.end(), std::size_t{0});
    if (total != b.count()) {
      throw InvalidArgumentError(std::string("all_to_all_single: ") + which + " splits sum to " +
                                 std::to_string(total) + " but the buffer has " + std::to_string(b.count()) +
                                 " elements");
    }
    std::vector<Buffer> parts;
    std::size_t off = 0;
    for (std::size_t s : splits) {
      parts.push_back(b.slice(off, s));
      off += s;
    }
    return parts;
  };
  return all_to_all_async(cut(output, std::move(output_splits), "output"),
                          cut(input, std::move(input_splits), "input"));
}

void ProcessGroup::barrier() { barrier_async()->wait(); }
WorkPtr ProcessGroup::barrier_async() {
  require_member();
  return backend_->barrier();
}

}  // namespace ctrun::comm
