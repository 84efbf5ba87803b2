#pragma once
// What waits in C++ need from the Python interpreter: running its signal handlers on the main thread, and knowing
// whether it is shutting down.
// A part of ctrun_torch.cpp's one translation unit (see there), not a header to include elsewhere.

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>

namespace ctrun::comm::torch_backend {
namespace {

// The Python thread that runs signal handlers (threading.main_thread()), recorded when the module is imported.
std::atomic<unsigned long> python_main_thread{0};

// A signal Python handles (SIGINT: KeyboardInterrupt) only sets a flag while the main thread waits in C++; the
// handler runs at the next bytecode. If the wait then ends with an error, that handler runs while the interpreter
// prints the error's traceback, which aborts the print ("lost sys.stderr" and an object dump at exit). So a wait on
// the main thread runs the handlers itself every slice, as Python's own blocking calls do, and raises what they
// raise from the call. Throws py::error_already_set (torch's binding restores it); false on any other thread.
void raise_pending_python_signal() {
  if (python_main_thread.load() == 0 || PyThread_get_thread_ident() != python_main_thread.load() || !Py_IsInitialized())
    return;
  pybind11::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();
}
constexpr std::chrono::milliseconds kSignalSlice{100};

// During interpreter shutdown no thread gets the GIL any more: nothing may wait for a thread that needs it.
bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

}  // namespace
}  // namespace ctrun::comm::torch_backend
