#pragma once

// Waiting in the database tests: poll a condition with a deadline instead of
// sleeping a fixed time, and await a call that could hang without blocking
// the suite.

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

namespace cmdbus::test {

/// Polls `cond` every ~10 ms until it holds (true) or `deadline` passed
/// (false).
template <class F>
bool eventually(F cond,
                std::chrono::milliseconds deadline = std::chrono::seconds{20}) {
  auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    if (cond())
      return true;
    if (std::chrono::steady_clock::now() >= until)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
}

/// Runs `fn` on a detached thread; returns whether it finished within
/// `deadline`. A call that hangs (a stop, a pipeline on a lost connection)
/// then fails the test instead of blocking the suite; `fn` must therefore
/// own (or share) everything it touches.
inline bool returns_within(std::function<void()> fn,
                           std::chrono::milliseconds deadline
                           = std::chrono::seconds{10}) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  std::thread([fn = std::move(fn), done] {
    fn();
    done->set_value();
  }).detach();
  return finished.wait_for(deadline) == std::future_status::ready;
}

} // namespace cmdbus::test
