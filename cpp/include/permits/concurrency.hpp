// Concurrency: permits held until released; no time involved.
#pragma once

#include "permits/limiter.hpp"

namespace permits {

class Concurrency final : public Limiter {
public:
    Concurrency(std::shared_ptr<Clock> clock, std::int64_t permit_limit, QueueOptions queue);
    std::int64_t permit_limit() const noexcept { return limit_; }
    bool releases_permits() const noexcept override { return true; }

protected:
    bool take(std::int64_t n, Nanos now, std::int64_t& tag) override;
    std::int64_t available_at(Nanos now) const override;
    Nanos time_until(std::int64_t needed, Nanos now) const override;
    void put_back(std::int64_t n, std::int64_t tag, Nanos now) override;
    Nanos full_since(Nanos now) const override;
    std::unique_ptr<Projection> project() const override;

private:
    const std::int64_t limit_;
    std::atomic<std::int64_t> available_;
    std::atomic<Nanos> idle_since_; // when available last returned to the limit
};

} // namespace permits
