# 64-bit Windows with Clang, on Debian's mingw-w64 headers and libraries (g++-mingw-w64-x86-64, its
# posix-threads variant): Clang because, with -fms-extensions, it offers MSVC's intrinsics, so
# scripts/portability builds the engine's MSVC code paths here (PERMITS_MSVC_INTRINSICS). The tests
# run under wine (WINEPREFIX and WINEDEBUG come from the environment).
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_C_COMPILER clang)
set(CMAKE_CXX_COMPILER clang++)
set(CMAKE_C_COMPILER_TARGET x86_64-w64-mingw32)
set(CMAKE_CXX_COMPILER_TARGET x86_64-w64-mingw32)
set(CMAKE_RC_COMPILER x86_64-w64-mingw32-windres)
set(CMAKE_FIND_ROOT_PATH /usr/x86_64-w64-mingw32)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Clang finds MinGW's C headers and linker by itself, but not GCC's C++ library: point at the
# newest posix-threads GCC of the mingw-w64 packages. That library keeps its thread-locals
# (std::call_once's) the way GCC does on MinGW, emulated: Clang must do the same to link with it.
file(GLOB _permits_mingw_gcc LIST_DIRECTORIES true /usr/lib/gcc/x86_64-w64-mingw32/*-posix)
list(SORT _permits_mingw_gcc COMPARE NATURAL ORDER DESCENDING)
list(GET _permits_mingw_gcc 0 _permits_mingw_gcc)
set(CMAKE_CXX_FLAGS_INIT
    "-femulated-tls -isystem ${_permits_mingw_gcc}/include/c++ -isystem ${_permits_mingw_gcc}/include/c++/x86_64-w64-mingw32")
# Self-contained executables: wine then needs none of MinGW's runtime DLLs on its path. Statically,
# GCC's C++ library must come before winpthread (its clock_gettime), which Clang's driver does not add.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static -L${_permits_mingw_gcc}")
set(CMAKE_CXX_STANDARD_LIBRARIES "-lstdc++ -lwinpthread")
set(CMAKE_CROSSCOMPILING_EMULATOR /usr/lib/wine/wine64)
