#pragma once

// Waiting for a condition in the database tests: poll it with a deadline
// instead of sleeping a fixed time.

#include <chrono>
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

} // namespace cmdbus::test
