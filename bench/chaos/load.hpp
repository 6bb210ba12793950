#pragma once

// The load of a chaos scenario: a plan of commands with known behaviours,
// so that each one's correct final state is known in advance.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::chaos {

/// What the demo handler is told to do with a command.
enum class behaviour {
  /// Succeeds at once: COMPLETED after one run.
  success,
  /// Fails transiently on its first attempt, then succeeds: COMPLETED
  /// after two runs (max_attempts 3).
  transient_then_success,
  /// Fails permanently: IN_TROUBLESHOOTING_QUEUE after one run.
  permanent,
  /// Fails a business rule: FAILED after one run.
  business_rule,
};

/// Returns a short name ("success", "transient", ...).
const char* name_of(behaviour b) noexcept;

/// Returns the status a command of behaviour `b` must end in.
const char* final_status_of(behaviour b) noexcept;

/// Returns how many handler runs a command of behaviour `b` needs when
/// nothing goes wrong.
int expected_runs(behaviour b) noexcept;

/// One planned command.
struct planned_command {
  uuid id;
  behaviour what = behaviour::success;
  /// Sent with reply_to `{domain}__replies`.
  bool reply = false;
  /// Index into load_plan::batches when sent in a batch.
  std::optional<size_t> batch;
  /// Sent with a not-before time this long after its send (a delayed
  /// command); zero: none.
  std::chrono::milliseconds delay{0};
  /// Whether the harness knows it was sent (acknowledged, or found to
  /// exist on a retry). Written only by the sender thread that sends it.
  bool confirmed = false;
};

/// One planned batch; its commands are sent together by create_batch.
struct planned_batch {
  uuid id;
  std::vector<size_t> members;
  bool confirmed = false;
};

/// A unit of sending: one command, or one whole batch.
struct send_unit {
  bool is_batch = false;
  /// Index into commands or batches.
  size_t index = 0;
};

/// Settings of a plan.
struct load_settings {
  int commands = 3000;
  int batch_size = 20;
  int min_duration_ms = 20;
  int max_duration_ms = 100;
  uint64_t seed = 1;
  /// Every n-th command is delayed (0: none), by 500 ms to `max_delay_ms`.
  int delayed_every = 0;
  int max_delay_ms = 8000;
};

/// Everything a scenario sends, in sending order.
struct load_plan {
  std::string domain;
  std::string reply_queue;
  load_settings settings;
  std::vector<planned_command> commands;
  std::vector<planned_batch> batches;
  std::vector<send_unit> units;
};

/// Plans `s.commands` commands for `domain`: the four behaviours in equal
/// shares, every other one with reply_to, about a third in batches of
/// `s.batch_size`. Two batches in three hold no permanent failure, so that
/// they complete (and their callbacks run); the others stay open with a
/// command in the troubleshooting queue, as designed. With
/// `s.delayed_every`, every n-th command gets a delay.
load_plan make_plan(const std::string& domain, const load_settings& s);

/// Attempts every planned command allows: the transient one needs 2,
/// which leaves one for a fault to burn.
constexpr int max_attempts = 3;

/// The payload of command `index` of `plan`: {"n": index, "behavior": ...}
/// as the demo handler reads it.
json command_data(const load_plan& plan, size_t index);

} // namespace cmdbus::chaos
