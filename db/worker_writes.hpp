#pragma once

// The two writes a worker asks for once a handler has run: a final outcome
// and a retry. Kept apart from worker_store.hpp so that the actors' message
// list (actors/atoms.hpp) names them without the store's connection types.

#include "cmdbus/model/outcome.hpp"

namespace cmdbus::db {

/// A finished handler run, ready for its side effects.
struct finished_command {
  received_command rc;
  outcome out;
  /// Transient failure whose attempts are used up: moves to the TSQ.
  bool exhausted = false;
};

/// A transient failure to reschedule.
struct retry_command {
  received_command rc;
  outcome out;
  int backoff_seconds = 0;
};

} // namespace cmdbus::db
