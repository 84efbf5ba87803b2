#pragma once
// The nccl Backend. Every op: check buffers are on the group's device, order the group's stream after the
// caller's current stream (event record + wait), enqueue the NCCL calls, record a completion event, hand the
// Work to the watchdog. Ops of one group run in issue order on one stream, as NCCL requires.

#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "comm/algorithms/table.hpp"
#include "comm/backend.hpp"
#include "comm/nccl/communicator.hpp"
#include "comm/nccl/nccl_work.hpp"
#include "comm/nccl/watchdog.hpp"

namespace ctrun::comm::nccl {

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(BackendContext context);
  ~NcclBackend() override;

  std::string_view name() const override { return "nccl"; }
  bool supports(Device device) const override { return device.is_cuda(); }
  bool supports_self_p2p() const override { return true; }

  WorkPtr send(Buffer buffer, int dst, int tag) override;
  WorkPtr recv(Buffer buffer, int src, int tag) override;
  WorkPtr batch_p2p(std::vector<P2POp> ops) override;
  WorkPtr broadcast(Buffer buffer, int root) override;
  WorkPtr all_reduce(Buffer buffer, ReduceOp op) override;
  WorkPtr reduce(Buffer buffer, int root, ReduceOp op) override;
  WorkPtr all_gather(std::vector<Buffer> outputs, Buffer input) override;
  WorkPtr gather(std::vector<Buffer> outputs, Buffer input, int root) override;
  WorkPtr scatter(Buffer output, std::vector<Buffer> inputs, int root) override;
  WorkPtr reduce_scatter(Buffer output, std::vector<Buffer> inputs, ReduceOp op) override;
  WorkPtr all_to_all(std::vector<Buffer> outputs, std::vector<Buffer> inputs) override;
  WorkPtr barrier() override;
  void abort(const std::string& reason) override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  Communicator& communicator() { return *communicator_; }

 private:
  // Runs `enqueue` (NCCL calls on stream_; returns the last call's result) and returns the op's Work.
  // host_sync: wait() blocks the host (barrier).
  // record: a numbered collective's op, dtype and bytes for the progress record (its seq is given here); none for
  // point-to-point ops.
  WorkPtr launch(const std::string& what, const std::function<ncclResult_t()>& enqueue, bool host_sync = false,
                 std::optional<RecordedOp> record = std::nullopt);
  // The record of a collective of `op` over `buffer`'s dtype and `bytes`.
  static RecordedOp op_record(algorithms::OpKind op, DataType dtype, std::size_t bytes) {
    return {0, static_cast<std::uint32_t>(op), static_cast<std::uint32_t>(dtype), bytes};
  }
  // Throws InvalidArgumentError unless `b` is CUDA memory on this group's device.
  void check_device(const Buffer& b, std::string_view what) const;
  void fail(std::exception_ptr error);  // the watchdog's verdict: abort + fail every pending op
  void connect(NcclBackend* parent);    // device resources + communicator (split or fresh id)
  void release_device_resources();
  ncclComm_t comm() const { return communicator_->get(); }
  void copy_on_stream(void* dst, const void* src, std::size_t bytes);

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t caller_ready_ = nullptr;  // re-recorded per op: a wait captures the event's state at call time
  void* barrier_buffer_ = nullptr;      // one int32 on the device
  std::shared_ptr<EventPool> events_;
  std::unique_ptr<Communicator> communicator_;
  StreamProgress progress_;  // before watchdog_, whose thread writes its run part
  std::unique_ptr<Watchdog> watchdog_;
  std::mutex issue_mutex_;
  std::mutex error_mutex_;
  std::exception_ptr error_;  // set once the group failed or was aborted: later ops fail with it
  std::atomic<bool> failed_{false};
};

// NCCL has one ordered channel per peer; "grouped" runs several calls as one launch (ncclGroupStart/End) so
// exchange patterns cannot deadlock. Returns the first failing call's result, else ncclGroupEnd's.
ncclResult_t run_grouped(const std::function<ncclResult_t()>& calls);

}  // namespace ctrun::comm::nccl
