# Debian bookworm packages only (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
# header-only parts: Asio, Process v2. CTRUN_BOOST_EXACT=OFF accepts a newer Boost: only the torch 2.6 module
# build in the Debian trixie chroot (tests/torch2/build_ctrun_torch26.sh, Boost 1.83) uses it.
option(CTRUN_BOOST_EXACT "Require exactly Debian bookworm's Boost 1.81" ON)
if(CTRUN_BOOST_EXACT)
  find_package(Boost 1.81 EXACT REQUIRED)
else()
  find_package(Boost 1.81 REQUIRED)
endif()
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
if(CTRUN_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

# Asio and Process v2 are used header-only; Process v2 uses std::filesystem rather than Boost.Filesystem.
add_library(ctrun_asio INTERFACE)
target_link_libraries(ctrun_asio INTERFACE Boost::headers Threads::Threads)
target_compile_definitions(ctrun_asio INTERFACE BOOST_ASIO_NO_DEPRECATED BOOST_PROCESS_USE_STD_FS
                                                BOOST_ASIO_DISABLE_BOOST_COROUTINE)

find_program(CTRUN_TORCH_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
