// ctrun_torch: the torch.distributed backend "ctrun" over comm's public API (comm/process_group.hpp).
//
//   import ctrun_torch                       # registers backend "ctrun" with torch.distributed
//   dist.init_process_group("ctrun", ...)    # env://, tcp://, file://, store=
//
// One source for both torch lines: c10d::ProcessGroup is the base class on torch 1.x, c10d::Backend on >= 2.1
// (registered with devices=["cpu"] there). The group's comm::ProcessGroup runs over the c10d::Store torch hands
// the creator (already scoped per group and per restart attempt), through StoreAdapter.
//
// This file is the module's only translation unit: torch's headers cost tens of seconds of compile time each time a
// translation unit includes them, so the parts below are included here rather than compiled on their own.
//   torch_types.hpp          the torch headers, and the names the parts share
//   python_runtime.hpp       Python's signal handlers and shutdown, as C++ waits see them
//   store_adapter.hpp        comm's store interface over torch's c10d::Store
//   tensors.hpp              tensors <-> comm buffers, dtypes, reduce ops
//   work.hpp                 the c10d::Work of each op, and the thread that completes their futures
//   process_group_ctrun.hpp  the c10d group class: its life and what every op shares
//   collectives.hpp          its collectives and barriers
//   sparse.hpp               its all_reduce of sparse COO tensors
//   p2p.hpp                  its send and recv
// and here: the creator torch calls for each group, and the module that registers it.

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include <dlfcn.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/torch/collectives.hpp"
#include "comm/torch/p2p.hpp"
#include "comm/torch/process_group_ctrun.hpp"
#include "comm/torch/python_runtime.hpp"
#include "comm/torch/sparse.hpp"
#include "comm/torch/store_adapter.hpp"
#include "comm/torch/tensors.hpp"
#include "comm/torch/torch_types.hpp"
#include "comm/torch/work.hpp"
#include "common/version.hpp"

namespace ctrun::comm::torch_backend {
namespace {

c10::intrusive_ptr<BaseGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout) {
  try {
    return c10::make_intrusive<ProcessGroupCtrun>(store, rank, size, timeout);
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "ctrun backend: creating the group failed: ", e.what());
  }
}

}  // namespace
}  // namespace ctrun::comm::torch_backend

PYBIND11_MODULE(ctrun_torch, m) {
  namespace py = pybind11;
  m.doc() = "torch.distributed backend \"ctrun\" (ctrun's comm library); importing registers it";
  m.def("create_process_group", &ctrun::comm::torch_backend::create, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "the creator torch.distributed calls for backend \"ctrun\"");
  m.attr("__version__") = std::string(ctrun::version());  // the project's, as `ctrun --version` says
  // `import ctrun_torch.checkpoint`: the module's Python parts are in the ctrun_torch/ folder beside this file.
  if (Dl_info self{};
      ::dladdr(reinterpret_cast<void*>(&ctrun::comm::torch_backend::create), &self) != 0 && self.dli_fname)
    m.attr("__path__") =
        std::vector<std::string>{(std::filesystem::path(self.dli_fname).parent_path() / "ctrun_torch").string()};
  m.attr("torch_version") = TORCH_VERSION;
  ctrun::comm::torch_backend::python_main_thread =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  // Before Python finalizes, every group's completion thread finishes the Python work in hand (work.hpp).
  py::module_::import("atexit").attr("register")(
      py::cpp_function([] { ctrun::comm::torch_backend::Completers::instance().at_python_exit(); },
                       py::call_guard<py::gil_scoped_release>()));
  auto backend = py::module_::import("torch.distributed").attr("Backend");
  if (!py::hasattr(backend, "CTRUN")) {
    auto creator = m.attr("create_process_group");
#if TORCH_VERSION_MAJOR >= 2
    backend.attr("register_backend")("ctrun", creator, py::arg("devices") = std::vector<std::string>{"cpu"});
#else
    backend.attr("register_backend")("ctrun", creator);
#endif
  }
}
