#pragma once
// The torch headers the backend uses and the names its parts share: the c10d base class of the torch line being
// built against, torch's op types and tensor lists, and comm's group under a name c10d's does not hide.
// A part of ctrun_torch.cpp's one translation unit (see there), not a header to include elsewhere.

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif
#include <ATen/Functions.h>
#include <ATen/core/ivalue.h>

#include <vector>

#include "comm/process_group.hpp"

namespace ctrun::comm::torch_backend {
namespace {

#if TORCH_VERSION_MAJOR >= 2
using BaseGroup = c10d::Backend;
#else
using BaseGroup = c10d::ProcessGroup;
#endif
using c10d::OpType;
using TensorList = std::vector<at::Tensor>;
using CommGroup = ::ctrun::comm::ProcessGroup;  // inside ProcessGroupCtrun, ProcessGroup is c10d's

}  // namespace
}  // namespace ctrun::comm::torch_backend
