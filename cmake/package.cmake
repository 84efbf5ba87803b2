# Debian packages by CPack: `make deb` (Makefile) runs cpack -G DEB in the build directory.
#   ctrun_<version>-1_<arch>.deb       ctrun, ctstore, libctrun_comm/libctrun_store, headers, CMake and pkg-config
#                                      files, man pages, docs; the Python torch module when it is built.
#   ctrun-nccl_<version>-1_<arch>.deb  libctrun_comm_nccl (CUDA builds only; needs NVIDIA's libnccl and libcudart,
#                                      which are not Debian packages: see docs/install.md).
# Dependencies of ctrun are computed by dpkg-shlibdeps from the binaries (libc6, libstdc++6, libfmt9, libspdlog1.10).
set(CPACK_PACKAGE_NAME ctrun)
set(CPACK_PACKAGE_VENDOR "ctrun")
set(CPACK_PACKAGE_CONTACT "ctrun maintainers <ctrun@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "torchrun-compatible launcher, TCPStore daemon and collectives library")
set(CPACK_PACKAGE_DESCRIPTION "ctrun is a C++ replacement for PyTorch's torchrun: a per-node elastic launcher
(ctrun), a TCPStore daemon speaking PyTorch's wire protocol (ctstore), and a collective-communication library
for workers (libctrun_comm) with its TCPStore client (libctrun_store), headers, CMake and pkg-config files.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ctrun)
if(TARGET ctrun_comm_nccl)
  list(APPEND CPACK_COMPONENTS_ALL nccl)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_CTRUN_PACKAGE_NAME ctrun)
set(CPACK_DEBIAN_CTRUN_PACKAGE_SHLIBDEPS ON)
# A package with shared libraries gets a shlibs file and the ldconfig trigger.
set(CPACK_DEBIAN_CTRUN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_CTRUN_PACKAGE_SUGGESTS "python3-torch, pkg-config, cmake")
set(CPACK_DEBIAN_CTRUN_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_DEBIAN_NCCL_PACKAGE_NAME ctrun-nccl)
set(CPACK_DEBIAN_NCCL_PACKAGE_DEPENDS "ctrun (= ${PROJECT_VERSION}-1)")
# libnccl.so.2 and libcudart come from NVIDIA (CUDA toolkit, pip wheels or NVIDIA's apt repository), not Debian:
# dpkg-shlibdeps cannot map them to packages, so the package states only its dependency on ctrun.
set(CPACK_DEBIAN_NCCL_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_NCCL_DESCRIPTION "ctrun comm's NCCL backend (CUDA)\nlibctrun_comm_nccl: the nccl backend of ctrun comm and CUDA buffers for its cpu backend.
Needs NVIDIA's libnccl.so.2 and libcudart at run time.")
include(CPack)
