#include "cmdbus/db/send_combiner.hpp"

#include <algorithm>

#include "cmdbus/db/error.hpp"

namespace cmdbus::db {

send_combiner::send_combiner(size_t max_group_size, size_t max_concurrent,
                             send_together_fn send_together,
                             send_alone_fn send_alone)
  : max_group_size_(std::max<size_t>(1, max_group_size)),
    max_concurrent_(std::max<size_t>(1, max_concurrent)),
    send_together_(std::move(send_together)),
    send_alone_(std::move(send_alone)) {
  // nop
}

send_result send_combiner::send(prepared_command item) {
  auto slot = std::make_shared<pending>();
  slot->item = std::move(item);
  std::unique_lock<std::mutex> lock{mtx_};
  queue_.push_back(slot);
  while (!slot->done) {
    if (may_lead()) {
      ++leaders_;
      auto g = take_group();
      lock.unlock();
      run(g);
      lock.lock();
      for (auto& member : g)
        member->done = true;
      --leaders_;
      cv_.notify_all();
    } else {
      cv_.wait(lock);
    }
  }
  lock.unlock();
  if (slot->error)
    std::rethrow_exception(slot->error);
  return slot->result;
}

size_t send_combiner::queued() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return queue_.size();
}

bool send_combiner::may_lead() const {
  if (leaders_ == 0)
    return !queue_.empty();
  return leaders_ < max_concurrent_ && queue_.size() >= 2;
}

send_combiner::group send_combiner::take_group() {
  group g;
  while (!queue_.empty() && g.size() < max_group_size_) {
    g.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return g;
}

void send_combiner::run(const group& g) noexcept {
  auto send_each = [&] {
    for (auto& member : g) {
      try {
        member->result = send_alone_(member->item);
      } catch (...) {
        member->error = std::current_exception();
      }
    }
  };
  auto fail_all = [&] {
    for (auto& member : g)
      member->error = std::current_exception();
  };
  if (g.size() == 1) {
    send_each();
    return;
  }
  try {
    send_together_(g);
  } catch (const error& e) {
    if (e.code() == errc::connection)
      fail_all();
    else
      send_each();
  } catch (...) {
    fail_all();
  }
}

} // namespace cmdbus::db
