// WakeChannel: the socket pair through which the engine wakes an event loop.
#include <gtest/gtest.h>

#include <thread>

#include "permits/wake_channel.hpp"
#include "sockets.hpp"

using permits::detail::WakeChannel;
using namespace permits::test_sockets;

TEST(WakeChannel, ASignalMakesTheReaderReadableUntilEmptied) {
    WakeChannel ch;
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

TEST(WakeChannel, SignallingAFullBufferNeverBlocks) {
    WakeChannel ch;
    for (int i = 0; i < 200'000; ++i) { // 200 kB of single bytes: beyond a socket buffer
        ch.signal();
    }
    EXPECT_TRUE(readable(ch.reader()));
    ch.empty();
    EXPECT_FALSE(readable(ch.reader()));
}

TEST(WakeChannel, ASignalFromAnotherThreadWakesTheReader) {
    WakeChannel ch;
    std::thread t([&] { ch.signal(); });
    t.join();
    char buf[4];
    EXPECT_EQ(receive(ch.reader(), buf, sizeof buf), 1);
    EXPECT_EQ(buf[0], 1);
    EXPECT_EQ(receive(ch.reader(), buf, sizeof buf), -1);
    EXPECT_TRUE(would_block());
}

TEST(WakeChannel, ATakenReaderIsLeftAlone) {
    WakeChannel::Handle taken = WakeChannel::kNone;
    {
        WakeChannel ch;
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

TEST(WakeChannel, BothEndsAreKeptFromChildProcesses) {
    WakeChannel ch;
    EXPECT_TRUE(not_inherited(ch.reader()));
    const auto reader = ch.take_reader();
    EXPECT_TRUE(not_inherited(reader));
    close_socket(reader);
}
