#pragma once

// Operator statistics of the command bus per domain: commands by status,
// the domain's command queue, and what finished in the last minute and
// hour. Shared by `cmdbus stats` and the metrics endpoint.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus::db {

/// The statuses of a command in the order `domain_stats::commands` counts
/// them (the order of the `command_status` enumeration).
inline constexpr std::array<command_status, 6> all_command_statuses = {
  command_status::pending,   command_status::in_progress,
  command_status::completed, command_status::failed,
  command_status::canceled,  command_status::in_troubleshooting_queue,
};

/// The figures of one domain at one moment.
struct domain_stats {
  std::string domain;

  /// Commands per status, indexed like `all_command_statuses` (zeros
  /// included). The troubleshooting queue's size is the last entry.
  std::array<int64_t, 6> commands{};

  /// Whether `{domain}__commands` exists (the queue figures are 0 if not).
  bool queue_exists = false;
  /// Messages in the command queue, visible or not.
  int64_t queue_depth = 0;
  /// Messages a worker may read now (vt <= now).
  int64_t visible = 0;
  /// Messages of delayed commands that are not due yet: never read, and
  /// invisible until their not-before time (read_ct = 0, vt > now).
  int64_t scheduled = 0;
  /// Messages held by a worker or waiting for a retry (read before and
  /// vt > now).
  int64_t invisible = 0;
  /// Seconds since the oldest visible message was enqueued (a delayed
  /// command's too: its send, not its not-before time); unset when no
  /// message is visible. A growing value means the workers fall behind.
  std::optional<double> oldest_visible_age_sec;

  /// Commands whose row is COMPLETED now and whose last update (the
  /// completion) was within the last minute / hour.
  int64_t completed_last_minute = 0;
  int64_t completed_last_hour = 0;
  /// Commands whose row is FAILED (a business-rule failure) or
  /// IN_TROUBLESHOOTING_QUEUE (a permanent failure or exhausted retries)
  /// now and whose last update was within the last minute / hour.
  int64_t failed_last_minute = 0;
  int64_t failed_last_hour = 0;

  /// Returns the count of `s`.
  int64_t count(command_status s) const noexcept {
    return commands[static_cast<size_t>(s)];
  }

  /// Returns the troubleshooting queue's size.
  int64_t tsq() const noexcept {
    return count(command_status::in_troubleshooting_queue);
  }
};

/// The figures of a domain's command queue and troubleshooting queue that
/// a metrics scrape reads (collect_queue_figures).
struct queue_figures {
  std::string domain;
  /// `{domain}__commands`.
  std::string queue;
  /// Whether the queue exists (its figures are 0 if not).
  bool queue_exists = false;
  int64_t depth = 0;
  int64_t visible = 0;
  /// Delayed commands not due yet (as `domain_stats::scheduled`).
  int64_t scheduled = 0;
  /// Unset when no message is visible (as
  /// `domain_stats::oldest_visible_age_sec`).
  std::optional<double> oldest_visible_age_sec;
  /// Commands IN_TROUBLESHOOTING_QUEUE.
  int64_t tsq = 0;
};

/// Returns the queue figures of `domains` (each validated), in their order,
/// with one statement: a pass over each queue table (its size is the
/// backlog) and an index scan of the troubleshooting queue's rows. A queue
/// that does not exist costs one more statement to find out which.
std::vector<queue_figures>
collect_queue_figures(connection& conn,
                      const std::vector<std::string>& domains);

/// How many processes of a (domain, process type) are in a status that is
/// not final (PENDING, IN_PROGRESS, WAITING, WAITING_FOR_TSQ,
/// COMPENSATING).
struct process_figures {
  std::string domain;
  std::string process_type;
  std::string status;
  int64_t count = 0;
};

/// Returns the live processes of `domains` by (domain, type, status),
/// sorted, with one statement over the (domain, status) index: the cost
/// follows the processes in flight, never the finished ones.
std::vector<process_figures>
collect_process_figures(connection& conn,
                        const std::vector<std::string>& domains);

/// Returns the domains that have commands or a `{domain}__commands` queue,
/// sorted.
std::vector<std::string> stats_domains(connection& conn);

/// Returns the figures of `domains` (each validated), in their order. An
/// unknown domain gets zeros.
std::vector<domain_stats>
collect_stats(connection& conn, const std::vector<std::string>& domains);

/// Returns the figures of every domain `stats_domains` lists.
std::vector<domain_stats> collect_stats(connection& conn);

} // namespace cmdbus::db
