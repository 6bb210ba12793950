// `cmdbus show`: one command with its payload, result, next attempt and
// audit trail.

#include <cmath>
#include <iostream>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/output.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/rows.hpp"
#include "cmdbus/model/wire.hpp"

namespace cmdbus::cli {

namespace {

const command_spec show_command{
  R"(usage: cmdbus show DOMAIN COMMAND_ID [--dsn DSN] [--json]

Shows a command: its metadata, its payload, the last error or the result,
when a waiting retry is due, and its audit trail (ordered by time, then
audit id).

  payload     the `data` of the command's message: from the queue table
              while the message is there (pending, running, waiting for a
              retry), else from the queue's archive (the troubleshooting
              queue, a failed or canceled command); a completed command's
              message is deleted, so its payload is gone unless an earlier
              message of it was archived (e.g. before a retry out of the
              troubleshooting queue)
  result      handler results are not stored: a completed command's result
              is shown only when it was sent to reply_to and the reply is
              still in that queue or its archive
  priority    the priority the command was sent with (its message's
              "priority" member; `-` / null without one)
  due at      for a delayed command that is not due yet (PENDING, its
              message never read and invisible): its not-before time, when
              workers may first read it
  next attempt  for a PENDING or IN_PROGRESS command whose message was read
              before and is invisible: when it becomes visible again (a
              retry after a transient failure, or the end of a running
              attempt's lease)
)",
  {dsn_option,
   dsn_file_option,
   {"--json", "",
    "print {\"command\": {...}, \"payload\": ..., \"payload_source\": "
    "\"queue\" | \"archive\" | null, \"due_at\": ... | null, "
    "\"priority\": N | null, "
    "\"next_attempt_at\": ... | null, "
    "\"result\": ... | null, \"result_source\": \"reply_queue\" | "
    "\"reply_archive\" | null, \"audit\": [...]}"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error, 2 the command does not exist, 3 database
unavailable.
)"};

std::string opt(const std::optional<std::string>& x) {
  return x ? *x : "";
}

std::string opt(const std::optional<uuid>& x) {
  return x ? x->to_string() : "";
}

std::string archive_table(const std::string& queue) {
  return "a_" + db::queue_table(queue).substr(2);
}

// A JSON column as a value; nullopt for NULL or a value beyond our limits.
std::optional<json> json_at(const db::result& r, int row, int col) {
  try {
    return db::opt_json_at(r, row, col);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

struct message_info {
  std::optional<json> payload;
  /// "queue" or "archive".
  std::optional<std::string> source;
  std::optional<timestamp> next_attempt_at;
  double next_attempt_in_sec = 0;
  /// A delayed command not due yet: its not-before time.
  std::optional<timestamp> due_at;
  double due_in_sec = 0;
  /// The message's "priority" member, when it has one.
  std::optional<json> priority;
};

// The command's message: a primary-key probe of the queue table, then of
// the archive; then the newest archived message of the command (a scan of
// the archive rows archived since the command was created, through the
// archived_at index).
message_info find_message(db::connection& conn, const command_metadata& m) {
  message_info info;
  auto queue = db::command_queue(m.domain);
  if (!db::queue_name_problem(queue).empty() || !db::queue_exists(conn, queue))
    return info;
  if (m.msg_id) {
    auto r = conn.query("SELECT message -> 'data', vt, vt > now(),"
                        " EXTRACT(EPOCH FROM vt - now()), read_ct, message -> 'priority'"
                        " FROM pgmq."
                          + db::queue_table(queue) + " WHERE msg_id = $1",
                        *m.msg_id);
    if (r.rows() > 0) {
      info.payload = json_at(r, 0, 0);
      info.source = "queue";
      info.priority = json_at(r, 0, 5);
      if ((m.status == command_status::pending
           || m.status == command_status::in_progress)
          && r.boolean(0, 2)) {
        // Never read: a delayed command waiting for its not-before time.
        bool scheduled = m.status == command_status::pending
                         && r.int64(0, 4) == 0;
        auto at = db::time_at(r, 0, 1);
        auto in = std::stod(std::string{r.text(0, 3)});
        if (scheduled) {
          info.due_at = at;
          info.due_in_sec = in;
        } else {
          info.next_attempt_at = at;
          info.next_attempt_in_sec = in;
        }
      }
      return info;
    }
    r = conn.query("SELECT message -> 'data', message -> 'priority' FROM pgmq."
                     + archive_table(queue) + " WHERE msg_id = $1",
                   *m.msg_id);
    if (r.rows() > 0) {
      info.payload = json_at(r, 0, 0);
      info.source = "archive";
      info.priority = json_at(r, 0, 1);
      return info;
    }
  }
  auto r = conn.query("SELECT message -> 'data', message -> 'priority' FROM "
                      "pgmq."
                        + archive_table(queue)
                        + " WHERE archived_at >= $1::timestamptz"
                          " AND message ->> 'command_id' = $2"
                          " ORDER BY archived_at DESC, msg_id DESC LIMIT 1",
                      format_timestamp(m.created_at), m.command_id.to_string());
  if (r.rows() > 0) {
    info.payload = json_at(r, 0, 0);
    info.source = "archive";
    info.priority = json_at(r, 0, 1);
  }
  return info;
}

struct result_info {
  std::optional<json> result;
  /// "reply_queue" or "reply_archive".
  std::optional<std::string> source;
  /// Why there is no result, for the text output.
  std::string note;
};

// The reply of a completed command: a scan of the reply queue (its backlog)
// and of the archive rows archived since the command completed (the
// archived_at index), matching the command id.
result_info find_result(db::connection& conn, const command_metadata& m) {
  result_info info;
  if (m.status != command_status::completed) {
    info.note = "-";
    return info;
  }
  if (!m.reply_to) {
    info.note = "not stored (handler results are kept only in a reply, and "
                "the command had no reply_to)";
    return info;
  }
  if (!db::queue_name_problem(*m.reply_to).empty()) {
    info.note = "not stored (reply_to is not a valid queue name)";
    return info;
  }
  auto& queue = *m.reply_to;
  if (!db::queue_name_problem(queue).empty()
      || !db::queue_exists(conn, queue)) {
    info.note = "not stored (reply queue " + queue + " does not exist)";
    return info;
  }
  auto id = m.command_id.to_string();
  auto take = [&](const db::result& r, const char* source) {
    for (int i = 0; i < r.rows(); ++i) {
      try {
        auto rep = wire::decode_reply(r.text(i, 0));
        info.result = rep.result;
        info.source = source;
        return true;
      } catch (const std::exception&) {
        // not a valid reply: look further
      }
    }
    return false;
  };
  if (take(conn.query("SELECT message::text FROM pgmq." + db::queue_table(queue)
                        + " WHERE message ->> 'command_id' = $1"
                          " ORDER BY msg_id DESC",
                      id),
           "reply_queue"))
    return info;
  if (take(conn.query("SELECT message::text FROM pgmq." + archive_table(queue)
                        + " WHERE archived_at >= $1::timestamptz"
                          " AND message ->> 'command_id' = $2"
                          " ORDER BY msg_id DESC",
                      format_timestamp(m.updated_at), id),
           "reply_archive"))
    return info;
  info.note = "not stored (no reply of this command left in " + queue
              + " or its archive; handler results are kept only in replies)";
  return info;
}

std::string seconds_text(double s) {
  return std::to_string(static_cast<int64_t>(std::ceil(s))) + "s";
}

} // namespace

int run_show(const std::vector<std::string>& argv) {
  args a{argv, show_command};
  if (a.help())
    return print_help(show_command);
  a.expect_positional(2, "DOMAIN and COMMAND_ID");
  auto domain = domain_arg(a);
  auto id = parse_uuid_arg("COMMAND_ID", a.positional()[1]);
  db::pool pool{pool_options_for(a, 1)};
  command_bus bus{pool};
  auto m = bus.get_command(domain, id);
  if (!m)
    throw command_not_found_error{domain, id};
  auto trail = bus.get_audit_trail(id, domain);
  message_info msg;
  result_info res;
  {
    auto conn = pool.acquire();
    msg = find_message(*conn, *m);
    res = find_result(*conn, *m);
  }
  if (a.flag("--json")) {
    json_out out;
    out.begin_object().key("command");
    write_command(out, *m);
    out.field("payload", msg.payload)
      .field("payload_source", msg.source)
      .field("due_at", msg.due_at)
      .field("priority", msg.priority)
      .field("next_attempt_at", msg.next_attempt_at)
      .field("result", res.result)
      .field("result_source", res.source);
    out.key("audit").begin_array();
    for (auto& ev : trail)
      write_audit_event(out, ev);
    out.end_array().end_object();
    out.print(std::cout);
    return exit_ok;
  }
  std::string payload = "not kept (the message was deleted when the command "
                        "completed)";
  if (msg.source)
    payload = (msg.payload ? msg.payload->text() : "null") + "  (from the "
              + *msg.source + ")";
  else if (m->status != command_status::completed)
    payload = "not found in the queue or its archive";
  std::string next = "-";
  if (msg.next_attempt_at)
    next = "due at " + format_timestamp(*msg.next_attempt_at) + " (in "
           + seconds_text(msg.next_attempt_in_sec) + ")";
  std::string due = "-";
  if (msg.due_at)
    due = format_timestamp(*msg.due_at) + " (in " + seconds_text(msg.due_in_sec)
          + "; delayed, not read by any "
            "worker before then)";
  std::string result = res.note;
  if (res.source)
    result = res.result->text() + "  (from the reply in "
             + (*res.source == "reply_queue" ? "the queue " : "the archive of ")
             + *m->reply_to + ")";
  print_fields(
    std::cout,
    {
      {"domain", m->domain},
      {"command_id", m->command_id.to_string()},
      {"command_type", m->command_type},
      {"status", std::string{to_string(m->status)}},
      {"attempts",
       std::to_string(m->attempts) + " of " + std::to_string(m->max_attempts)},
      {"due_at", due},
      {"priority", msg.priority ? msg.priority->text() : "-"},
      {"next_attempt", next},
      {"msg_id", m->msg_id ? std::to_string(*m->msg_id) : ""},
      {"correlation_id", opt(m->correlation_id)},
      {"reply_to", opt(m->reply_to)},
      {"batch_id", opt(m->batch_id)},
      {"last_error", m->last_error_type
                       ? opt(m->last_error_type) + " " + opt(m->last_error_code)
                           + ": " + opt(m->last_error_msg)
                       : ""},
      {"result", result},
      {"payload", payload},
      {"created_at", format_timestamp(m->created_at)},
      {"updated_at", format_timestamp(m->updated_at)},
    });
  std::cout << "\naudit trail:\n";
  std::vector<std::vector<std::string>> rows;
  for (auto& ev : trail)
    rows.push_back({format_timestamp(ev.ts), ev.event_type,
                    ev.details ? ev.details->text() : ""});
  print_table(std::cout, {"ts", "event", "details"}, rows);
  return exit_ok;
}

} // namespace cmdbus::cli
