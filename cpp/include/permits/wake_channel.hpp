// The engine's only way to wake an event loop: a pipe or a connected pair of sockets. A thread
// with no Python in it writes a byte to one end; the loop watches the other, or receives from it.
#pragma once

#include <cstdint>

namespace permits::detail {

enum class WakeKind {
    /// A pipe where a loop can watch one (POSIX): the cheapest wake-up (a byte through a socket
    /// costs about 2 us more per wake-up, write, poll and read, measured on Linux). On Windows,
    /// whose loops can watch only sockets, a socket pair.
    Pipe,
    /// A connected pair of stream sockets (a Unix socket pair on POSIX, a loopback TCP pair on
    /// Windows): for a loop that cannot watch a descriptor but can receive from a socket (asyncio's
    /// proactor loop).
    Socket,
};

/// Both ends non-blocking and not inherited by child processes.
class WakeChannel {
public:
    using Handle = std::intptr_t; // a file descriptor, or a Windows SOCKET
    static constexpr Handle kNone = -1;

    /// Throws std::runtime_error if the pipe or sockets cannot be made.
    explicit WakeChannel(WakeKind kind = WakeKind::Pipe);
    ~WakeChannel();
    WakeChannel(const WakeChannel&) = delete;
    WakeChannel& operator=(const WakeChannel&) = delete;

    /// What it is: Socket on Windows whatever was asked.
    WakeKind kind() const noexcept { return kind_; }
    /// The end the loop watches (kNone once taken).
    Handle reader() const noexcept { return reader_; }
    /// Makes the reader readable. Never blocks (a full buffer is readable already) and never raises
    /// SIGPIPE (whoever took the reader may have closed it).
    void signal() noexcept;
    /// Reads what is there, unless the reader was taken.
    void empty() noexcept;
    /// Hands a socket's reader over: the caller reads and closes it from now on, and empty() reads
    /// nothing. For a loop that can only receive from a socket, not watch it (the proactor loop).
    /// A pipe's reader is never handed over (kNone): a write to a closed pipe raises SIGPIPE.
    Handle take_reader() noexcept;

private:
    WakeKind kind_;
    Handle reader_ = kNone;
    Handle writer_ = kNone;
};

} // namespace permits::detail
