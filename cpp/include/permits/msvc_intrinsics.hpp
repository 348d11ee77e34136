// Whether the engine uses MSVC's intrinsics (_InterlockedCompareExchange128, _umul128,
// __shiftright128): with MSVC itself, or where PERMITS_MSVC_INTRINSICS is defined (the CMake option
// of that name). Clang with -fms-extensions offers them on a MinGW target too, so the MSVC code
// paths are built and run here under wine (scripts/portability), though MSVC itself is not.
#pragma once

#if (defined(_MSC_VER) && !defined(__clang__)) || defined(PERMITS_MSVC_INTRINSICS)
#define PERMITS_HAS_MSVC_INTRINSICS 1
#include <intrin.h>
#if !defined(_MSC_VER)
// MinGW's intrin.h does not declare this one; under -fms-extensions it is a compiler builtin.
extern "C" unsigned char _InterlockedCompareExchange128(long long volatile* destination, long long exchange_high,
                                                        long long exchange_low, long long* comparand_result);
#endif
#endif

#if defined(_M_X64) || defined(__x86_64__)
#define PERMITS_X64 1
#endif
#if defined(_M_ARM64) || defined(__aarch64__)
#define PERMITS_ARM64 1
#endif
