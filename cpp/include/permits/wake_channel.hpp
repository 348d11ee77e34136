// The engine's only way to wake an event loop: a connected pair of sockets. A thread with no
// Python in it writes a byte to one end; the loop watches the other.
#pragma once

#include <cstdint>

namespace permits::detail {

/// A connected pair of non-blocking, non-inherited stream sockets (a Unix socket pair on POSIX, a
/// loopback TCP pair on Windows). Sockets, not a pipe, on every platform: Windows' event loops
/// (asyncio's proactor loop, trio) can watch only sockets, and one kind everywhere keeps the one
/// path the tests run here.
class WakeChannel {
public:
    using Handle = std::intptr_t; // a file descriptor, or a Windows SOCKET
    static constexpr Handle kNone = -1;

    /// Throws std::runtime_error if the sockets cannot be made.
    WakeChannel();
    ~WakeChannel();
    WakeChannel(const WakeChannel&) = delete;
    WakeChannel& operator=(const WakeChannel&) = delete;

    /// The end the loop watches (kNone once taken).
    Handle reader() const noexcept { return reader_; }
    /// Makes the reader readable. Never blocks (a full buffer is readable already) and never raises
    /// SIGPIPE (whoever took the reader may have closed it).
    void signal() noexcept;
    /// Reads what is there, unless the reader was taken.
    void empty() noexcept;
    /// Hands the reader over: the caller reads and closes it from now on, and empty() reads
    /// nothing. For a loop that can only receive from a socket, not watch it (the proactor loop).
    Handle take_reader() noexcept;

private:
    Handle reader_ = kNone;
    Handle writer_ = kNone;
};

} // namespace permits::detail
