# Where things are installed, relative to the prefix (docs/install.md). Included before the components, so that
# their own install() rules can use these (e.g. comm/torch/'s Python module:
#   install(TARGETS <module> LIBRARY DESTINATION ${CTRUN_INSTALL_PYTHONDIR})
# ) and land in the main package. cmake/install.cmake has the rules themselves.
include(GNUInstallDirs)
option(CTRUN_SHARED_LIBS "Install comm and store as shared libraries (OFF: static archives)" ON)
set(CTRUN_SOVERSION 0)  # bump when the ABI of a public header changes incompatibly
set(CTRUN_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/ctrun)
set(CTRUN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ctrun)
set(CTRUN_INSTALL_PKGCONFIGDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# Python modules: /usr/lib/python3/dist-packages in the Debian package, Debian's place for modules of every python3.
set(CTRUN_INSTALL_PYTHONDIR lib/python3/dist-packages CACHE STRING "Where Python modules are installed")
# Everything installed without an explicit COMPONENT belongs to the main package ("ctrun"); the CUDA backend says
# COMPONENT nccl (package ctrun-nccl).
set(CMAKE_INSTALL_DEFAULT_COMPONENT_NAME ctrun)
