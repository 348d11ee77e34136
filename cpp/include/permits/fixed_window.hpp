// Fixed window: windows back to back from the anchor; the count resets at each boundary
// however late the next request comes (semantics.md 3).
#pragma once

#include "permits/atomic_pair.hpp"
#include "permits/limiter.hpp"

namespace permits {

class FixedWindow final : public Limiter {
public:
    FixedWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, QueueOptions queue, bool manual);
    std::int64_t permit_limit() const noexcept { return limit_; }
    Nanos window() const noexcept { return window_; }

protected:
    bool take(std::int64_t n, Nanos now, std::int64_t& tag) override;
    std::int64_t available_at(Nanos now) const override;
    Nanos time_until(std::int64_t needed, Nanos now) const override;
    void put_back(std::int64_t n, std::int64_t tag, Nanos now) override;
    Nanos full_since(Nanos now) const override;
    std::unique_ptr<Projection> project() const override;

private:
    struct Proj;
    std::int64_t window_index(Nanos now) const noexcept { return now <= anchor_ ? 0 : (now - anchor_) / window_; }
    Nanos window_start(std::int64_t w) const noexcept;

    const std::int64_t limit_;
    const Nanos window_;
    const Nanos anchor_;
    AtomicPair state_; // {window index, permits used in it}
};

} // namespace permits
