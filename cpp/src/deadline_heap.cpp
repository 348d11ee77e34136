#include "permits/deadline_heap.hpp"

#include <algorithm>

namespace permits::detail {

void DeadlineHeap::push(std::shared_ptr<Waiter> w) {
    const Nanos when = w->deadline();
    heap_.push_back({when, seq_++, std::move(w)});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
}

void DeadlineHeap::drop_stale_top() {
    while (!heap_.empty() && !heap_.front().waiter->pending()) {
        std::pop_heap(heap_.begin(), heap_.end(), Later{});
        heap_.pop_back();
    }
}

Nanos DeadlineHeap::next() {
    drop_stale_top();
    return heap_.empty() ? kNever : heap_.front().when;
}

std::shared_ptr<Waiter> DeadlineHeap::pop_due(Nanos now) {
    drop_stale_top();
    if (heap_.empty() || heap_.front().when > now) {
        return nullptr;
    }
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    std::shared_ptr<Waiter> w = std::move(heap_.back().waiter);
    heap_.pop_back();
    return w;
}

void DeadlineHeap::compact(std::size_t live) {
    if (live == 0) {
        clear();
        return;
    }
    if (heap_.size() <= 2 * live + 64) {
        return;
    }
    std::erase_if(heap_, [](const Entry& e) { return !e.waiter->pending(); });
    std::make_heap(heap_.begin(), heap_.end(), Later{});
}

} // namespace permits::detail
