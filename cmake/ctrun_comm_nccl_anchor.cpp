// Compiled into every program that links ctrun::comm_nccl (the target's INTERFACE_SOURCES, cmake/install.cmake).
// It references the library's registration flag, so the linker keeps libctrun_comm_nccl even under --as-needed
// when the program calls nothing of it directly, and the library registers backend "nccl" when it loads.
extern "C" const int ctrun_comm_nccl_registered;
[[gnu::used]] static const int* const ctrun_comm_nccl_anchor = &ctrun_comm_nccl_registered;
