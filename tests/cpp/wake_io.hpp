// What the tests need to look at a wake-up pipe or socket from the loop's side, on POSIX and Windows.
#pragma once

#if defined(_WIN32)
#include "permits/windows.hpp"
#else
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <cerrno>

#include "permits/wake_channel.hpp"

namespace permits::test_wake_io {

using Handle = detail::WakeChannel::Handle;

/// Whether a read would find something, without waiting.
inline bool readable(Handle h) {
#if defined(_WIN32)
    fd_set set;
    FD_ZERO(&set);
    FD_SET(static_cast<SOCKET>(h), &set);
    timeval zero{0, 0};
    return ::select(0, &set, nullptr, nullptr, &zero) == 1;
#else
    pollfd p{static_cast<int>(h), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
#endif
}

/// Reads up to `size` bytes: the count, 0 at end of stream, -1 on error (see would_block()).
inline long receive(Handle h, char* buf, int size) {
#if defined(_WIN32)
    return ::recv(static_cast<SOCKET>(h), buf, size, 0);
#else
    return static_cast<long>(::read(static_cast<int>(h), buf, static_cast<std::size_t>(size)));
#endif
}

/// After receive() returned -1: the pipe or socket is non-blocking and empty.
inline bool would_block() {
#if defined(_WIN32)
    return ::WSAGetLastError() == WSAEWOULDBLOCK;
#else
    return errno == EAGAIN || errno == EWOULDBLOCK;
#endif
}

/// Whether the handle is kept from child processes.
inline bool not_inherited(Handle h) {
#if defined(_WIN32)
    DWORD flags = 0;
    return ::GetHandleInformation(reinterpret_cast<HANDLE>(h), &flags) != 0 && (flags & HANDLE_FLAG_INHERIT) == 0;
#else
    return (::fcntl(static_cast<int>(h), F_GETFD) & FD_CLOEXEC) != 0;
#endif
}

inline void close_socket(Handle h) {
#if defined(_WIN32)
    ::closesocket(static_cast<SOCKET>(h));
#else
    ::close(static_cast<int>(h));
#endif
}

} // namespace permits::test_wake_io
