// <windows.h> as the engine includes it (Windows only): without the min/max macros that break
// std::numeric_limits<...>::max(), without the rarely used parts, and after <winsock2.h>, which
// must come first or the old <winsock.h> clashes with it.
#pragma once

#if defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <winsock2.h>
#include <ws2tcpip.h>
// after winsock2.h
#include <windows.h>
#endif
