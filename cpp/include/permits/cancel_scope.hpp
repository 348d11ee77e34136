// Blocking waits that another thread can end: a wait made on a thread while a scope is entered
// there leaves its queue at once when that scope is cancelled (a chain's close ends the wait one
// of its members is blocked in). Scopes nest, as chains do: the innermost wait belongs to each.
#pragma once

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "permits/limiter.hpp"
#include "permits/waiter.hpp"

namespace permits {

class CancelScope : public std::enable_shared_from_this<CancelScope> {
public:
    /// Cancels the waits registered under this scope now and any registered later; idempotent.
    void cancel();
    bool cancelled() const;
    /// This thread's waits are this scope's from now on, until leave() (the same thread, LIFO).
    void enter();
    void leave();
    /// True when a scope entered on this thread is cancelled: a wait that is not queued in the
    /// engine (a pause between attempts) looks here.
    static bool cancelled_here();

    /// A blocking wait of this thread, registered with every scope entered on it while it lives:
    /// cancelled at once if one of them already is.
    class Watch {
    public:
        Watch(const std::shared_ptr<Limiter>& owner, std::shared_ptr<Waiter> waiter);
        ~Watch();
        Watch(const Watch&) = delete;
        Watch& operator=(const Watch&) = delete;

    private:
        std::shared_ptr<Waiter> waiter_;
        std::vector<std::shared_ptr<CancelScope>> scopes_;
    };

private:
    using Wait = std::pair<std::shared_ptr<Limiter>, std::shared_ptr<Waiter>>;
    /// False when the scope is cancelled already (the wait is not added).
    bool add(Wait wait);
    void remove(const Waiter* waiter);

    mutable std::mutex mu_; // guards cancelled_ and waits_; never held while a limiter's lock is taken
    bool cancelled_ = false;
    std::vector<Wait> waits_;
};

} // namespace permits
