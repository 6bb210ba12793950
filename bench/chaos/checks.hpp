#pragma once

// The verdict of a chaos scenario: what became of every command the
// harness sent, read from the database after the workers stopped, and the
// pass criteria.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/chaos/load.hpp"
#include "bench/chaos/monitor.hpp"
#include "bench/chaos/sender.hpp"
#include "cmdbus/db/connection.hpp"

namespace cmdbus::chaos {

/// One kill -9 of a handler node (the nodes scenario): the commands in
/// flight at that moment, and how long after it they were final.
struct node_kill {
  /// Index of its fault in scenario_report::faults.
  size_t fault = 0;
  /// The database's clock at the kill (timestamptz text).
  std::string db_time;
  /// The ids of the commands in flight then (uuid[] literal).
  std::string in_flight_ids;
  int64_t in_flight = 0;
  /// Of those, the ones read again after the kill whose attempt was still
  /// under way at the kill (their last event before it was RECEIVED, not a
  /// failure waiting for its retry): the killed node's, which their
  /// worker made visible again.
  int64_t read_again = 0;
  /// Of those, the ones not final at the end.
  int64_t read_again_not_final = 0;
  /// Seconds from the kill until the last (the median) of them was final.
  std::optional<double> last_final_seconds;
  std::optional<double> median_final_seconds;
};

/// Figures of one scenario.
struct scenario_report {
  std::string scenario;
  std::string domain;
  int workers = 0;
  /// Wall time of the whole scenario.
  double seconds = 0;
  /// How long sending took (longer than planned when sends had to wait).
  double send_seconds = 0;
  double planned_send_seconds = 0;
  /// From the end of sending until every command was final, or until the
  /// deadline when `settled` is false.
  double settle_seconds = 0;
  bool settled = false;

  // -- the load
  int64_t planned = 0;
  /// Commands known to be in the database (acknowledged, or found).
  int64_t sent = 0;
  /// Planned commands that never went through.
  int64_t unsent = 0;
  int64_t sent_in_batches = 0;
  int64_t sent_with_reply = 0;
  send_stats sending;

  // -- commands
  /// Sent commands in a final status (right or wrong).
  int64_t final_count = 0;
  /// Not final, with their message still in the command queue.
  int64_t not_final_queued = 0;
  /// Neither final nor with a message in the queue (or without a row).
  int64_t lost = 0;
  /// Final, but not in the status their behaviour leads to.
  int64_t wrongly_final = 0;
  /// Commands with more than one final audit row (COMPLETED, MOVED_TO_TSQ,
  /// BUSINESS_RULE_FAILED), and how many of them per event type.
  int64_t final_twice = 0;
  std::map<std::string, int64_t> final_twice_by_event;
  /// Commands per status.
  std::map<std::string, int64_t> statuses;

  // -- replies (commands with reply_to that are COMPLETED or FAILED)
  int64_t replies_expected = 0;
  int64_t replies_missing = 0;
  int64_t replies_duplicated = 0;
  /// "command_id xN" for each duplicated reply.
  std::vector<std::string> duplicate_replies;

  // -- batches
  int64_t batches = 0;
  int64_t batches_final = 0;
  int64_t batches_missing = 0;
  /// Counters that differ from a recount of the command rows.
  int64_t batch_counters_wrong = 0;
  /// Status that does not follow from the recount.
  int64_t batch_status_wrong = 0;
  /// Final batches whose callback delivery was not recorded as delivered.
  int64_t callbacks_missing = 0;
  /// Deliveries claimed more than once (callbacks possibly run twice).
  int64_t callbacks_repeated = 0;

  // -- effort
  /// Attempts of the final commands, and the runs they need without faults.
  int64_t attempts = 0;
  int64_t expected_runs = 0;
  /// Attempts spent on commands that are not final.
  int64_t attempts_not_final = 0;

  // -- processes (DemoOrder, bench/chaos/processes.hpp)
  std::string process_domain;
  int64_t processes_planned = 0;
  int64_t processes_started = 0;
  /// Starts given up (the database refused them until the deadline).
  int64_t processes_unstarted = 0;
  int64_t processes_found = 0;
  int64_t processes_missing = 0;
  /// Started twice (two rows for one order).
  int64_t processes_twice = 0;
  int64_t processes_not_final = 0;
  /// Final, but not in their status or not with exactly their steps.
  int64_t processes_wrong = 0;

  // -- a recurring schedule (the time scenario), one slot per second
  std::string schedule_domain;
  /// Slots from the first one fired to the last one fired.
  int64_t schedule_slots = 0;
  /// Slots among them without a command.
  int64_t schedule_missing = 0;
  /// Commands of the schedule's domain beyond one per slot (a slot fired
  /// twice under another id).
  int64_t schedule_extra = 0;
  /// The schedule's commands that are not COMPLETED.
  int64_t schedule_not_completed = 0;

  // -- the workers' health (/healthz)
  /// Whether the scenario's faults must make the workers say so (a
  /// PostgreSQL restart does), and whether one did while they lasted.
  bool health_must_degrade = false;
  bool health_degraded = false;
  /// Whether every worker said HEALTHY again after the load settled, and
  /// what each said last.
  bool health_recovered = false;
  std::vector<std::string> health_final;
  /// Per worker its answers in order, with the seconds since the start.
  std::vector<std::string> health_history;

  std::vector<fault_record> faults;
  // -- handler nodes (the nodes scenario)
  std::vector<node_kill> node_kills;
  /// Commands the workers made visible again when they lost a node, from
  /// their logs ("remote pool ... lost ...; N command(s) made visible
  /// again").
  int64_t released_on_node_loss = 0;
  /// The workers' visibility timeout: a lost node's commands final only
  /// after it were not released promptly.
  double visibility_timeout_seconds = 0;

  clock::time_point started;
  std::vector<std::string> worker_problems;
  /// A few command ids per problem, for a closer look.
  std::vector<std::string> examples;
  /// The scenario's log files (workers, proxy, scripts/pg).
  std::vector<std::string> logs;

  /// One line per failed pass criterion; empty when the scenario passed.
  std::vector<std::string> failures() const;
};

/// Reads the state of the plan's commands, replies and batches on `conn`
/// and fills in the command, reply, batch and effort figures of `r`.
void check_outcome(db::connection& conn, const load_plan& plan,
                   scenario_report& r);

/// Fills in the schedule figures of `r` for the one interval schedule of
/// `r.schedule_domain`: every slot from its first fired one to its last one
/// must have exactly one command (the id derived from the slot), and the
/// domain no other command.
void check_schedule(db::connection& conn, scenario_report& r);

/// The moment of a node kill on the database's clock and the commands of
/// `domains` in flight then (IN_PROGRESS).
node_kill in_flight_now(db::connection& conn,
                        const std::vector<std::string>& domains);

/// Fills in, for every kill of `r.node_kills`, which of its in-flight
/// commands were read again after it and how long after it they were final;
/// and `r.released_on_node_loss` from the workers' `logs`.
void check_node_kills(db::connection& conn,
                      const std::vector<std::string>& domains,
                      const std::vector<std::string>& logs,
                      scenario_report& r);

/// Returns how many of the domain's commands are not final plus how many
/// final batches still wait for their callback delivery (0 when the
/// scenario has settled).
int64_t unsettled(db::connection& conn, const std::string& domain);

} // namespace cmdbus::chaos
