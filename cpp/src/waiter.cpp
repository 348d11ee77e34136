#include "permits/waiter.hpp"

#include <cerrno>
#include <chrono>
#include <new>
#include <stdexcept>

#if defined(_WIN32)
#include <fcntl.h>
#include <io.h>
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <unistd.h>
#endif

namespace permits {

namespace {

#if defined(_WIN32)
// The CRT's anonymous pipes cannot be made non-blocking: drain reads only the bytes there. One
// byte at most is ever in the pipe (push writes only when no batch is signalled), so write never
// blocks either.
int make_pipe(int fds[2]) {
    return ::_pipe(fds, 64, _O_BINARY | _O_NOINHERIT);
}
void write_byte(int fd) {
    const char byte = 1;
    [[maybe_unused]] auto written = ::_write(fd, &byte, 1);
}
void read_all(int fd) {
    char buf[64];
    for (;;) {
        DWORD avail = 0;
        if (::PeekNamedPipe(reinterpret_cast<HANDLE>(::_get_osfhandle(fd)), nullptr, 0, nullptr, &avail, nullptr) ==
                0 ||
            avail == 0) {
            return;
        }
        if (::_read(fd, buf, avail < sizeof buf ? static_cast<unsigned>(avail) : sizeof buf) <= 0) {
            return;
        }
    }
}
void close_fd(int fd) {
    ::_close(fd);
}
#else
int make_pipe(int fds[2]) {
    if (::pipe(fds) != 0) {
        return -1;
    }
    for (int i = 0; i < 2; ++i) {
        ::fcntl(fds[i], F_SETFL, ::fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        ::fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    return 0;
}
void write_byte(int fd) {
    // A full pipe already means "wake up", so EAGAIN is fine.
    const char byte = 1;
    [[maybe_unused]] auto written = ::write(fd, &byte, 1);
}
void read_all(int fd) {
    char buf[64];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
}
void close_fd(int fd) {
    ::close(fd);
}
#endif

} // namespace

Notifier::Notifier() {
    int fds[2];
    if (make_pipe(fds) != 0) {
        throw std::runtime_error("permits: cannot create the notifier pipe");
    }
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    detail::ForkRegistry::add(this);
}

Notifier::~Notifier() {
    detail::ForkRegistry::remove(this);
    close_fd(read_fd_);
    close_fd(write_fd_);
}

void Notifier::push(std::shared_ptr<Waiter> w) {
    bool signal = false;
    {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(std::move(w));
        signal = !signalled_;
        signalled_ = true;
    }
    if (signal) {
        write_byte(write_fd_); // one byte per batch
        wakeups_.fetch_add(1);
    }
}

std::vector<std::shared_ptr<Waiter>> Notifier::drain() {
    std::vector<std::shared_ptr<Waiter>> out;
    drain_into(out);
    return out;
}

void Notifier::drain_into(std::vector<std::shared_ptr<Waiter>>& out) {
    out.clear();
    read_all(read_fd_);
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(ready_);
    signalled_ = false;
}

bool Waiter::complete(const Outcome& o) {
    int expected = Pending;
    // Claim, write, publish: a late second completion changes nothing, and a reader that sees
    // Completed sees the outcome.
    if (!state_.compare_exchange_strong(expected, Completing)) {
        return false;
    }
    outcome_ = o;
    state_.store(Completed);
    if (notifier_) {
        notifier_->push(shared_from_this());
    } else {
        std::lock_guard<std::mutex> lock(mu_);
        cv_.notify_all();
    }
    return true;
}

bool Waiter::cancel() noexcept {
    int expected = Pending;
    return state_.compare_exchange_strong(expected, Cancelled);
}

void Waiter::abandon() noexcept {
    int expected = Pending;
    state_.compare_exchange_strong(expected, Cancelled);
    new (&mu_) std::mutex();
    new (&cv_) std::condition_variable();
}

bool Waiter::wait_for(Nanos timeout_ns) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns),
                 [this] { return state() == Completed || state() == Cancelled; });
    return state() == Completed;
}

} // namespace permits
