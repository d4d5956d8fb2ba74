# Every openfia build option, in one place.
option(OPENFIA_BUILD_TESTS "Build the GoogleTest suite (needs libgtest-dev)" ON)
option(OPENFIA_BUILD_BENCH "Build openfia-bench (needs libbenchmark-dev)" OFF)
option(OPENFIA_BUILD_EXAMPLES "Build the C++ example program" ON)
option(OPENFIA_BUILD_PYTHON "Build the nanobind Python module (set by scikit-build-core)" OFF)
option(OPENFIA_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(OPENFIA_SIMD "Compile the per-ISA kernels of src/engine/kernels (OFF: scalar only)" ON)
if(DEFINED SKBUILD)
  set(OPENFIA_BUILD_PYTHON ON)
  set(OPENFIA_BUILD_TESTS OFF)
  set(OPENFIA_BUILD_EXAMPLES OFF)
endif()
# BUILD_SHARED_LIBS (CMake's own switch, default OFF) makes libopenfia a shared library that
# exports the public API only. The Python module links the library statically (one file, its
# symbols hidden inside the module), and the tests and the benchmark call internals the shared
# library does not export.
if(OPENFIA_BUILD_PYTHON)
  set(BUILD_SHARED_LIBS OFF)
elseif(BUILD_SHARED_LIBS AND (OPENFIA_BUILD_TESTS OR OPENFIA_BUILD_BENCH))
  message(FATAL_ERROR "BUILD_SHARED_LIBS=ON builds the library alone: the tests and the benchmark "
    "link internals a shared libopenfia does not export (got OPENFIA_BUILD_TESTS="
    "${OPENFIA_BUILD_TESTS}, OPENFIA_BUILD_BENCH=${OPENFIA_BUILD_BENCH}; use "
    "`cmake --preset install -DBUILD_SHARED_LIBS=ON`, or add -DOPENFIA_BUILD_TESTS=OFF)")
endif()

# ccache, where installed, makes a rebuild of unchanged sources (another preset, a second pip
# install, a fresh clone of the same tree) nearly free.
option(OPENFIA_CCACHE "Compile through ccache when it is installed" ON)
if(OPENFIA_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(OPENFIA_CCACHE_PROGRAM ccache)
  if(OPENFIA_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER ${OPENFIA_CCACHE_PROGRAM})
  endif()
endif()
