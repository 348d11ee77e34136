// The sliding log (SlidingWindow with segments below zero; specs.SlidingLog, what specs.parse
// makes): never more than the limit in any interval of the window's length (both ends included), a
// wait never longer than the window and a nanosecond and exact, the whole limit every window for a
// queue that never empties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "permits/clock.hpp"
#include "permits/sliding_window.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

constexpr std::int64_t kLog = -32; // specs.SlidingLog's segments

std::shared_ptr<SlidingWindow> make_log(const std::shared_ptr<ManualClock>& clock, std::int64_t limit, Nanos window,
                                        std::int64_t segments = kLog, std::int64_t queue_limit = 0) {
    return std::make_shared<SlidingWindow>(clock, limit, window, segments,
                                           QueueOptions{queue_limit, QueueOrder::OldestFirst}, false);
}

/// The most permits granted in any interval [t, t + window], both ends included, of `times` (one
/// per permit): what a server counting [now - window, now] sees at most.
std::int64_t most_in_any_window(std::vector<Nanos> times, Nanos window) {
    std::sort(times.begin(), times.end());
    std::int64_t most = 0;
    std::size_t first = 0;
    for (std::size_t last = 0; last < times.size(); ++last) {
        while (times[last] - times[first] > window) {
            ++first;
        }
        most = std::max<std::int64_t>(most, static_cast<std::int64_t>(last - first + 1));
    }
    return most;
}

struct LogCase {
    std::int64_t limit;
    Nanos window;
    std::int64_t segments;
};

std::string describe(const LogCase& c) {
    return "limit " + std::to_string(c.limit) + ", window " + std::to_string(c.window) + " ns, " +
           std::to_string(-c.segments) + " segments";
}

} // namespace

TEST(SlidingLog, ItsShapeIsKSegmentsOfTheWindowRoundedUpAndOneMore) {
    auto clock = make_clock();
    auto log = make_log(clock, 100, 60 * kSec);
    EXPECT_EQ(log->window(), 60 * kSec);
    EXPECT_EQ(log->segments(), 33);
    EXPECT_EQ(log->segment_length(), 1'875'000'000);
    EXPECT_EQ(make_log(clock, 1, 1001, -10)->segment_length(), 101);
    const QueueOptions q{};
    // k segments need a window of k * k ns (sliding_log.hpp: (k - 1) segments shorter than it).
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, 1023, kLog, q, false), std::invalid_argument);
    EXPECT_NO_THROW(std::make_shared<SlidingWindow>(clock, 1, 1024, kLog, q, false));
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, kSec, -65536, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 0, kSec, kLog, q, false), std::invalid_argument);
}

TEST(SlidingLog, ABurstComesBackExactlyOneWindowLaterNotASegmentMore) {
    auto clock = make_clock();
    auto log = make_log(clock, 100, 60 * kSec);
    clock->advance(700'000'000); // inside the first segment
    ASSERT_TRUE(log->acquire(100).acquired);
    const Outcome refused = log->acquire(1);
    EXPECT_FALSE(refused.acquired);
    EXPECT_EQ(refused.retry_after, 60 * kSec + 1); // the window (and a ns), not its segment's end at 61.875 s
    clock->advance(60 * kSec);
    EXPECT_EQ(log->available_permits(), 0); // [t, t + 60 s] holds its 100
    EXPECT_EQ(log->acquire(1).retry_after, 1);
    clock->advance(1);
    EXPECT_EQ(log->available_permits(), 100);
    EXPECT_TRUE(log->acquire(100).acquired);
}

TEST(SlidingLog, ASegmentsPermitsComeBackOneWindowAfterItsLatestGrant) {
    auto clock = make_clock();
    auto log = make_log(clock, 10, 10 * kSec, -10); // 1 s segments
    clock->advance(100'000'000);
    ASSERT_TRUE(log->acquire(3).acquired); // t = 0.1 s
    clock->advance(500'000'000);
    ASSERT_TRUE(log->acquire(2).acquired); // t = 0.6 s, the same segment: its 5 come back after 10.6 s
    clock->advance(kSec);
    ASSERT_TRUE(log->acquire(5).acquired); // t = 1.6 s: back after 11.6 s
    EXPECT_EQ(log->acquire(1).retry_after, 9 * kSec + 1);
    clock->advance(9 * kSec); // t = 10.6 s
    EXPECT_EQ(log->available_permits(), 0);
    clock->advance(1);
    EXPECT_EQ(log->available_permits(), 5);
    EXPECT_EQ(log->acquire(6).retry_after, kSec);
    clock->advance(kSec);
    EXPECT_EQ(log->available_permits(), 10);
}

TEST(SlidingLog, NeverMoreThanTheLimitInAnyWindowAndEveryWaitIsExactAndAtMostTheWindow) {
    const LogCase cases[] = {{100, 60 * kSec, kLog},      {10, kSec, kLog}, {7, 5 * kSec, -3}, {5, 2 * kSec, -1},
                             {1000, 86'400 * kSec, kLog}, {3, 10'007, -7}};
    std::uint64_t seed = 7;
    for (const LogCase& c : cases) {
        SCOPED_TRACE(describe(c));
        auto clock = make_clock();
        auto log = make_log(clock, c.limit, c.window, c.segments);
        std::mt19937_64 rng(seed++);
        auto below = [&](std::int64_t n) { return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n)); };
        const Nanos segment = log->segment_length();
        std::vector<Nanos> granted;
        std::int64_t refusals = 0;
        for (int step = 0; step < 20'000; ++step) {
            const std::int64_t n = 1 + below(std::min<std::int64_t>(c.limit, 5));
            const Outcome o = log->acquire(n);
            if (o.acquired) {
                granted.insert(granted.end(), static_cast<std::size_t>(n), clock->now());
            } else {
                ++refusals;
                ASSERT_GT(o.retry_after, 0);
                ASSERT_LE(o.retry_after, c.window + 1) << "at " << clock->now();
                // Exact: one ns before, not enough; then enough.
                clock->advance(o.retry_after - 1);
                ASSERT_LT(log->available_permits(), n) << "at " << clock->now();
                clock->advance(1);
                ASSERT_GE(log->available_permits(), n) << "at " << clock->now();
            }
            // Mostly short steps, so that the limit is reached; now and then past a segment or windows.
            const std::int64_t pick = below(40);
            clock->advance(below(c.limit) == 0 ? below(2 * c.window)
                           : pick < 20         ? pick % 2
                           : pick < 37         ? below(2 * c.window / c.limit + 1)
                           : pick < 39         ? segment / 3
                                               : segment);
        }
        EXPECT_GT(refusals, 100); // the limit was reached, often
        EXPECT_LE(most_in_any_window(granted, c.window), c.limit);
    }
}

TEST(SlidingLog, AQueueThatNeverEmptiesGetsTheWholeLimitEveryWindow) {
    // "100/minute" for a job that waits for each permit: 100 a minute, not 95 (the segmented
    // window of 63.16 s before it).
    auto clock = make_clock();
    auto log = make_log(clock, 100, 60 * kSec);
    std::int64_t granted = 0;
    const Nanos start = clock->now();
    while (clock->now() - start < 100 * 60 * kSec) {
        const Outcome o = log->acquire(1);
        if (o.acquired) {
            ++granted;
            clock->advance(1'000'000); // 1 ms of work a row
        } else {
            clock->advance(o.retry_after);
        }
    }
    EXPECT_GE(granted, 100 * 100 - 100); // 100 minutes: 10,000 rows, less the last minute's partial
    EXPECT_LE(granted, 100 * 100 + 100);
}

TEST(SlidingLog, AClientPacedAtTheRateLessASegmentIsNeverRefused) {
    // Sending at an even pace: a grant is held until its segment's latest grant plus the window,
    // at most a segment (1/32 of the window) longer than its own: a pace of limit per window and
    // a segment is never refused.
    auto clock = make_clock();
    auto log = make_log(clock, 100, 60 * kSec);
    const Nanos gap = (60 * kSec + log->segment_length()) / 100 + 1; // 97 a minute
    std::int64_t refused = 0;
    for (int i = 0; i < 10'000; ++i) {
        refused += log->acquire(1).acquired ? 0 : 1;
        clock->advance(gap);
    }
    EXPECT_EQ(refused, 0);
}

TEST(SlidingLog, ARequestBehindTheQueueIsToldWhenItsTurnComes) {
    // The projection of the queue ahead (Limiter::retry_after_locked) follows the log's stamps.
    auto clock = make_clock();
    auto log = make_log(clock, 4, 10 * kSec, -5, 10); // 2 s segments
    ASSERT_TRUE(log->acquire(2).acquired);            // t = 0: back after 10 s
    clock->advance(3 * kSec);
    ASSERT_TRUE(log->acquire(2).acquired); // t = 3 s: back after 13 s
    auto first = log->enqueue(3, -1);      // served just after 13 s (2 + 2 back)
    ASSERT_TRUE(first.waiter);
    const Outcome behind = log->acquire(2); // 1 left then; the first's 3 back a window and a ns later
    EXPECT_FALSE(behind.acquired);
    EXPECT_EQ(behind.retry_after, 20 * kSec + 2);
    clock->advance(10 * kSec);
    EXPECT_TRUE(first.waiter->pending());
    clock->advance(1);
    ASSERT_FALSE(first.waiter->pending());
    EXPECT_TRUE(first.waiter->outcome().acquired);
    EXPECT_EQ(log->acquire(2).retry_after, 10 * kSec + 1);
}
