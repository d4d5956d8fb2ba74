# Cross build for 64-bit ARM Linux (Debian: g++-aarch64-linux-gnu), tests run under user-mode
# QEMU (Debian: qemu-user): `cmake --preset aarch64 && cmake --build build/aarch64 && ctest
# --test-dir build/aarch64`. scripts/install_cross_deps.sh installs both (scripts/test.sh runs this build).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# ctest and gtest_discover_tests run the test binary through this.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
# The build's own checks written in Python (tests/cpp: include layers, ISA isolation) read the
# sources or x86 objects and run in the native builds; here CTest would hand the host's
# interpreter to the emulator, which cannot run it.
set(CMAKE_DISABLE_FIND_PACKAGE_Python3 ON)
