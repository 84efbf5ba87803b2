#pragma once
// ProcessGroupCtrun's collectives and barriers: each maps torch's tensors and options to one comm op.
// A part of ctrun_torch.cpp's one translation unit (see there), not a header to include elsewhere.

#include <cstdint>
#include <vector>

#include "comm/torch/process_group_ctrun.hpp"

namespace ctrun::comm::torch_backend {
namespace {

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::broadcast(TensorList& tensors, const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast");
  TORCH_CHECK(opts.rootTensor == 0, "ctrun backend: broadcast: rootTensor must be 0");
  auto w = work(OpType::BROADCAST, tensors);
  at::Tensor buf = w->output(t, /*copy_in=*/true);
  return run(w, [&] { return group_->broadcast_async(buffer_of(buf), static_cast<int>(opts.rootRank)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts) {
  if (!tensors.empty() && tensors[0].defined() && tensors[0].layout() == at::kSparse) {
    return sparse_allreduce(tensors, opts);
  }
  const at::Tensor& t = single(tensors, "allreduce");
  const auto op = reduce_op_for(opts.reduceOp, t);
  auto w = work(OpType::ALLREDUCE, tensors);
  at::Tensor buf = w->output(t, true);
  return run(w, [&] { return group_->all_reduce_async(buffer_of(buf), op); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::allreduce_coalesced(TensorList& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "ctrun backend: allreduce_coalesced: no tensors");
  for (const auto& t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "ctrun backend: allreduce_coalesced: tensors must all have the same dtype");
  }
  const auto op = reduce_op_for(opts.reduceOp, tensors[0]);
  auto w = work(OpType::ALLREDUCE_COALESCED, tensors);
  at::Tensor flat = flatten(tensors);
  w->keep(flat);
  TensorList outs = tensors;
  w->then([flat, outs]() mutable { unflatten_into(flat, outs); });
  return run(w, [&] { return group_->all_reduce_async(buffer_of(flat), op); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::reduce(TensorList& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce");
  TORCH_CHECK(opts.rootTensor == 0, "ctrun backend: reduce: rootTensor must be 0");
  const auto op = reduce_op_for(opts.reduceOp, t);
  const int root = static_cast<int>(opts.rootRank);
  auto w = work(OpType::REDUCE, tensors);
  // comm's reduce uses non-root buffers as scratch; torch users expect their input back there.
  at::Tensor buf = root == getRank() ? w->output(t, true) : t.clone(at::MemoryFormat::Contiguous);
  w->keep(buf);
  return run(w, [&] { return group_->reduce_async(buffer_of(buf), root, op); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::allgather(std::vector<TensorList>& outputs, TensorList& inputs,
                                                            const c10d::AllgatherOptions&) {
  const at::Tensor& in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "ctrun backend: allgather takes one output list (one CPU tensor per rank)");
  auto& outs = outputs[0];
  TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "ctrun backend: allgather: output list has ", outs.size(),
              " tensors, the group has ", getSize(), " ranks");
  auto w = work(OpType::ALLGATHER, outs);
  std::vector<Buffer> bufs;
  for (const auto& o : outs) {
    check_tensor(o, "allgather");
    check_like(o, in, "allgather");
    bufs.push_back(buffer_of(w->output(o, false)));
  }
  at::Tensor src = w->input(in);
  return run(w, [&] { return group_->all_gather_async(bufs, buffer_of(src)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
  check_tensor(output, "_allgather_base");
  check_tensor(input, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "ctrun backend: all_gather_into_tensor: dtypes differ");
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "ctrun backend: all_gather_into_tensor: output has ",
              output.numel(), " elements, expected world size x input = ", input.numel() * getSize());
  auto w = work(OpType::_ALLGATHER_BASE, {output});
  at::Tensor out = w->output(output, false);
  at::Tensor in = w->input(input);
  return run(w, [&] { return group_->all_gather_into_async(buffer_of(out), buffer_of(in)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::allgather_coalesced(std::vector<TensorList>& outputs,
                                                                      TensorList& inputs,
                                                                      const c10d::AllgatherOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == getSize(),
              "ctrun backend: allgather_coalesced: need one output list per rank");
  for (const auto& t : inputs) {
    check_tensor(t, "allgather_coalesced");
    TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(),
                "ctrun backend: allgather_coalesced: tensors must all have the same dtype");
  }
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "ctrun backend: allgather_coalesced: output lists must match inputs");
    for (std::size_t i = 0; i < list.size(); ++i) check_like(list[i], inputs[i], "allgather_coalesced");
  }
  TensorList flat_outs;
  for (const auto& list : outputs) flat_outs.insert(flat_outs.end(), list.begin(), list.end());
  auto w = work(OpType::ALLGATHER_COALESCED, flat_outs);
  at::Tensor in = flatten(inputs);
  at::Tensor out = at::empty({in.numel() * getSize()}, in.options());
  w->keep(in);
  w->keep(out);
  auto lists = outputs;
  const auto chunk = in.numel();
  w->then([out, lists, chunk]() mutable {
    for (std::size_t r = 0; r < lists.size(); ++r) {
      unflatten_into(out.narrow(0, static_cast<int64_t>(r) * chunk, chunk), lists[r]);
    }
  });
  return run(w, [&] { return group_->all_gather_into_async(buffer_of(out), buffer_of(in)); });
}

#if TORCH_VERSION_MAJOR >= 2
// torch 2.x's fused all_gather_into_tensor (the coalescing manager's fast path; funcol's all_gather_tensor and
// so DTensor's Shard -> Replicate come here with one pair): outputs[i] = every rank's inputs[i], rank-major. One
// comm all_gather_into over the inputs laid end to end: the result's row r is rank r's inputs in a row.
c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::allgather_into_tensor_coalesced(TensorList& outputs,
                                                                                  TensorList& inputs,
                                                                                  const c10d::AllgatherOptions& opts) {
  check_coalesced(outputs, inputs, /*outputs_whole=*/true, "allgather_into_tensor_coalesced");
  if (inputs.size() == 1) return _allgather_base(outputs[0], inputs[0], opts);
  auto w = work(OpType::COALESCED, outputs);
  at::Tensor in = flatten(inputs);
  at::Tensor out = at::empty({getSize(), in.numel()}, in.options());
  w->keep(in);
  w->keep(out);
  TensorList outs = outputs;
  w->then([out, outs]() mutable {
    int64_t offset = 0;
    for (auto& o : outs) {
      const int64_t n = o.numel() / out.size(0);
      o.copy_(out.narrow(1, offset, n).reshape(o.sizes()));
      offset += n;
    }
  });
  return run(w, [&] { return group_->all_gather_into_async(buffer_of(out), buffer_of(in)); });
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::gather(std::vector<TensorList>& outputs, TensorList& inputs,
                                                         const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<Buffer> bufs;
  TensorList outs;
  if (getRank() == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                "ctrun backend: gather: the root needs one output list of world-size tensors");
    outs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty(), "ctrun backend: gather: only the root passes output tensors");
  }
  auto w = work(OpType::GATHER, outs);
  for (const auto& o : outs) {
    check_like(o, in, "gather");
    bufs.push_back(buffer_of(w->output(o, false)));
  }
  at::Tensor src = w->input(in);
  return run(w, [&] { return group_->gather_async(bufs, buffer_of(src), root); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::scatter(TensorList& outputs, std::vector<TensorList>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  auto w = work(OpType::SCATTER, outputs);
  std::vector<Buffer> bufs;
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                "ctrun backend: scatter: the root needs one input list of world-size tensors");
    for (const auto& i : inputs[0]) {
      check_like(i, out, "scatter");
      bufs.push_back(buffer_of(w->input(i)));
    }
  } else {
    TORCH_CHECK(inputs.empty(), "ctrun backend: scatter: only the root passes input tensors");
  }
  at::Tensor dst = w->output(out, false);
  return run(w, [&] { return group_->scatter_async(buffer_of(dst), bufs, root); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::reduce_scatter(TensorList& outputs, std::vector<TensorList>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "ctrun backend: reduce_scatter: needs one input list of world-size tensors");
  const auto op = reduce_op_for(opts.reduceOp, out);
  auto w = work(OpType::REDUCE_SCATTER, outputs);
  std::vector<Buffer> bufs;
  for (const auto& i : inputs[0]) {
    check_like(i, out, "reduce_scatter");
    bufs.push_back(buffer_of(w->input(i)));
  }
  at::Tensor dst = w->output(out, false);
  return run(w, [&] { return group_->reduce_scatter_async(buffer_of(dst), bufs, op); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  check_tensor(output, "_reduce_scatter_base");
  check_tensor(input, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "ctrun backend: reduce_scatter_tensor: dtypes differ");
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "ctrun backend: reduce_scatter_tensor: input has ",
              input.numel(), " elements, expected world size x output = ", output.numel() * getSize());
  const auto op = reduce_op_for(opts.reduceOp, output);
  auto w = work(OpType::_REDUCE_SCATTER_BASE, {output});
  at::Tensor out = w->output(output, false);
  at::Tensor in = w->input(input);
  return run(w, [&] { return group_->reduce_scatter_from_async(buffer_of(out), buffer_of(in), op); });
}

#if TORCH_VERSION_MAJOR >= 2
// torch 2.x's fused reduce_scatter_tensor (coalescing manager, funcol, DTensor's Partial -> Shard): outputs[i] =
// this rank's block of the reduced inputs[i]. The inputs are interleaved so that block r of the one comm
// reduce_scatter_from input holds block r of every inputs[i], in order; this rank's block then splits into them.
c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::reduce_scatter_tensor_coalesced(
    TensorList& outputs, TensorList& inputs, const c10d::ReduceScatterOptions& opts) {
  check_coalesced(outputs, inputs, /*outputs_whole=*/false, "reduce_scatter_tensor_coalesced");
  if (inputs.size() == 1) return _reduce_scatter_base(outputs[0], inputs[0], opts);
  const auto op = reduce_op_for(opts.reduceOp, outputs[0]);
  auto w = work(OpType::COALESCED, outputs);
  TensorList blocks;
  for (const auto& i : inputs) blocks.push_back(i.reshape({getSize(), -1}));
  at::Tensor in = at::cat(blocks, 1);
  at::Tensor out = at::empty({in.size(1)}, in.options());
  w->keep(in);
  w->keep(out);
  TensorList outs = outputs;
  w->then([out, outs]() mutable { unflatten_into(out, outs); });
  return run(w, [&] { return group_->reduce_scatter_from_async(buffer_of(out), buffer_of(in), op); });
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& output_splits,
                                                                std::vector<int64_t>& input_splits,
                                                                const c10d::AllToAllOptions&) {
  check_tensor(output, "alltoall_base");
  check_tensor(input, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "ctrun backend: all_to_all_single: dtypes differ");
  auto w = work(OpType::ALLTOALL_BASE, {output});
  at::Tensor out = w->output(output, false);
  at::Tensor in = w->input(input);
  // torch's splits count rows (dim 0); comm's count elements.
  auto elements = [](const at::Tensor& t, const std::vector<int64_t>& rows) {
    std::vector<std::size_t> e;
    const int64_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : t.numel() / t.size(0);
    for (auto r : rows) {
      TORCH_CHECK(r >= 0, "ctrun backend: all_to_all_single: negative split size");
      e.push_back(static_cast<std::size_t>(r * row));
    }
    return e;
  };
  auto outs = elements(out, output_splits);
  auto ins = elements(in, input_splits);
  return run(w, [&] { return group_->all_to_all_single_async(buffer_of(out), buffer_of(in), outs, ins); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::alltoall(TensorList& outputs, TensorList& inputs,
                                                           const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == getSize() && static_cast<int>(inputs.size()) == getSize(),
              "ctrun backend: all_to_all: needs world-size input and output lists");
  auto w = work(OpType::ALLTOALL, outputs);
  std::vector<Buffer> outs, ins;
  for (auto& o : outputs) {
    check_tensor(o, "all_to_all");
    outs.push_back(buffer_of(w->output(o, false)));
  }
  for (auto& i : inputs) {
    check_tensor(i, "all_to_all");
    ins.push_back(buffer_of(w->input(i)));
  }
  return run(w, [&] { return group_->all_to_all_async(outs, ins); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::barrier(const c10d::BarrierOptions&) {
  auto w = work(OpType::BARRIER, {});
  return run(w, [&] { return group_->barrier_async(); });
}

// gloo's monitored barrier, comm's (rank 0 names the ranks that did not arrive): over p2p tags comm reserves for it.
void ProcessGroupCtrun::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  try {
    group_->monitored_barrier(opts.timeout.count() > 0 ? opts.timeout : timeout_, wait_all_ranks);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());  // as gloo's: RuntimeError
  }
}

}  // namespace
}  // namespace ctrun::comm::torch_backend
