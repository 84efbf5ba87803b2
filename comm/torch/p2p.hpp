#pragma once
// ProcessGroupCtrun's point-to-point ops: comm matches them by (peer, tag), or by tag from any peer
// (recvAnysource); comm refuses the tags it reserves.
// A part of ctrun_torch.cpp's one translation unit (see there), not a header to include elsewhere.

#include "comm/torch/process_group_ctrun.hpp"

namespace ctrun::comm::torch_backend {
namespace {

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::send(TensorList& tensors, int dst, int tag) {
  const at::Tensor& t = single(tensors, "send");
  auto w = work(OpType::SEND, {});
  at::Tensor src = w->input(t);
  return run(w, [&] { return group_->isend(buffer_of(src), dst, tag); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::recv(TensorList& tensors, int src, int tag) {
  const at::Tensor& t = single(tensors, "recv");
  auto w = work(OpType::RECV, tensors);
  at::Tensor dst = w->output(t, false);
  return run(w, [&] { return group_->irecv(buffer_of(dst), src, tag); });
}

// dist.recv(t) without src: the first message with this tag from any rank; the Work's sourceRank() names it.
c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::recvAnysource(TensorList& tensors, int tag) {
  const at::Tensor& t = single(tensors, "recv");
  auto w = work(OpType::RECVANYSOURCE, tensors);
  at::Tensor dst = w->output(t, false);
  return run(w, [&] { return group_->irecv(buffer_of(dst), kAnySource, tag); });
}

}  // namespace
}  // namespace ctrun::comm::torch_backend
