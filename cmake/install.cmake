# Installing ctrun (cmake --install, make install PREFIX=..., make deb): the programs, comm and store as shared
# libraries with a versioned SONAME (CTRUN_SHARED_LIBS=OFF: static archives), their public headers, a CMake package
# (find_package(ctrun CONFIG): ctrun::comm, ctrun::store, ctrun::comm_nccl), pkg-config files and man pages.
# The layout is documented in docs/install.md. Included by the top-level CMakeLists.txt after every component.
#
# In the build tree every program and test links the static libraries (ctrun_store, ctrun_comm, ...), internals
# included. The installed shared libraries are made from those same archives (--whole-archive, nothing compiled
# twice) and export only the API of their public headers (a version script generated from them).
# (The install directories, CTRUN_INSTALL_*, are set by cmake/install_dirs.cmake, before the components.)
include(CMakePackageConfigHelpers)
include(${CMAKE_CURRENT_LIST_DIR}/version_script.cmake)

# The public API: what a worker includes. Installed under include/ctrun/<component>/, so that the headers'
# own "comm/x.hpp" / "store/x.hpp" includes resolve with -I<prefix>/include/ctrun, and users write
# <ctrun/comm/process_group.hpp> with -I<prefix>/include (the targets and .pc files give both). Listed are the entry points;
# every project header they include (transitively) is added, so a header that a public one starts to include
# is installed (and its API exported) without editing this list.
# ctrun_public_headers(<var> <entry headers...>): the entries and every comm/ or store/ header they include.
function(ctrun_public_headers var)
  set(_todo ${ARGN})
  set(_seen "")
  while(_todo)
    list(POP_FRONT _todo _h)
    if(_h IN_LIST _seen)
      continue()
    endif()
    list(APPEND _seen ${_h})
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${_h})
    file(STRINGS ${PROJECT_SOURCE_DIR}/${_h} _includes REGEX "^#include \"(comm|store)/[^\"]+\"")
    foreach(_inc ${_includes})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" _inc ${_inc})
      list(APPEND _todo ${_inc})
    endforeach()
  endwhile()
  set(${var} ${_seen} PARENT_SCOPE)
endfunction()
ctrun_public_headers(_ctrun_public_headers
  store/store.hpp store/tcp_store.hpp store/prefix_store.hpp store/memory_store.hpp store/file_store.hpp
  store/server.hpp comm/process_group.hpp comm/nccl/nccl_backend.hpp comm/nccl/stream.hpp comm/nccl/device_memory.hpp)
set(CTRUN_STORE_PUBLIC_HEADERS ${_ctrun_public_headers})
list(FILTER CTRUN_STORE_PUBLIC_HEADERS INCLUDE REGEX "^store/")
set(CTRUN_COMM_NCCL_PUBLIC_HEADERS ${_ctrun_public_headers})
list(FILTER CTRUN_COMM_NCCL_PUBLIC_HEADERS INCLUDE REGEX "^comm/nccl/")
set(CTRUN_COMM_PUBLIC_HEADERS ${_ctrun_public_headers})
list(FILTER CTRUN_COMM_PUBLIC_HEADERS INCLUDE REGEX "^comm/")
list(FILTER CTRUN_COMM_PUBLIC_HEADERS EXCLUDE REGEX "^comm/nccl/")

# Both spellings: #include <ctrun/comm/process_group.hpp> (<prefix>/include; in a build tree, the forwarding headers
# generated below, given to the users' targets only, so the project's own compile lines stay as they were) and the
# older "comm/process_group.hpp" (<prefix>/include/ctrun, which the headers themselves use and so comes first:
# their "comm/x.hpp" is always ctrun's).
set(_ctrun_forwarding_dir ${PROJECT_BINARY_DIR}/generated/include)
foreach(_h ${_ctrun_public_headers})
  file(CONFIGURE OUTPUT ${_ctrun_forwarding_dir}/ctrun/${_h}
       CONTENT "// Generated (cmake/install.cmake): <ctrun/${_h}> in a build tree.\n#include \"${_h}\"\n")
endforeach()
set(_ctrun_include_dirs $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}> $<INSTALL_INTERFACE:${CTRUN_INSTALL_INCLUDEDIR}>
                        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# The build-tree libraries export their include directory too (add_subdirectory(ctrun) users), and
# are position independent so that the shared libraries and Python modules can be made from them.
foreach(_t ctrun_common ctrun_store ctrun_comm ctrun_comm_nccl)
  if(TARGET ${_t})
    set_target_properties(${_t} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
endforeach()
target_include_directories(ctrun_store PUBLIC ${_ctrun_include_dirs})
target_include_directories(ctrun_comm PUBLIC ${_ctrun_include_dirs})
target_compile_features(ctrun_store PUBLIC cxx_std_20)
target_compile_features(ctrun_comm PUBLIC cxx_std_20)

# ctrun_add_shared_library(<name> ARCHIVE <static target> EXPORT_NAME <name> HEADERS ... [PUBLIC ...] [EXTRA ...])
# lib<OUTPUT_NAME>.so.<VERSION> with SONAME lib<OUTPUT_NAME>.so.0, made of the whole static archive.
set(_ctrun_empty_cpp ${PROJECT_BINARY_DIR}/generated/ctrun_empty.cpp)
file(CONFIGURE OUTPUT ${_ctrun_empty_cpp} CONTENT "// The objects come from a static archive (cmake/install.cmake).\n")
function(ctrun_add_shared_library name)
  cmake_parse_arguments(ARG "" "ARCHIVE;EXPORT_NAME" "HEADERS;PUBLIC;EXTRA" ${ARGN})
  list(TRANSFORM ARG_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/ OUTPUT_VARIABLE _headers)
  set(_map ${PROJECT_BINARY_DIR}/generated/${name}.map)
  ctrun_write_version_script(OUT ${_map} HEADERS ${_headers} EXTRA ${ARG_EXTRA})
  add_library(${name} SHARED ${_ctrun_empty_cpp})
  get_target_property(_output_name ${ARG_ARCHIVE} NAME)
  set_target_properties(${name} PROPERTIES OUTPUT_NAME ${_output_name} EXPORT_NAME ${ARG_EXPORT_NAME}
                                           VERSION ${PROJECT_VERSION} SOVERSION ${CTRUN_SOVERSION}
                                           INSTALL_RPATH "$ORIGIN" LINK_DEPENDS ${_map})
  # The archive comes first on the link line, then the shared ctrun libraries it uses (--as-needed keeps a
  # library only if it resolves references made before it), then the archive's own static dependencies, which by
  # then have nothing of another ctrun library left to supply: nothing is copied in twice.
  target_link_libraries(${name} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${ARG_ARCHIVE}>" PUBLIC ${ARG_PUBLIC})
  target_link_options(${name} PRIVATE "LINKER:--version-script=${_map}" "LINKER:--no-undefined")
  target_include_directories(${name} INTERFACE ${_ctrun_include_dirs} $<BUILD_INTERFACE:${_ctrun_forwarding_dir}>)
  target_compile_features(${name} INTERFACE cxx_std_20)  # the public headers use C++20 (std::span, ...)
endfunction()

if(CTRUN_SHARED_LIBS)
  ctrun_add_shared_library(ctrun_store_shared ARCHIVE ctrun_store EXPORT_NAME store
                           HEADERS ${CTRUN_STORE_PUBLIC_HEADERS} PUBLIC Threads::Threads)
  ctrun_add_shared_library(ctrun_comm_shared ARCHIVE ctrun_comm EXPORT_NAME comm
                           HEADERS ${CTRUN_COMM_PUBLIC_HEADERS} PUBLIC ctrun_store_shared)
  set(_ctrun_installed_store ctrun_store_shared)
  set(_ctrun_installed_comm ctrun_comm_shared)
  if(TARGET ctrun_comm_nccl)
    ctrun_add_shared_library(ctrun_comm_nccl_shared ARCHIVE ctrun_comm_nccl EXPORT_NAME comm_nccl
                             HEADERS ${CTRUN_COMM_NCCL_PUBLIC_HEADERS} PUBLIC ctrun_comm_shared
                             EXTRA ctrun_comm_nccl_registered)
    target_link_libraries(ctrun_comm_nccl_shared PRIVATE ctrun_cuda_nccl)
    # libnccl/libcudart: from the loader's paths, else where this build found them (CUDA is rarely in ld.so.conf).
    get_filename_component(_nccl_dir ${CTRUN_NCCL_LIBRARY} DIRECTORY)
    get_filename_component(_cudart_dir ${CTRUN_CUDART_LIBRARY} DIRECTORY)
    set_target_properties(ctrun_comm_nccl_shared PROPERTIES INSTALL_RPATH "$ORIGIN;${_nccl_dir};${_cudart_dir}")
    target_include_directories(ctrun_comm_nccl_shared SYSTEM INTERFACE ${CTRUN_CUDA_INCLUDE_DIR})
    target_compile_definitions(ctrun_comm_nccl_shared INTERFACE CTRUN_COMM_WITH_NCCL=1)
    # Keeps the library (and so its registration of "nccl") in programs that call nothing of it directly: a
    # source compiled into each of them references it (--undefined would not count for --as-needed).
    target_sources(ctrun_comm_nccl_shared INTERFACE
      $<BUILD_INTERFACE:${CMAKE_CURRENT_LIST_DIR}/ctrun_comm_nccl_anchor.cpp>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_DATADIR}/ctrun/ctrun_comm_nccl_anchor.cpp>)
    set(_ctrun_installed_comm_nccl ctrun_comm_nccl_shared)
  endif()
else()
  set_target_properties(ctrun_store PROPERTIES EXPORT_NAME store)
  set_target_properties(ctrun_comm PROPERTIES EXPORT_NAME comm)
  set_target_properties(ctrun_common PROPERTIES EXPORT_NAME internal_common)
  set_target_properties(ctrun_asio PROPERTIES EXPORT_NAME internal_asio)
  target_include_directories(ctrun_common INTERFACE ${_ctrun_include_dirs})
  # The users' targets are the static libraries themselves: they get the forwarding headers too.
  target_include_directories(ctrun_store INTERFACE $<BUILD_INTERFACE:${_ctrun_forwarding_dir}>)
  set(_ctrun_installed_store ctrun_store ctrun_common ctrun_asio)
  set(_ctrun_installed_comm ctrun_comm)
  if(TARGET ctrun_comm_nccl)
    set_target_properties(ctrun_comm_nccl PROPERTIES EXPORT_NAME comm_nccl)
    set_target_properties(ctrun_cuda_nccl PROPERTIES EXPORT_NAME internal_cuda_nccl)
    target_include_directories(ctrun_comm_nccl INTERFACE ${_ctrun_include_dirs})
    set(_ctrun_installed_comm_nccl ctrun_comm_nccl ctrun_cuda_nccl)
  endif()
endif()

# Targets under the names the installed package gives them, for add_subdirectory(ctrun) users.
list(GET _ctrun_installed_store 0 _t)
add_library(ctrun::store ALIAS ${_t})
list(GET _ctrun_installed_comm 0 _t)
add_library(ctrun::comm ALIAS ${_t})
if(_ctrun_installed_comm_nccl)
  list(GET _ctrun_installed_comm_nccl 0 _t)
  add_library(ctrun::comm_nccl ALIAS ${_t})
endif()

# --- what is installed ----------------------------------------------------------------------------------------
install(TARGETS ctrun ctstore RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# etcd over https: loaded by ctrun only when a job uses it (rendezvous/etcd/tls_module.hpp).
install(TARGETS ctrun_etcd_tls LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/ctrun)
# A job secret and checkpoint digests: OpenSSL's libcrypto, loaded only by jobs that use them (common/auth/).
install(TARGETS ctrun_crypto LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/ctrun)
# The workers' half of ctrun's stack dumps (docs/hang.md): in a directory of its own, never in dist-packages,
# where it would shadow Debian's sitecustomize for every python; ctrun puts this directory on its workers'
# PYTHONPATH.
install(FILES ${PROJECT_SOURCE_DIR}/agent/hang/python/sitecustomize.py
              ${PROJECT_SOURCE_DIR}/agent/launch/python/ctrun_store_relay.py  # what it imports for the store relay
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ctrun/python)
# ... and beside it the exit note it loads at a worker's exit (agent/teardown/exit_record.hpp).
install(TARGETS ctrun_exit_note LIBRARY DESTINATION ${CMAKE_INSTALL_DATADIR}/ctrun/python)
# One package serves users and developers: the libraries with their development symlinks (libctrun_comm.so ->
# libctrun_comm.so.0 -> libctrun_comm.so.0.1.0), headers, CMake and pkg-config files (docs/install.md).
install(TARGETS ${_ctrun_installed_store} ${_ctrun_installed_comm} EXPORT ctrun-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(_h ${CTRUN_STORE_PUBLIC_HEADERS} ${CTRUN_COMM_PUBLIC_HEADERS})
  get_filename_component(_dir ${_h} DIRECTORY)
  install(FILES ${_h} DESTINATION ${CTRUN_INSTALL_INCLUDEDIR}/${_dir})
endforeach()
install(EXPORT ctrun-targets NAMESPACE ctrun:: DESTINATION ${CTRUN_INSTALL_CMAKEDIR})
if(_ctrun_installed_comm_nccl)
  # The CUDA part is its own component (Debian package ctrun-nccl), so nodes without CUDA install no CUDA library.
  install(TARGETS ${_ctrun_installed_comm_nccl} EXPORT ctrun-nccl-targets COMPONENT nccl
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  foreach(_h ${CTRUN_COMM_NCCL_PUBLIC_HEADERS})
    get_filename_component(_dir ${_h} DIRECTORY)
    install(FILES ${_h} DESTINATION ${CTRUN_INSTALL_INCLUDEDIR}/${_dir} COMPONENT nccl)
  endforeach()
  install(EXPORT ctrun-nccl-targets NAMESPACE ctrun:: DESTINATION ${CTRUN_INSTALL_CMAKEDIR} COMPONENT nccl)
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/ctrun_comm_nccl_anchor.cpp DESTINATION ${CMAKE_INSTALL_DATADIR}/ctrun
          COMPONENT nccl)
endif()

# CMake package: find_package(ctrun CONFIG [COMPONENTS comm_nccl]).
if(CTRUN_SHARED_LIBS)
  set(CTRUN_CONFIG_STATIC OFF)
else()
  set(CTRUN_CONFIG_STATIC ON)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ctrunConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/generated/ctrunConfig.cmake
                              INSTALL_DESTINATION ${CTRUN_INSTALL_CMAKEDIR} PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/generated/ctrunConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/generated/ctrunConfig.cmake
              ${PROJECT_BINARY_DIR}/generated/ctrunConfigVersion.cmake DESTINATION ${CTRUN_INSTALL_CMAKEDIR})

# pkg-config: ctrun (comm + store), ctrun-store, ctrun-comm-nccl. The prefix is found from the .pc file's own
# place (${pcfiledir}), so `cmake --install --prefix DIR` and relocated trees work.
file(RELATIVE_PATH CTRUN_PC_PREFIX_FROM_PCDIR /ctrun-prefix/${CTRUN_INSTALL_PKGCONFIGDIR} /ctrun-prefix)
string(REGEX REPLACE "/$" "" CTRUN_PC_PREFIX_FROM_PCDIR "${CTRUN_PC_PREFIX_FROM_PCDIR}")
if(CTRUN_SHARED_LIBS)
  set(CTRUN_PC_LIBS_PRIVATE "")
else()
  set(CTRUN_PC_LIBS_PRIVATE "-lctrun_common -lspdlog -lfmt")
endif()
foreach(_pc ctrun ctrun-store)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/pkgconfig/${_pc}.pc.in ${PROJECT_BINARY_DIR}/generated/${_pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/generated/${_pc}.pc DESTINATION ${CTRUN_INSTALL_PKGCONFIGDIR})
endforeach()
if(_ctrun_installed_comm_nccl)
  get_filename_component(CTRUN_PC_CUDA_LIBDIR ${CTRUN_CUDART_LIBRARY} DIRECTORY)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/pkgconfig/ctrun-comm-nccl.pc.in
                 ${PROJECT_BINARY_DIR}/generated/ctrun-comm-nccl.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/generated/ctrun-comm-nccl.pc DESTINATION ${CTRUN_INSTALL_PKGCONFIGDIR}
          COMPONENT nccl)
endif()

# Documentation: the docs, and man pages from the programs' own --help and --version when help2man is installed.
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md")
find_program(CTRUN_HELP2MAN help2man)
if(CTRUN_HELP2MAN)
  set(_ctrun_man_name_ctrun "torchrun-compatible per-node launcher and elastic agent")
  set(_ctrun_man_name_ctstore "TCPStore server speaking PyTorch's wire protocol")
  foreach(_prog ctrun ctstore)
    add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/man/${_prog}.1.gz
                       COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
                       COMMAND ${CTRUN_HELP2MAN} --no-info --no-discard-stderr --section=1
                               "--name=${_ctrun_man_name_${_prog}}"
                               --output=${PROJECT_BINARY_DIR}/man/${_prog}.1 $<TARGET_FILE:${_prog}>
                       COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/man/${_prog}.1
                       DEPENDS ${_prog}
                       COMMENT "man page of ${_prog} (help2man)" VERBATIM)
    list(APPEND _ctrun_man_pages ${PROJECT_BINARY_DIR}/man/${_prog}.1.gz)
  endforeach()
  add_custom_target(ctrun_man_pages ALL DEPENDS ${_ctrun_man_pages})
  install(FILES ${_ctrun_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "ctrun: help2man not found: no man pages (ctrun --help has it all)")
endif()
