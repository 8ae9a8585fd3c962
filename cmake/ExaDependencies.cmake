# Every dependency comes from a Debian package that scripts/setup-deps.sh installs (docs/architecture.md#dependencies).
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
pkg_check_modules(ROCKSDB REQUIRED IMPORTED_TARGET rocksdb)
# canonical/raft 0.15 (libraft-dev): the spec store's consensus (docs/architecture.md#consistency).
pkg_check_modules(RAFT REQUIRED IMPORTED_TARGET raft)
# jemalloc (libjemalloc-dev): exaserve-sim's allocator. The simulator runs every node's control
# loop in one process, and glibc's malloc spent a third of its time consolidating free chunks
# (docs/perf/cluster.md#simulator-speed). Sanitizer builds keep the sanitizers' allocator.
if(NOT EXASERVE_SANITIZE)
  pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
endif()

find_program(EXA_PROTOC protoc REQUIRED)
find_program(EXA_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# Boost.Asio + Beast are header-only; keep one flavour for the whole daemon.
add_library(exa_boost_asio INTERFACE)
target_link_libraries(exa_boost_asio INTERFACE Boost::headers Threads::Threads)
target_compile_definitions(exa_boost_asio INTERFACE BOOST_ASIO_NO_DEPRECATED
                                                    BOOST_BEAST_USE_STD_STRING_VIEW)

if(EXASERVE_BUILD_TESTS)
  find_package(Catch2 REQUIRED)
endif()
