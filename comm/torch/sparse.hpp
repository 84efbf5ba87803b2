#pragma once
// ProcessGroupCtrun's all_reduce of sparse COO tensors, with gloo's semantics: every rank's coalesced indices and
// values are gathered, concatenated and coalesced (which sums the values of equal indices), and the coalesced
// sparse result replaces each rank's tensor. SUM only, as gloo. Two comm all-gathers: the ranks' metadata (nnz,
// dims, sizes; waited for here, since the second's size depends on every rank's nnz), then indices and values,
// each rank's padded to the largest nnz and packed as bytes into one block.
// A part of ctrun_torch.cpp's one translation unit (see there), not a header to include elsewhere.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "comm/torch/process_group_ctrun.hpp"

namespace ctrun::comm::torch_backend {
namespace {

// One rank's row of metadata: nnz, sparse dims, dense dims, number of dims, then the sizes.
constexpr int64_t kSparseMaxDims = 32;
constexpr int64_t kSparseMetaWidth = 4 + kSparseMaxDims;

std::string sparse_shape_text(const int64_t* row) {
  std::string s = "sizes [";
  for (int64_t d = 0; d < row[3]; ++d) s += (d ? ", " : "") + std::to_string(row[4 + d]);
  return s + "] with " + std::to_string(row[1]) + " sparse and " + std::to_string(row[2]) + " dense dims";
}

// The sum of the ranks' coalesced tensors, laid end to end (indices [sparse dims, N], values [N, dense sizes...],
// rank r's counts[r] entries after rank r-1's), as a coalesced tensor. Each rank's entries are sorted by their
// row-major position without repeats, so a merge of the ranks' runs finds equal indices in O(N log ranks), where
// coalesce() sorts all N entries again (4x slower at 170k entries here, and the whole cost of a large sparse
// all_reduce: gloo's sums rank by rank, then coalesces too). Values summed in rank order by index_add_.
at::Tensor merge_sum(const at::Tensor& indices, const at::Tensor& values, const std::vector<int64_t>& counts,
                     at::IntArrayRef sizes) {
  const auto sparse_options = values.options().layout(at::kSparse);
  const int64_t sparse_dim = indices.size(0);
  const int64_t n = indices.size(1);
  bool fits = values.scalar_type() != at::kBool;  // index_add_ has no bool; coalesce() sums those as "or"
  for (int64_t d = 0, span = 1; d < sparse_dim && fits; ++d) {
    fits = sizes[d] == 0 || span <= std::numeric_limits<int64_t>::max() / sizes[d];
    span *= std::max<int64_t>(sizes[d], 1);
  }
  if (!fits) return at::sparse_coo_tensor(indices, values, sizes, sparse_options).coalesce();
  const at::Tensor idx = indices.contiguous();
  const int64_t* rows = idx.data_ptr<int64_t>();
  std::vector<int64_t> position(static_cast<std::size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t p = 0;
    for (int64_t d = 0; d < sparse_dim; ++d) p = p * sizes[d] + rows[d * n + j];
    position[static_cast<std::size_t>(j)] = p;
  }
  std::vector<int64_t> next(counts.size() + 1, 0);  // next[r]: rank r's next entry; next[r + 1] also its end
  std::vector<int64_t> end(counts.size(), 0);
  for (std::size_t r = 0; r < counts.size(); ++r) {
    end[r] = next[r] + counts[r];
    next[r + 1] = end[r];
  }
  using Head = std::pair<int64_t, std::size_t>;  // (position, rank)
  std::priority_queue<Head, std::vector<Head>, std::greater<>> heads;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > 0) heads.emplace(position[static_cast<std::size_t>(next[r])], r);
  }
  at::Tensor slot = at::empty({n}, at::kLong);  // entry j's row in the result
  int64_t* slots = slot.data_ptr<int64_t>();
  std::vector<int64_t> first;  // the first entry of each result row
  first.reserve(static_cast<std::size_t>(n));
  int64_t last = -1;
  while (!heads.empty()) {
    const auto [p, r] = heads.top();
    heads.pop();
    const int64_t j = next[r]++;
    if (first.empty() || p != last) {
      first.push_back(j);
      last = p;
    }
    slots[j] = static_cast<int64_t>(first.size()) - 1;
    if (next[r] < end[r]) heads.emplace(position[static_cast<std::size_t>(next[r])], r);
  }
  const auto unique = static_cast<int64_t>(first.size());
  at::Tensor out_indices = idx.index_select(1, at::tensor(first, at::kLong));
  std::vector<int64_t> shape = values.sizes().vec();
  shape[0] = unique;
  at::Tensor out_values = at::zeros(shape, values.options());
  out_values.index_add_(0, slot, values);
  at::Tensor sum = at::_sparse_coo_tensor_unsafe(out_indices, out_values, sizes, sparse_options);
  sum._coalesced_(true);
  return sum;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCtrun::sparse_allreduce(TensorList& tensors,
                                                                   const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "ctrun backend: allreduce takes exactly one tensor, got ", tensors.size());
  const at::Tensor& user = tensors[0];
  TORCH_CHECK(user.layout() == at::kSparse,
              "ctrun backend: allreduce: only dense and sparse COO tensors are supported");
  TORCH_CHECK(user.device().is_cpu(), "ctrun backend: allreduce: tensor on ", user.device(),
              " but backend \"ctrun\" takes CPU tensors");
  TORCH_CHECK(static_cast<c10d::ReduceOp::RedOpType>(opts.reduceOp) == c10d::ReduceOp::SUM,
              "ctrun backend: allreduce of sparse tensors only works with ReduceOp.SUM (as gloo's)");
  const at::Tensor input = user.coalesce();
  const int64_t ndim = input.dim();
  TORCH_CHECK(ndim <= kSparseMaxDims, "ctrun backend: allreduce of sparse tensors takes at most ", kSparseMaxDims,
              " dims, got ", ndim);
  const int64_t sparse_dim = input.sparse_dim();
  const int64_t nnz = input._nnz();
  const int size = getSize();

  // Every rank's metadata, waited for here (gloo's work does the same on its thread).
  at::Tensor mine = at::zeros({kSparseMetaWidth}, at::kLong);
  int64_t* m = mine.data_ptr<int64_t>();
  m[0] = nnz;
  m[1] = sparse_dim;
  m[2] = input.dense_dim();
  m[3] = ndim;
  for (int64_t d = 0; d < ndim; ++d) m[4 + d] = input.size(d);
  at::Tensor meta = at::empty({size, kSparseMetaWidth}, at::kLong);
  try {
    group_->all_gather_into_async(buffer_of(meta), buffer_of(mine))->wait();
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "ctrun backend: allreduce of a sparse tensor: ", e.what());
  }
  const int64_t* rows = meta.data_ptr<int64_t>();
  int64_t max_nnz = 0;
  for (int r = 0; r < size; ++r) {
    const int64_t* row = rows + r * kSparseMetaWidth;
    TORCH_CHECK(std::equal(row + 1, row + kSparseMetaWidth, m + 1), "ctrun backend: allreduce of sparse tensors: rank ",
                r, "'s tensor has ", sparse_shape_text(row), ", this rank's (", getRank(), ") ", sparse_shape_text(m),
                "; every rank must pass the same shape");
    max_nnz = std::max(max_nnz, row[0]);
  }

  // This rank's block: indices [sparse_dim, max_nnz] (int64), then values [max_nnz, dense sizes...], padded.
  std::vector<int64_t> value_shape{max_nnz};
  for (int64_t d = sparse_dim; d < ndim; ++d) value_shape.push_back(input.size(d));
  at::Tensor indices = at::zeros({sparse_dim, max_nnz}, at::kLong);
  at::Tensor values = at::zeros(value_shape, input.values().options());
  indices.narrow(1, 0, nnz).copy_(input.indices());
  values.narrow(0, 0, nnz).copy_(input.values());
  const auto index_bytes = static_cast<int64_t>(indices.nbytes());
  const auto block_bytes = index_bytes + static_cast<int64_t>(values.nbytes());
  at::Tensor block = at::empty({block_bytes}, at::kByte);
  if (index_bytes) std::memcpy(block.data_ptr(), indices.data_ptr(), indices.nbytes());
  if (values.nbytes()) std::memcpy(block.data_ptr<uint8_t>() + index_bytes, values.data_ptr(), values.nbytes());
  at::Tensor gathered = at::empty({size * block_bytes}, at::kByte);

  auto w = work(OpType::ALLREDUCE, tensors);
  w->keep(block);
  std::vector<int64_t> counts(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) counts[static_cast<std::size_t>(r)] = rows[r * kSparseMetaWidth];
  TensorList outs = tensors;
  w->then([outs, gathered, counts, sparse_dim, max_nnz, index_bytes, block_bytes, value_shape,
           options = input.values().options(), sizes = input.sizes().vec()]() mutable {
    TensorList all_indices;
    TensorList all_values;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      uint8_t* base = gathered.data_ptr<uint8_t>() + static_cast<int64_t>(r) * block_bytes;
      all_indices.push_back(at::from_blob(base, {sparse_dim, max_nnz}, at::kLong).narrow(1, 0, counts[r]));
      all_values.push_back(at::from_blob(base + index_bytes, value_shape, options).narrow(0, 0, counts[r]));
    }
    // Equal indices summed, as gloo's sum of the ranks' tensors does; coalesced.
    const at::Tensor sum = merge_sum(at::cat(all_indices, 1), at::cat(all_values, 0), counts, sizes);
    for (auto& t : outs) t.copy_(sum);
  });
  return run(w, [&] { return group_->all_gather_into_async(buffer_of(gathered), buffer_of(block)); });
}

}  // namespace
}  // namespace ctrun::comm::torch_backend
