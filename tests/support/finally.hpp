#pragma once

// A scope guard of the tests: cleanup that runs on every exit path,
// including a failed ASSERT_* (which returns from the test body).

#include <functional>
#include <utility>

namespace cmdbus::test {

/// Runs a function at scope exit (opening gates, stopping workers, dropping
/// objects a test created in a shared schema).
class finally {
public:
  explicit finally(std::function<void()> fn) : fn_(std::move(fn)) {
    // nop
  }

  finally(const finally&) = delete;
  finally& operator=(const finally&) = delete;

  ~finally() {
    if (fn_)
      fn_();
  }

private:
  std::function<void()> fn_;
};

} // namespace cmdbus::test
