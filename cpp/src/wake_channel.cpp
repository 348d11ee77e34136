#include "permits/wake_channel.hpp"

#include <stdexcept>
#include <utility>

#if defined(_WIN32)
#include "permits/windows.hpp"
#ifndef WSA_FLAG_NO_HANDLE_INHERIT
#define WSA_FLAG_NO_HANDLE_INHERIT 0x80
#endif
#else
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

namespace permits::detail {

namespace {

#if defined(_WIN32)
SOCKET as_socket(WakeChannel::Handle h) {
    return static_cast<SOCKET>(h);
}

bool winsock_started() {
    // Once per process, never cleaned up: the engine's sockets may outlive any owner.
    static const bool started = [] {
        WSADATA data;
        return ::WSAStartup(MAKEWORD(2, 2), &data) == 0;
    }();
    return started;
}

SOCKET open_tcp() {
    // Overlapped: asyncio's proactor loop receives with overlapped I/O.
    return ::WSASocketW(AF_INET, SOCK_STREAM, IPPROTO_TCP, nullptr, 0,
                        WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
}

// Windows has no socketpair(): connect two loopback TCP sockets through a listener that lives
// only for this, and keep the connection only if it is our own (another local process could
// connect first).
bool make_pair(SOCKET& reader, SOCKET& writer) {
    reader = writer = INVALID_SOCKET;
    if (!winsock_started()) {
        return false;
    }
    SOCKET listener = open_tcp();
    if (listener == INVALID_SOCKET) {
        return false;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int len = sizeof addr;
    bool ok = ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(listener, 1) == 0 &&
              ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    if (ok) {
        writer = open_tcp();
        ok = writer != INVALID_SOCKET && ::connect(writer, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    }
    sockaddr_in peer{};
    sockaddr_in mine{};
    int peer_len = sizeof peer;
    int mine_len = sizeof mine;
    if (ok) {
        reader = ::accept(listener, reinterpret_cast<sockaddr*>(&peer), &peer_len);
        ok = reader != INVALID_SOCKET && ::getsockname(writer, reinterpret_cast<sockaddr*>(&mine), &mine_len) == 0 &&
             peer.sin_addr.s_addr == mine.sin_addr.s_addr && peer.sin_port == mine.sin_port;
    }
    ::closesocket(listener);
    u_long non_blocking = 1;
    BOOL no_delay = TRUE; // one byte per batch: never held back waiting for an ACK
    ok = ok && ::ioctlsocket(reader, FIONBIO, &non_blocking) == 0 &&
         ::ioctlsocket(writer, FIONBIO, &non_blocking) == 0 &&
         ::setsockopt(writer, IPPROTO_TCP, TCP_NODELAY, reinterpret_cast<const char*>(&no_delay), sizeof no_delay) ==
             0 &&
         ::SetHandleInformation(reinterpret_cast<HANDLE>(reader), HANDLE_FLAG_INHERIT, 0) != 0;
    if (!ok) {
        if (reader != INVALID_SOCKET) {
            ::closesocket(reader);
        }
        if (writer != INVALID_SOCKET) {
            ::closesocket(writer);
        }
        reader = writer = INVALID_SOCKET;
    }
    return ok;
}

void write_byte(WakeChannel::Handle h, WakeKind /*always a socket*/) {
    const char byte = 1;
    ::send(as_socket(h), &byte, 1, 0); // WSAEWOULDBLOCK: the buffer is full, so already readable
}

void read_all(WakeChannel::Handle h) {
    char buf[64];
    while (::recv(as_socket(h), buf, sizeof buf, 0) > 0) {
    }
}

void close_handle(WakeChannel::Handle h) {
    ::closesocket(as_socket(h));
}
#else
void non_blocking_close_on_exec(const int fds[2]) {
    for (int i = 0; i < 2; ++i) {
        ::fcntl(fds[i], F_SETFL, ::fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        ::fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
}

bool make_pipe(int fds[2]) {
    if (::pipe(fds) != 0) {
        return false;
    }
    non_blocking_close_on_exec(fds);
    return true;
}

bool make_pair(int fds[2]) {
#if defined(SOCK_NONBLOCK) && defined(SOCK_CLOEXEC)
    return ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0;
#else
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
        return false;
    }
    non_blocking_close_on_exec(fds);
#if defined(SO_NOSIGPIPE)
    const int on = 1;
    ::setsockopt(fds[1], SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof on);
#endif
    return true;
#endif
}

#if defined(MSG_NOSIGNAL)
constexpr int kNoSignal = MSG_NOSIGNAL;
#else
constexpr int kNoSignal = 0; // SO_NOSIGPIPE, set on the socket instead
#endif

void write_byte(WakeChannel::Handle h, WakeKind kind) {
    // EAGAIN: the buffer is full, so already readable. EPIPE (sockets only, whose reader can be
    // taken): the taker closed the reader.
    const char byte = 1;
    if (kind == WakeKind::Socket) {
        [[maybe_unused]] auto sent = ::send(static_cast<int>(h), &byte, 1, kNoSignal);
    } else {
        [[maybe_unused]] auto written = ::write(static_cast<int>(h), &byte, 1);
    }
}

void read_all(WakeChannel::Handle h) {
    char buf[64];
    while (::read(static_cast<int>(h), buf, sizeof buf) > 0) {
    }
}

void close_handle(WakeChannel::Handle h) {
    ::close(static_cast<int>(h));
}
#endif

// Windows' loops watch only sockets: there every channel is a socket pair, whatever was asked.
constexpr WakeKind available([[maybe_unused]] WakeKind asked) noexcept {
#if defined(_WIN32)
    return WakeKind::Socket;
#else
    return asked;
#endif
}

} // namespace

WakeChannel::WakeChannel(WakeKind kind) : kind_(available(kind)) {
#if defined(_WIN32)
    SOCKET reader = INVALID_SOCKET;
    SOCKET writer = INVALID_SOCKET;
    if (!make_pair(reader, writer)) {
        throw std::runtime_error("permits: cannot create the wake-up sockets");
    }
    reader_ = static_cast<Handle>(reader);
    writer_ = static_cast<Handle>(writer);
#else
    int fds[2];
    if (!(kind_ == WakeKind::Socket ? make_pair(fds) : make_pipe(fds))) {
        throw std::runtime_error(kind_ == WakeKind::Socket ? "permits: cannot create the wake-up sockets"
                                                           : "permits: cannot create the wake-up pipe");
    }
    reader_ = fds[0];
    writer_ = fds[1];
#endif
}

WakeChannel::~WakeChannel() {
    if (reader_ != kNone) {
        close_handle(reader_);
    }
    close_handle(writer_);
}

void WakeChannel::signal() noexcept {
    write_byte(writer_, kind_);
}

void WakeChannel::empty() noexcept {
    if (reader_ != kNone) {
        read_all(reader_);
    }
}

WakeChannel::Handle WakeChannel::take_reader() noexcept {
    return kind_ == WakeKind::Socket ? std::exchange(reader_, kNone) : kNone;
}

} // namespace permits::detail
