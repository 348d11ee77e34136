// Timed waiters among many queued requests (the deadline heap behind the queue's timeouts): each
// expires exactly at its deadline, in deadline order, whatever is queued around it, through
// cancellation storms, grants and close; and the heap's memory follows the queue's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "permits/clock.hpp"
#include "permits/concurrency.hpp"
#include "permits/deadline_heap.hpp"
#include "permits/waiter.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

std::shared_ptr<Concurrency> held_pool(const std::shared_ptr<ManualClock>& clock, QueueOrder order) {
    auto l = std::make_shared<Concurrency>(clock, 1, QueueOptions{kNoQueueLimit, order});
    EXPECT_TRUE(l->acquire(1).acquired); // held for the whole test: nothing is granted by time
    return l;
}

bool timed_out(const std::shared_ptr<Waiter>& w) {
    return w->state() == Waiter::Completed && !w->outcome().acquired && w->outcome().reason == Reason::Timeout;
}

std::shared_ptr<Waiter> waiter_with(Nanos deadline) {
    return std::make_shared<Waiter>(1, deadline, nullptr, 0);
}

} // namespace

class Deadlines : public ::testing::TestWithParam<QueueOrder> {};

TEST_P(Deadlines, EachTimedWaiterAmongThousandsExpiresExactlyAtItsDeadline) {
    auto clock = make_clock();
    auto l = held_pool(clock, GetParam());
    std::mt19937_64 rng(7);
    std::vector<std::shared_ptr<Waiter>> untimed;
    std::vector<std::pair<Nanos, std::shared_ptr<Waiter>>> timed;
    for (int i = 0; i < 3000; ++i) {
        if (i % 10 == 3) {
            const Nanos timeout = 1 + static_cast<Nanos>(rng() % 500) * kMs; // ties happen: 300 in 500 ms
            timed.emplace_back(timeout, l->enqueue(1, timeout).waiter);
        } else {
            untimed.push_back(l->enqueue(1, -1).waiter);
        }
    }
    std::sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    Nanos now = 0;
    for (std::size_t i = 0; i < timed.size(); ++i) {
        const Nanos due = timed[i].first;
        if (due > now) {
            clock->advance(due - 1 - now); // one ns before: still waiting
            EXPECT_EQ(timed[i].second->state(), Waiter::Pending) << i;
            clock->advance(1);
            now = due;
        }
        EXPECT_TRUE(timed_out(timed[i].second)) << i;
        if (i + 1 < timed.size() && timed[i + 1].first > due) {
            EXPECT_EQ(timed[i + 1].second->state(), Waiter::Pending) << i + 1;
        }
    }
    for (const auto& w : untimed) {
        EXPECT_EQ(w->state(), Waiter::Pending);
    }
    EXPECT_EQ(l->statistics().current_queued_count, static_cast<std::int64_t>(untimed.size()));
    l->close();
}

TEST_P(Deadlines, CancellingMostTimedWaitersLeavesTheOthersOnTime) {
    auto clock = make_clock();
    auto l = held_pool(clock, GetParam());
    std::vector<std::shared_ptr<Waiter>> timed;
    for (int i = 0; i < 5000; ++i) {
        timed.push_back(l->enqueue(1, (1 + i % 50) * kSec).waiter);
        l->enqueue(1, -1); // an untimed flood around them
    }
    std::mt19937_64 rng(11);
    std::vector<std::size_t> order(timed.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
        order[i] = i;
    }
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<bool> kept(timed.size(), false);
    for (std::size_t k = 0; k < order.size(); ++k) {
        if (k < 20) {
            kept[order[k]] = true; // 20 survive
        } else {
            EXPECT_TRUE(l->cancel(*timed[order[k]]));
        }
    }
    for (Nanos s = 1; s <= 50; ++s) {
        clock->advance(kSec);
        for (std::size_t i = 0; i < timed.size(); ++i) {
            if (kept[i]) {
                const Nanos deadline = (1 + static_cast<Nanos>(i) % 50) * kSec;
                EXPECT_EQ(timed_out(timed[i]), deadline <= s * kSec) << i;
            } else {
                EXPECT_EQ(timed[i]->state(), Waiter::Cancelled);
            }
        }
    }
    EXPECT_EQ(l->statistics().current_queued_count, 5000);
    l->close();
}

TEST_P(Deadlines, AGrantedTimedWaiterNeverTimesOutLater) {
    auto clock = make_clock();
    auto l = std::make_shared<Concurrency>(clock, 1, QueueOptions{kNoQueueLimit, GetParam()});
    auto held = l->acquire(1);
    ASSERT_TRUE(held.acquired);
    auto a = l->enqueue(1, 5 * kSec).waiter;
    l->give_back(1, held.tag);
    ASSERT_EQ(a->state(), Waiter::Completed);
    ASSERT_TRUE(a->outcome().acquired);
    clock->advance(10 * kSec);
    EXPECT_TRUE(a->outcome().acquired);
    auto b = l->enqueue(1, 2 * kSec).waiter; // the heap's stale entry for `a` is harmless
    clock->advance(2 * kSec);
    EXPECT_TRUE(timed_out(b));
}

INSTANTIATE_TEST_SUITE_P(BothOrders, Deadlines, ::testing::Values(QueueOrder::OldestFirst, QueueOrder::NewestFirst));

TEST(DeadlineHeap, PopsInDeadlineOrderAndArrivalOrderOnTies) {
    detail::DeadlineHeap heap;
    std::vector<std::shared_ptr<Waiter>> ws = {waiter_with(30), waiter_with(10), waiter_with(20), waiter_with(10)};
    for (const auto& w : ws) {
        heap.push(w);
    }
    EXPECT_EQ(heap.next(), 10);
    EXPECT_EQ(heap.pop_due(9), nullptr);
    EXPECT_EQ(heap.pop_due(10), ws[1]);
    EXPECT_EQ(heap.pop_due(10), ws[3]);
    EXPECT_EQ(heap.pop_due(10), nullptr);
    EXPECT_EQ(heap.next(), 20);
    ASSERT_TRUE(ws[2]->cancel());
    EXPECT_EQ(heap.next(), 30); // the cancelled one is skipped
    EXPECT_EQ(heap.pop_due(100), ws[0]);
    EXPECT_EQ(heap.next(), kNever);
}

TEST(DeadlineHeap, StaleEntriesNeverOutgrowTheLiveOnesForLong) {
    detail::DeadlineHeap heap;
    std::vector<std::shared_ptr<Waiter>> ws;
    for (int i = 0; i < 10000; ++i) {
        ws.push_back(waiter_with(1000 - i % 1000));
        heap.push(ws.back());
    }
    std::size_t live = ws.size();
    for (std::size_t i = 0; i + 10 < ws.size(); ++i) {
        ASSERT_TRUE(ws[i]->cancel());
        heap.compact(--live);
        EXPECT_LE(heap.size(), 2 * live + 64 + 1);
    }
    EXPECT_EQ(live, 10u);
    EXPECT_LE(heap.size(), 2 * live + 64);
    int popped = 0;
    while (heap.pop_due(kNever - 1) != nullptr) {
        ++popped;
    }
    EXPECT_EQ(popped, 10);
    heap.compact(0);
    EXPECT_EQ(heap.size(), 0u);
}
