#pragma once

// Crash injection for the crash-safety tests: when the environment variable
// CMDBUS_FAULT_INJECT names a point, the process kills itself with SIGKILL
// the first time execution reaches it, exactly like `kill -9` at that
// moment. Unset (always, outside those tests) it costs one branch.

namespace cmdbus::actors {

/// Points between the side effects of a command.
enum class fault_point {
  /// The read batch is claimed (attempts, RECEIVED) but no handler ran.
  after_receive,
  /// A handler finished; its side effects are not written yet.
  after_handler,
  /// The side effects are committed; the slot was not released yet.
  after_commit,
  /// A process reply's transition is written, not committed.
  before_process_commit,
  /// A process reply's transition is committed; its router was not told.
  after_process_commit,
};

/// Kills the process with SIGKILL if CMDBUS_FAULT_INJECT names `x`
/// ("after-receive", "after-handler", "after-commit",
/// "before-process-commit", "after-process-commit").
void maybe_crash(fault_point x) noexcept;

} // namespace cmdbus::actors
