#pragma once

// Recurring schedules (docs/scheduling.md, "Recurring schedules"): define,
// inspect and change them, and fire the due slots of a domain exactly once.
// Every call runs on the caller's connection (inside whatever transaction is
// open there, except `fire_due`, which needs its own). No CAF.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/model/cron.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::schedules {

/// What happens to slots missed while no worker fired the schedule: its
/// next slot is older than one period (the slot after it is due too) and
/// than the misfire grace (see fire_due).
enum class misfire_policy {
  /// One command, for the newest missed slot; then the next future slot.
  run_once,
  /// No command; the schedule continues from the next future slot.
  skip,
};

std::string_view to_string(misfire_policy x) noexcept;

/// Parses "run_once" or "skip".
std::optional<misfire_policy> parse_misfire_policy(std::string_view x) noexcept;

/// A schedule as defined in code or by an operator. Exactly one of `cron`
/// and `every` is set.
struct definition {
  std::string domain;
  /// Unique per domain.
  std::string name;
  std::string command_type;
  /// The command's data (a JSON object).
  json data = json::object();
  std::optional<std::string> reply_to;
  /// Unset: the default of 3.
  std::optional<int> max_attempts;
  std::optional<int> priority;
  /// A 5-field cron expression (model/cron.hpp), in `time_zone`.
  std::optional<std::string> cron;
  /// An IANA zone name for `cron`.
  std::string time_zone = "UTC";
  /// A fixed interval: slots at (time of the first add) + k * every.
  std::optional<std::chrono::milliseconds> every;
  misfire_policy misfire = misfire_policy::run_once;
};

/// A stored schedule.
struct schedule {
  uuid id;
  definition def;
  /// Interval schedules: the instant their slots count from.
  std::optional<timestamp> anchor;
  /// The earliest slot not fired yet.
  timestamp next_slot{};
  bool paused = false;
  timestamp created_at{};
  timestamp updated_at{};
  /// The last slot fired (none yet: unset) and its command.
  std::optional<timestamp> last_slot;
  std::optional<uuid> last_command_id;
  /// Slots that sent a command.
  int64_t fired_count = 0;
};

/// What `add` did.
struct add_result {
  schedule stored;
  /// A new schedule (else an existing one, updated or left as it was).
  bool created = false;
  /// Whether anything changed (always for a new one).
  bool changed = false;
  /// Whether the timing changed, so that next_slot was computed anew.
  bool timing_changed = false;
};

/// One slot handled by `fire_due`: sent, found sent before, or (a
/// misfire under `skip`) the missed slots passed over, `slot` then being
/// the next slot.
struct fired_slot {
  uuid schedule_id;
  std::string name;
  /// The slot (the newest missed one under run_once).
  timestamp slot{};
  /// Derived from (schedule id, slot); nil for a skipped misfire.
  uuid command_id;
  /// The command existed already (fired before): nothing was sent.
  bool already_sent = false;
  /// Missed slots passed over without a command before this one (misfire).
  int64_t missed = 0;
  /// Server time of the firing minus the slot.
  std::chrono::microseconds lateness{0};
  /// The slot sent a command now.
  bool sent() const noexcept {
    return !command_id.is_nil() && !already_sent;
  }
};

/// What `fire_due` did.
struct fire_result {
  std::vector<fired_slot> slots;
  /// Schedules whose timing could not be evaluated any more (e.g. a zone
  /// the system's tzdata no longer knows): paused, with the reason.
  std::vector<std::pair<std::string, std::string>> broken;
  /// Schedules claimed (at most the limit): when equal to the limit, more
  /// may be due.
  int claimed = 0;
};

/// Validates `d` without the database: domain and reply_to as queue names,
/// a command type, data a JSON object, exactly one of cron and every, the
/// expression and the zone. Throws `cron_error` or `db::invalid_argument`.
schedule_timing validate(const definition& d);

/// Creates the schedule, or updates the one of that domain and name
/// (upsert): the same definition again changes nothing (idempotent, so
/// applications may define their schedules at every start); next_slot is
/// computed anew only when the timing (cron, zone, interval) changed. A new
/// schedule's first slot is the first one after now (server clock). Creates
/// the domain's queue and the reply queue when missing (unless a
/// transaction is open on `conn`: then the first firing creates them).
/// Throws like `validate`, and `db::error`.
add_result add(db::connection& conn, const definition& d);

/// Returns the schedule, if it exists.
std::optional<schedule> get(db::connection& conn, const std::string& domain,
                            const std::string& name);

/// Returns the schedules of `domain` (all domains when unset), by domain
/// and name.
std::vector<schedule> list(db::connection& conn,
                           const std::optional<std::string>& domain);

/// Pauses the schedule (no slot fires while paused); false when unknown.
bool pause(db::connection& conn, const std::string& domain,
           const std::string& name);

/// Resumes it: slots missed meanwhile follow its misfire policy; false when
/// unknown.
bool resume(db::connection& conn, const std::string& domain,
            const std::string& name);

/// Removes it (its commands stay); false when unknown.
bool remove(db::connection& conn, const std::string& domain,
            const std::string& name);

/// Sends the schedule's command now, with a new random command id (not a
/// slot: next_slot and the counts stay). Throws `command_bus_error` when
/// the schedule does not exist.
send_result trigger(db::connection& conn, const std::string& domain,
                    const std::string& name);

/// How late a slot may be before it counts as missed (besides the slot
/// after it being due too): slots late by less (a stalled or restarting
/// worker) are all fired, in order.
inline constexpr std::chrono::milliseconds default_misfire_grace{10000};

/// Fires the due slots of `domain` in ONE transaction of its own on `conn`
/// (none may be open): claims at most `limit` schedules with next_slot <=
/// now that are not paused (FOR UPDATE SKIP LOCKED: concurrent callers
/// take other schedules), sends the command of each due slot through the
/// send statement (command id and correlation id derived from the
/// schedule's id and the slot; a command that exists already is not sent
/// again) and advances next_slot. A schedule whose next slot is missed (the
/// slot after it is due too, and it is `misfire_grace` or more late)
/// follows its misfire policy; one late by less catches up, every due slot
/// in order. Commits or throws (`db::error`): then nothing of it happened.
fire_result
fire_due(db::connection& conn, const std::string& domain, int limit = 100,
         std::chrono::milliseconds misfire_grace = default_misfire_grace);

/// Returns how long until the earliest next slot of `domain`'s unpaused
/// schedules by the server's clock (negative when due), unset when none.
std::optional<std::chrono::microseconds>
until_next_slot(db::connection& conn, const std::string& domain);

} // namespace cmdbus::schedules
