// WakeChannel: the pipe or socket pair through which the engine wakes an event loop.
#include <gtest/gtest.h>

#include <initializer_list>
#include <thread>

#include "permits/wake_channel.hpp"
#include "wake_io.hpp"

using permits::detail::WakeChannel;
using permits::detail::WakeKind;
using namespace permits::test_wake_io;

namespace {
constexpr std::initializer_list<WakeKind> kKinds = {WakeKind::Pipe, WakeKind::Socket};
const char* name(WakeKind k) {
    return k == WakeKind::Pipe ? "pipe" : "socket";
}
} // namespace

TEST(WakeChannel, ASignalMakesTheReaderReadableUntilEmptied) {
    for (auto kind : kKinds) {
        SCOPED_TRACE(name(kind));
        WakeChannel ch(kind);
        ASSERT_NE(ch.reader(), WakeChannel::kNone);
        EXPECT_FALSE(readable(ch.reader()));
        ch.signal();
        ch.signal();
        EXPECT_TRUE(readable(ch.reader()));
        ch.empty();
        EXPECT_FALSE(readable(ch.reader()));
        ch.empty(); // nothing there: returns at once
        EXPECT_FALSE(readable(ch.reader()));
    }
}

TEST(WakeChannel, SignallingAFullBufferNeverBlocks) {
    for (auto kind : kKinds) {
        SCOPED_TRACE(name(kind));
        WakeChannel ch(kind);
        for (int i = 0; i < 100'000; ++i) { // 100 kB of single bytes: beyond a pipe's or socket's buffer
            ch.signal();
        }
        EXPECT_TRUE(readable(ch.reader()));
        ch.empty();
        EXPECT_FALSE(readable(ch.reader()));
    }
}

TEST(WakeChannel, ASignalFromAnotherThreadWakesTheReader) {
    for (auto kind : kKinds) {
        SCOPED_TRACE(name(kind));
        WakeChannel ch(kind);
        std::thread t([&] { ch.signal(); });
        t.join();
        char buf[4];
        EXPECT_EQ(receive(ch.reader(), buf, sizeof buf), 1);
        EXPECT_EQ(buf[0], 1);
        EXPECT_EQ(receive(ch.reader(), buf, sizeof buf), -1);
        EXPECT_TRUE(would_block());
    }
}

TEST(WakeChannel, ATakenSocketReaderIsLeftAlone) {
    WakeChannel::Handle taken = WakeChannel::kNone;
    {
        WakeChannel ch(WakeKind::Socket);
        const auto reader = ch.reader();
        taken = ch.take_reader();
        EXPECT_EQ(taken, reader);
        EXPECT_EQ(ch.reader(), WakeChannel::kNone);
        EXPECT_EQ(ch.take_reader(), WakeChannel::kNone);
        ch.signal();
        ch.empty(); // no longer reads it
        EXPECT_TRUE(readable(taken));
    } // the channel does not close the reader it handed over
    char buf[4];
    EXPECT_EQ(receive(taken, buf, sizeof buf), 1);
    EXPECT_EQ(receive(taken, buf, sizeof buf), 0); // the writer is closed: end of stream
    close_socket(taken);
}

TEST(WakeChannel, APipesReaderIsNeverHandedOver) {
    WakeChannel ch(WakeKind::Pipe);
#if defined(_WIN32)
    EXPECT_EQ(ch.kind(), WakeKind::Socket); // Windows' loops watch only sockets: no pipes there
#else
    EXPECT_EQ(ch.kind(), WakeKind::Pipe);
    const auto reader = ch.reader();
    EXPECT_EQ(ch.take_reader(), WakeChannel::kNone);
    EXPECT_EQ(ch.reader(), reader);
#endif
}

TEST(WakeChannel, BothEndsAreKeptFromChildProcesses) {
    for (auto kind : kKinds) {
        SCOPED_TRACE(name(kind));
        WakeChannel ch(kind);
        EXPECT_TRUE(not_inherited(ch.reader()));
    }
}
