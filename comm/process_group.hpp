#pragma once
// ProcessGroup: the user-facing handle of ctrun::comm (torch.distributed's process group in C++).
//
//   auto pg = ctrun::comm::ProcessGroup::init("env://");       // under ctrun / torchrun
//   std::vector<float> grad(n);
//   pg->all_reduce(grad, ReduceOp::kAvg);
//   auto work = pg->all_reduce_async(grad);  ...  work->wait();
//
// Ranks passed to ops are ranks in THIS group (0 .. size()-1); global_rank()/group_rank() translate.
// Every op validates its arguments on the calling rank first (InvalidArgumentError: sizes, dtypes, ranks out of
// range, bitwise ops on floats; NotMemberError on a group this rank is not in), then runs on the backend; a peer
// that dies or stalls fails the op with PeerError/TimeoutError within the group timeout.

#include <memory>
#include <string>
#include <vector>

#include "comm/backend.hpp"
#include "comm/buffer.hpp"
#include "comm/options.hpp"
#include "comm/tags.hpp"
#include "comm/types.hpp"
#include "comm/work.hpp"
#include "store/store.hpp"

namespace ctrun::comm {

class ProcessGroup {
 public:
  // init_method:
  //   "env://"                RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment. With
  //                           TORCHELASTIC_USE_AGENT_STORE=True the agent's store is used (keys scoped by
  //                           TORCHELASTIC_RESTART_COUNT, as torch); otherwise rank 0 hosts a store on MASTER_PORT.
  //   "tcp://host:port"       rank 0 hosts a store on host:port (unless one is already there); rank and world_size
  //                           from the arguments or ?rank=&world_size= in the URL.
  //   "file:///path/to/file"  a store in a shared file (same host or shared filesystem); rank/world_size likewise.
  // rank/world_size -1: taken from the environment / URL. Throws InvalidArgumentError for a malformed method.
  static std::shared_ptr<ProcessGroup> init(const std::string& init_method = "env://", ProcessGroupOptions options = {},
                                            int rank = -1, int world_size = -1);

  // A group over any store: all `size` participants call this with the same prefix (e.g. two separately
  // launched jobs sharing one ctstore form a cross-job group). Keys live under prefix/.
  static std::shared_ptr<ProcessGroup> from_store(std::shared_ptr<store::Store> store, const std::string& prefix,
                                                  int rank, int size, ProcessGroupOptions options = {});

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // This rank in the group; -1 on a group (from new_group) this rank is not a member of.
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }
  bool is_member() const { return rank_ >= 0; }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int global_rank(int group_rank) const;  // InvalidArgumentError if out of range
  int group_rank(int global_rank) const;  // -1 if not in this group
  const ProcessGroupOptions& options() const { return options_; }
  Backend& backend();  // NotMemberError on a non-member group

  // Collective over THIS group: every member must call it with the same ranks (global ranks of the world,
  // i.e. of the group init()/from_store() made) in the same order. Non-members get a group whose ops throw
  // NotMemberError. Options default to this group's.
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks);
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks, ProcessGroupOptions options);

  // Point to point. Sends and receives with the same (peer, tag) match in order. Tags: 0 .. kMaxUserTag
  // (comm/tags.hpp); the ones above are comm's own, and refused with InvalidArgumentError.
  // src = kAnySource (torch's recv without src): the first message with this tag from any rank; recv returns the
  // sender (irecv: Work::source_rank() once completed). Messages of one sender still arrive in order, and
  // receives are matched in the order they were posted. A rank whose connection breaks (exit, crash, abort)
  // while such a receive is pending fails it, naming that rank, since it may have been the sender. Backends
  // without it (nccl) throw UnsupportedError.
  void send(Buffer buffer, int dst, int tag = 0);
  int recv(Buffer buffer, int src = kAnySource, int tag = 0);
  WorkPtr isend(Buffer buffer, int dst, int tag = 0);
  WorkPtr irecv(Buffer buffer, int src = kAnySource, int tag = 0);
  // torch's batch_isend_irecv: one Work for the whole batch (every op names its peer).
  WorkPtr batch_isend_irecv(std::vector<P2POp> ops);

  void broadcast(Buffer buffer, int root);
  WorkPtr broadcast_async(Buffer buffer, int root);

  void all_reduce(Buffer buffer, ReduceOp op = ReduceOp::kSum);
  WorkPtr all_reduce_async(Buffer buffer, ReduceOp op = ReduceOp::kSum);

  // Only the root's buffer holds the result; other ranks' buffers are scratch (torch leaves them unspecified too).
  void reduce(Buffer buffer, int root, ReduceOp op = ReduceOp::kSum);
  WorkPtr reduce_async(Buffer buffer, int root, ReduceOp op = ReduceOp::kSum);

  // List form: outputs.size() == size(), each with the input's count and dtype.
  void all_gather(std::vector<Buffer> outputs, Buffer input);
  WorkPtr all_gather_async(std::vector<Buffer> outputs, Buffer input);
  // Single-buffer form (all_gather_into_tensor): output.count() == size() * input.count(), rank-major.
  void all_gather_into(Buffer output, Buffer input);
  WorkPtr all_gather_into_async(Buffer output, Buffer input);

  // outputs: size() buffers on the root, ignored (may be empty) elsewhere.
  void gather(std::vector<Buffer> outputs, Buffer input, int root);
  WorkPtr gather_async(std::vector<Buffer> outputs, Buffer input, int root);

  // inputs: size() buffers on the root, ignored (may be empty) elsewhere.
  void scatter(Buffer output, std::vector<Buffer> inputs, int root);
  WorkPtr scatter_async(Buffer output, std::vector<Buffer> inputs, int root);

  // List form: inputs.size() == size(), each with the output's count.
  void reduce_scatter(Buffer output, std::vector<Buffer> inputs, ReduceOp op = ReduceOp::kSum);
  WorkPtr reduce_scatter_async(Buffer output, std::vector<Buffer> inputs, ReduceOp op = ReduceOp::kSum);
  // Single-buffer form (reduce_scatter_tensor): input.count() == size() * output.count().
  void reduce_scatter_from(Buffer output, Buffer input, ReduceOp op = ReduceOp::kSum);
  WorkPtr reduce_scatter_from_async(Buffer output, Buffer input, ReduceOp op = ReduceOp::kSum);

  // List form: outputs[i] <- rank i's inputs[rank()]; per-pair counts may differ (uneven) but must agree.
  void all_to_all(std::vector<Buffer> outputs, std::vector<Buffer> inputs);
  WorkPtr all_to_all_async(std::vector<Buffer> outputs, std::vector<Buffer> inputs);
  // Single-buffer form (all_to_all_single): splits in elements; empty splits = equal parts.
  void all_to_all_single(Buffer output, Buffer input, std::vector<std::size_t> output_splits = {},
                         std::vector<std::size_t> input_splits = {});
  WorkPtr all_to_all_single_async(Buffer output, Buffer input, std::vector<std::size_t> output_splits = {},
                                  std::vector<std::size_t> input_splits = {});

  void barrier();
  WorkPtr barrier_async();
  // gloo's monitored barrier: rank 0 waits up to `timeout` (zero: the group's) for every other rank, then releases
  // them; it throws TimeoutError naming the first rank that did not arrive (wait_all_ranks: every such rank).
  // Runs over point-to-point messages with tags reserved for it (comm/tags.hpp).
  void monitored_barrier(Duration timeout = Duration::zero(), bool wait_all_ranks = false);

  // Fails pending ops and releases the backend; later ops throw CommError. Called by the destructor.
  void shutdown();

 private:
  struct Private;
  // init() and from_store(); config: options resolved (Config::resolve), by the caller that needed it first.
  static std::shared_ptr<ProcessGroup> create(std::shared_ptr<store::Store> store, const std::string& prefix, int rank,
                                              int size, ProcessGroupOptions options, Config config);
  ProcessGroup(std::shared_ptr<store::Store> store, std::string prefix, int rank, std::vector<int> global_ranks,
               ProcessGroupOptions options, Config config, Backend* parent);
  void require_member() const;

  std::shared_ptr<store::Store> store_;  // the unscoped store the group's prefix lives in
  std::string prefix_;
  int rank_ = -1;
  std::vector<int> global_ranks_;
  ProcessGroupOptions options_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<void> keepalive_;  // e.g. the store server rank 0 hosts for env:// / tcp://
  int next_group_id_ = 0;
};

}  // namespace ctrun::comm
