#pragma once
// ProcessGroupCtrun: torch's process group (c10d::ProcessGroup on torch 1.x, c10d::Backend on 2.x) over one
// comm::ProcessGroup. The ops are defined in collectives.hpp and p2p.hpp; here the group's life and what every
// op shares: checking tensors, making the Work, issuing the comm op.
// A part of ctrun_torch.cpp's one translation unit (see there), not a header to include elsewhere.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/torch/python_runtime.hpp"
#include "comm/torch/store_adapter.hpp"
#include "comm/torch/tensors.hpp"
#include "comm/torch/torch_types.hpp"
#include "comm/torch/work.hpp"

namespace ctrun::comm::torch_backend {
namespace {

class ProcessGroupCtrun final : public BaseGroup {
 public:
  ProcessGroupCtrun(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout)
      : BaseGroup(rank, size), timeout_(timeout) {
    ProcessGroupOptions options;
    options.timeout = timeout;
    group_ = CommGroup::from_store(std::make_shared<StoreAdapter>(store), "ctrun", rank, size, options);
    Completers::instance().add(completer_);
    completer_thread_ = std::thread([c = completer_] { c->loop(); });
  }

  ~ProcessGroupCtrun() override {
    // Let queued ops finish on their own (the group timeout bounds each), then release the transports. The last
    // reference can go in a future's callback on the completion thread itself: it cannot join itself, and
    // finishes on its own (its state is shared). Known weakness: an irecv nobody answers holds destroy up to the
    // group timeout (failing pending ops first made test_gather_checks hang once; not understood yet).
    completer_->stop();
    if (completer_thread_.get_id() == std::this_thread::get_id() || python_finalizing()) {
      // During interpreter shutdown the completion thread must not be waited for: it may need the GIL, which
      // no thread gets any more. The process is ending; the thread's state is shared, so it may outlive us.
      completer_thread_.detach();
      group_->shutdown();
    } else if (PyGILState_Check()) {
      // The last reference usually goes in Python (destroy_process_group, or a group going out of scope) with
      // the GIL held, while the completion thread may need it: for a Python callback on a future, or to free a
      // tensor whose Python object only the op still keeps. Waiting with the GIL held would deadlock.
      pybind11::gil_scoped_release no_gil;
      completer_thread_.join();
      group_->shutdown();
    } else {
      completer_thread_.join();
      group_->shutdown();
    }
  }

  const std::string getBackendName() const override { return "ctrun"; }

  c10::intrusive_ptr<c10d::Work> broadcast(TensorList& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(TensorList& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(TensorList& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<TensorList>& outputs, TensorList& inputs,
                                           const c10d::AllgatherOptions&) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<TensorList>& outputs, TensorList& inputs,
                                                     const c10d::AllgatherOptions&) override;
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> gather(std::vector<TensorList>& outputs, TensorList& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(TensorList& outputs, std::vector<TensorList>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(TensorList& outputs, std::vector<TensorList>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions&) override;
  c10::intrusive_ptr<c10d::Work> alltoall(TensorList& outputs, TensorList& inputs,
                                          const c10d::AllToAllOptions&) override;
  c10::intrusive_ptr<c10d::Work> send(TensorList& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(TensorList& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(TensorList& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }

 private:
  // allreduce of a sparse COO tensor (sparse.hpp).
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts);
  const at::Tensor& single(const TensorList& tensors, const char* op) {
    TORCH_CHECK(tensors.size() == 1, "ctrun backend: ", op, " takes exactly one CPU tensor, got ", tensors.size());
    check_tensor(tensors[0], op);
    return tensors[0];
  }
  static void check_like(const at::Tensor& t, const at::Tensor& ref, const char* op) {
    check_tensor(t, op);
    TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "ctrun backend: ", op, ": tensors have dtypes ", t.scalar_type(),
                " and ", ref.scalar_type());
    TORCH_CHECK(t.numel() == ref.numel(), "ctrun backend: ", op, ": tensors have ", t.numel(), " and ", ref.numel(),
                " elements");
  }
  // The *_tensor_coalesced ops: pairs of CPU tensors of one dtype (gloo's rule too); the whole tensor of a pair
  // (the output of an all-gather, the input of a reduce-scatter) has world-size times the other one's elements.
  void check_coalesced(const TensorList& outputs, const TensorList& inputs, bool outputs_whole, const char* op) const {
    TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "ctrun backend: ", op, ": got ", inputs.size(),
                " inputs and ", outputs.size(), " outputs (need the same number, at least one)");
    const TensorList& whole = outputs_whole ? outputs : inputs;
    const TensorList& part = outputs_whole ? inputs : outputs;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      check_tensor(outputs[i], op);
      check_tensor(inputs[i], op);
      TORCH_CHECK(
          outputs[i].scalar_type() == inputs[0].scalar_type() && inputs[i].scalar_type() == inputs[0].scalar_type(),
          "ctrun backend: ", op, ": tensors must all have the same dtype (", inputs[0].scalar_type(),
          "); coalesce tensors of other dtypes in a separate call");
      TORCH_CHECK(whole[i].numel() == part[i].numel() * getSize(), "ctrun backend: ", op, ": tensor pair ", i, " has ",
                  whole[i].numel(), " and ", part[i].numel(), " elements, expected world size (", getSize(), ") x ",
                  part[i].numel());
    }
  }

  c10::intrusive_ptr<CtrunWork> work(OpType type, TensorList outputs) {
    return c10::make_intrusive<CtrunWork>(getRank(), type, std::move(outputs), timeout_);
  }

  // Issues the comm op and hands the Work to the completion thread (which completes its future).
  template <class Issue>
  c10::intrusive_ptr<c10d::Work> run(const c10::intrusive_ptr<CtrunWork>& w, Issue&& issue) {
    try {
      w->start(issue());
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& e) {
      TORCH_CHECK(false, e.what());  // argument errors from comm, as torch's RuntimeError
    }
    ++sequence_;
    completer_->push(w);
    return w;
  }

  std::chrono::milliseconds timeout_;
  std::shared_ptr<CommGroup> group_;
  std::atomic<uint64_t> sequence_{0};
  std::shared_ptr<Completer> completer_ = std::make_shared<Completer>();
  std::thread completer_thread_;
};

}  // namespace
}  // namespace ctrun::comm::torch_backend
