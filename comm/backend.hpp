#pragma once
// The abstract backend every ProcessGroup delegates to: "cpu" (comm/cpu/, TCP + shared memory) and "nccl"
// (comm/nccl/, CUDA builds). ProcessGroup validates arguments (counts, dtypes, ranks, devices, membership) before
// calling a backend, so a backend only checks what is specific to it (e.g. nccl rejects CPU buffers).
//
// Contract for implementations:
// - Every op returns at once with a Work; ops of one group run in the order they were issued, and every rank
//   must issue the group's collectives in the same order (as torch.distributed).
// - Ranks are group ranks (0 .. size-1). Send/recv with the same (peer, tag) match in FIFO order.
// - An op that cannot finish within context().options.timeout fails its Work with TimeoutError; a peer that
//   goes away fails it with PeerError. After such an error the backend may refuse every later op.
// - The Buffers stay valid until the Work completes (the caller's promise); outputs may alias inputs only
//   where the op is in place (broadcast, all_reduce, reduce).

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/buffer.hpp"
#include "comm/config.hpp"
#include "comm/options.hpp"
#include "comm/types.hpp"
#include "comm/work.hpp"
#include "store/store.hpp"

namespace ctrun::comm {

class Backend;

// What a backend is created from. The store is already scoped to this group (a PrefixStore unique to the group
// and attempt), so a backend may use any key names inside it; keys of different groups never collide.
struct BackendContext {
  std::shared_ptr<store::Store> store;
  int rank = 0;
  int size = 1;
  std::vector<int> global_ranks;  // group rank -> rank in the group new_group was first called on (the world)
  ProcessGroupOptions options;
  // Every CTRUN_COMM_* setting, resolved once for this group from options and the environment (comm/config.hpp).
  Config config;
  // The backend of the parent group when created by new_group (nccl may ncclCommSplit it); null for the world.
  Backend* parent = nullptr;
};

class Backend {
 public:
  explicit Backend(BackendContext context) : context_(std::move(context)) {}
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string_view name() const = 0;
  // Whether buffers on this device can be passed to this backend's ops.
  virtual bool supports(Device device) const = 0;

  int rank() const { return context_.rank; }
  int size() const { return context_.size; }
  const BackendContext& context() const { return context_; }

  virtual WorkPtr send(Buffer buffer, int dst, int tag) = 0;
  // src may be kAnySource where supports_any_source(); the Work's source_rank() then names the sender.
  virtual WorkPtr recv(Buffer buffer, int src, int tag) = 0;
  virtual bool supports_any_source() const { return false; }
  // All sends and receives are posted together, so any pattern (e.g. a ring exchange) completes without deadlock.
  virtual WorkPtr batch_p2p(std::vector<P2POp> ops) = 0;
  // Whether batch_p2p takes a send to this rank paired with a receive from it in the same batch (NCCL runs such a
  // pair inside its group call, as torch's NCCL backend does); ProcessGroup checks the pairing.
  virtual bool supports_self_p2p() const { return false; }

  virtual WorkPtr broadcast(Buffer buffer, int root) = 0;
  virtual WorkPtr all_reduce(Buffer buffer, ReduceOp op) = 0;
  // In place; only the root's buffer holds the result afterwards (other ranks' buffers may be clobbered).
  virtual WorkPtr reduce(Buffer buffer, int root, ReduceOp op) = 0;
  // outputs[i] receives rank i's input; all have the input's count and dtype.
  virtual WorkPtr all_gather(std::vector<Buffer> outputs, Buffer input) = 0;
  // outputs is used on the root only (size() buffers there, empty elsewhere).
  virtual WorkPtr gather(std::vector<Buffer> outputs, Buffer input, int root) = 0;
  // inputs is used on the root only (size() buffers there, empty elsewhere).
  virtual WorkPtr scatter(Buffer output, std::vector<Buffer> inputs, int root) = 0;
  // output = op over ranks r of r's inputs[rank()]; every inputs[i] has the output's count.
  virtual WorkPtr reduce_scatter(Buffer output, std::vector<Buffer> inputs, ReduceOp op) = 0;
  // outputs[i] receives rank i's inputs[rank()]; counts may differ per pair (uneven all_to_all) but must agree
  // between the sender's inputs[j] and the receiver's outputs[i].
  virtual WorkPtr all_to_all(std::vector<Buffer> outputs, std::vector<Buffer> inputs) = 0;
  virtual WorkPtr barrier() = 0;

  // Fails every pending and future op with CommError(reason) and releases transports (idempotent).
  virtual void abort(const std::string& reason) = 0;

 protected:
  BackendContext context_;
};

using BackendFactory = std::function<std::unique_ptr<Backend>(BackendContext)>;

// Backends by name. "cpu" is always registered; "nccl" when the program links ctrun_comm_nccl (CUDA builds; see
// comm/backend_registry.cpp). register_backend lets applications add their own (replacing one of the same name);
// backend_factory returns the one registered under `name` (empty if none), e.g. to wrap it.
void register_backend(const std::string& name, BackendFactory factory);
BackendFactory backend_factory(const std::string& name);
bool has_backend(const std::string& name);
// Throws UnsupportedError naming the registered backends when `name` is unknown.
std::unique_ptr<Backend> create_backend(const std::string& name, BackendContext context);

}  // namespace ctrun::comm
