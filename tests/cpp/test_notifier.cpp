// Notifier (one wake-up per batch of completions) and Waiter state transitions.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "permits/waiter.hpp"
#include "wake_io.hpp"

using namespace permits;

namespace {

std::shared_ptr<Waiter> make_waiter(const std::shared_ptr<Notifier>& n, std::uint64_t id, std::int64_t permits = 1) {
    return std::make_shared<Waiter>(permits, kNever, n, id);
}

using test_wake_io::readable;

} // namespace

TEST(Notifier, OneWakeUpPerBatch) {
    auto n = std::make_shared<Notifier>();
    EXPECT_GE(n->fd(), 0);
    EXPECT_EQ(n->wakeups(), 0u);
    EXPECT_FALSE(readable(n->fd()));

    std::vector<std::shared_ptr<Waiter>> ws;
    for (std::uint64_t id = 1; id <= 3; ++id) {
        ws.push_back(make_waiter(n, id));
        n->push(ws.back());
    }
    EXPECT_EQ(n->wakeups(), 1u);
    EXPECT_TRUE(readable(n->fd()));

    const auto batch = n->drain();
    ASSERT_EQ(batch.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(batch[i], ws[i]); // in completion order
    }
    EXPECT_FALSE(readable(n->fd())); // the pipe is emptied

    n->push(make_waiter(n, 4));
    EXPECT_EQ(n->wakeups(), 2u);
    EXPECT_TRUE(readable(n->fd()));
    n->push(make_waiter(n, 5));
    EXPECT_EQ(n->wakeups(), 2u);
    const auto second = n->drain();
    ASSERT_EQ(second.size(), 2u);
    EXPECT_EQ(second[0]->id(), 4u);
    EXPECT_EQ(second[1]->id(), 5u);
}

TEST(Notifier, DrainWithNothingReadyIsEmpty) {
    Notifier n;
    EXPECT_TRUE(n.drain().empty());
    EXPECT_TRUE(n.drain().empty());
    EXPECT_EQ(n.wakeups(), 0u);
}

TEST(Notifier, PipeAndSocketAreNonBlockingAndNotInherited) {
    for (auto kind : {detail::WakeKind::Pipe, detail::WakeKind::Socket}) {
        Notifier n(kind);
        EXPECT_TRUE(test_wake_io::not_inherited(n.fd()));
        char c = 0;
        EXPECT_EQ(test_wake_io::receive(n.fd(), &c, 1), -1); // nothing to read: no blocking
        EXPECT_TRUE(test_wake_io::would_block());
    }
}

TEST(Notifier, ATakenSocketIsTheTakersToEmpty) {
    auto n = std::make_shared<Notifier>(detail::WakeKind::Socket);
    const auto fd = n->take_reader();
    EXPECT_EQ(n->fd(), detail::WakeChannel::kNone);
    n->push(make_waiter(n, 1));
    EXPECT_TRUE(readable(fd));
    ASSERT_EQ(n->drain().size(), 1u); // the waiters, but not the byte: that is the taker's
    EXPECT_TRUE(readable(fd));
    char buf[8];
    EXPECT_EQ(test_wake_io::receive(fd, buf, sizeof buf), 1);
    n->push(make_waiter(n, 2)); // the next batch signals again
    EXPECT_EQ(n->wakeups(), 2u);
    EXPECT_EQ(test_wake_io::receive(fd, buf, sizeof buf), 1);
    test_wake_io::close_socket(fd);
    // The taker is gone (its loop closed): completions still queue, and signalling a closed
    // socket neither fails nor raises SIGPIPE.
    n->drain();
    n->push(make_waiter(n, 3));
    EXPECT_EQ(n->wakeups(), 3u);
    EXPECT_EQ(n->drain().size(), 1u);
}

TEST(Notifier, ManyCompletionsBeforeADrainStillOneWakeUp) {
    auto n = std::make_shared<Notifier>();
    for (std::uint64_t id = 0; id < 10000; ++id) {
        n->push(make_waiter(n, id));
    }
    EXPECT_EQ(n->wakeups(), 1u);
    const auto batch = n->drain();
    ASSERT_EQ(batch.size(), 10000u);
    EXPECT_EQ(batch.front()->id(), 0u);
    EXPECT_EQ(batch.back()->id(), 9999u);
    EXPECT_FALSE(readable(n->fd()));
}

TEST(Notifier, CompletingAWaiterPushesItOnce) {
    auto n = std::make_shared<Notifier>();
    auto w = make_waiter(n, 9, 3);
    EXPECT_EQ(w->permits(), 3);
    EXPECT_EQ(w->id(), 9u);
    EXPECT_EQ(w->deadline(), kNever);
    EXPECT_TRUE(w->pending());
    EXPECT_TRUE(w->complete(Outcome::granted(3, 5)));
    EXPECT_EQ(w->state(), Waiter::Completed);
    EXPECT_FALSE(w->pending());
    EXPECT_TRUE(w->outcome().acquired);
    EXPECT_EQ(w->outcome().tag, 5);
    EXPECT_FALSE(w->cancel());
    EXPECT_EQ(w->state(), Waiter::Completed);
    EXPECT_EQ(n->wakeups(), 1u);
    const auto batch = n->drain();
    ASSERT_EQ(batch.size(), 1u);
    EXPECT_EQ(batch[0], w);
    EXPECT_TRUE(batch[0]->outcome().acquired);
}

TEST(Notifier, LateCompleteChangesNothing) {
    // complete() on a waiter that is no longer pending returns false and must leave the
    // outcome the caller already holds (and may be reading) untouched.
    auto n = std::make_shared<Notifier>();
    auto w = make_waiter(n, 9, 3);
    ASSERT_TRUE(w->complete(Outcome::granted(3, 5)));
    EXPECT_FALSE(w->complete(Outcome::failed(3, Reason::Closed)));
    EXPECT_EQ(w->state(), Waiter::Completed);
    EXPECT_TRUE(w->outcome().acquired);
    EXPECT_EQ(w->outcome().reason, Reason::None);
    EXPECT_EQ(w->outcome().tag, 5);
    EXPECT_EQ(n->wakeups(), 1u);
    EXPECT_EQ(n->drain().size(), 1u);
}

TEST(Notifier, CancelledWaiterCannotComplete) {
    auto n = std::make_shared<Notifier>();
    auto w = make_waiter(n, 1);
    EXPECT_TRUE(w->cancel());
    EXPECT_EQ(w->state(), Waiter::Cancelled);
    EXPECT_FALSE(w->cancel());
    EXPECT_FALSE(w->complete(Outcome::granted(1, 0)));
    EXPECT_EQ(w->state(), Waiter::Cancelled);
    EXPECT_EQ(n->wakeups(), 0u);
    EXPECT_TRUE(n->drain().empty());
}

TEST(Waiter, BlockingWaitReturnsOnceCompleted) {
    auto w = std::make_shared<Waiter>(1, kNever, nullptr, 0);
    EXPECT_FALSE(w->wait_for(0)); // still pending
    std::thread completer([w] { w->complete(Outcome::granted(1, 0)); });
    EXPECT_TRUE(w->wait_for(60'000'000'000)); // returns as soon as completed, never the full minute
    completer.join();
    EXPECT_TRUE(w->wait_for(0));
}

TEST(Waiter, BlockingWaitOnACancelledWaiterReturnsFalse) {
    auto w = std::make_shared<Waiter>(1, kNever, nullptr, 0);
    ASSERT_TRUE(w->cancel());
    EXPECT_FALSE(w->wait_for(60'000'000'000));
}

TEST(Outcome, FactoriesAndReasonNames) {
    const Outcome g = Outcome::granted(4, 7);
    EXPECT_TRUE(g.acquired);
    EXPECT_EQ(g.reason, Reason::None);
    EXPECT_EQ(g.retry_after, -1);
    EXPECT_EQ(g.permits, 4);
    EXPECT_EQ(g.tag, 7);
    const Outcome f = Outcome::failed(2, Reason::QueueFull, 99);
    EXPECT_FALSE(f.acquired);
    EXPECT_EQ(f.reason, Reason::QueueFull);
    EXPECT_EQ(f.retry_after, 99);
    EXPECT_EQ(f.permits, 2);
    EXPECT_EQ(Outcome::failed(1, Reason::Evicted).retry_after, -1);

    EXPECT_STREQ(reason_name(Reason::None), "");
    EXPECT_STREQ(reason_name(Reason::LimitReached), "limit_reached");
    EXPECT_STREQ(reason_name(Reason::QueueFull), "queue_full");
    EXPECT_STREQ(reason_name(Reason::Evicted), "evicted");
    EXPECT_STREQ(reason_name(Reason::Closed), "closed");
    EXPECT_STREQ(reason_name(Reason::Timeout), "timeout");
    EXPECT_STREQ(reason_name(Reason::PartitionLimit), "partition_limit");
    EXPECT_STREQ(ClosedError().what(), "the limiter is closed");
}
