// `cmdbus replies` (read or peek at a reply queue) and `cmdbus wait` (until
// a command is finished).

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

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
#include "cmdbus/db/text_format.hpp"
#include "cmdbus/db/transaction.hpp"
#include "cmdbus/model/wire.hpp"

namespace cmdbus::cli {

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// -- polling -----------------------------------------------------------------

/// Delays between polls: 50 ms, growing by half each time, at most 1 s.
class poll_backoff {
public:
  /// Sleeps the next delay, but not beyond `until`.
  void sleep_until_next(steady_clock::time_point until) {
    auto now = steady_clock::now();
    auto d = std::min<steady_clock::duration>(delay_, until - now);
    if (d > steady_clock::duration::zero())
      std::this_thread::sleep_for(d);
    delay_ = std::min(milliseconds{1000}, delay_ * 3 / 2);
  }

private:
  milliseconds delay_{50};
};

// -- replies -----------------------------------------------------------------

const command_spec replies_command{
  R"(usage: cmdbus replies QUEUE [--peek] [--limit N] [--wait DUR] [--dsn DSN]
                      [--json]

Reads a reply queue and prints its replies decoded: msg_id, enqueued_at,
command_id, correlation_id, outcome (SUCCESS, FAILED, CANCELED) and the
result (SUCCESS), error code, message and details (FAILED) or reason
(CANCELED).

Without --peek the replies printed are consumed: read and archived in one
transaction, so they leave QUEUE and are kept in the archive table
pgmq.a_QUEUE (nothing is consumed when the transaction fails). Only
visible messages are read (not those another reader holds).

With --peek nothing changes: the oldest messages of the queue table are
shown, visible or not, without touching their visibility.

A message that is not a valid reply is shown raw with a warning on stderr;
it is archived like the others when reading, left alone with --peek.
)",
  {{"--peek", "", "show without consuming"},
   {"--limit", "N", "at most N messages (default 100)"},
   {"--wait", "DUR",
    "when the queue has no message, wait up to DUR for one (polling with a "
    "growing delay, at most 1 s); default: do not wait"},
   {"--json", "",
    "print a JSON array of {msg_id, enqueued_at, read_ct, valid, command_id, "
    "correlation_id, outcome, result, error_code, error_message, reason} (an "
    "invalid message: {msg_id, enqueued_at, read_ct, valid: false, error, "
    "raw})"},
   dsn_option,
   dsn_file_option,
   help_option},
  R"(
Exit codes: 0 ok (also when there was nothing to read), 1 usage error,
2 the queue does not exist, 3 database unavailable.
)"};

struct reply_row {
  int64_t msg_id = 0;
  int64_t read_ct = 0;
  timestamp enqueued_at{};
  std::string raw;
  std::optional<reply> decoded;
  std::string problem;
};

std::vector<reply_row> to_reply_rows(const db::result& r) {
  std::vector<reply_row> out;
  for (int i = 0; i < r.rows(); ++i) {
    reply_row row;
    row.msg_id = r.int64(i, 0);
    row.read_ct = r.int64(i, 1);
    row.enqueued_at = db::time_at(r, i, 2);
    row.raw = std::string{r.text(i, 3)};
    try {
      row.decoded = wire::decode_reply(row.raw);
    } catch (const std::exception& e) {
      row.problem = e.what();
    }
    out.push_back(std::move(row));
  }
  return out;
}

// Reads (with --peek: selects) up to `limit` messages; consumed ones are
// archived in the same transaction.
std::vector<reply_row> take_replies(db::connection& conn,
                                    const std::string& queue, int limit,
                                    bool peek) {
  if (peek)
    return to_reply_rows(
      conn.query("SELECT msg_id, read_ct, enqueued_at, message::text FROM pgmq."
                   + db::queue_table(queue) + " ORDER BY msg_id LIMIT $1",
                 limit));
  return db::in_transaction(conn, [&](db::connection& tx) {
    auto rows = to_reply_rows(tx.query(
      "SELECT msg_id, read_ct, enqueued_at, message::text FROM pgmq.read($1, "
      "30, $2) ORDER BY msg_id",
      queue, limit));
    std::vector<int64_t> ids;
    for (auto& row : rows)
      ids.push_back(row.msg_id);
    if (!ids.empty())
      tx.query("SELECT pgmq.archive($1, $2::bigint[])", queue,
               db::array_literal(ids));
    return rows;
  });
}

std::string detail(const reply& x) {
  switch (x.outcome) {
    case reply_outcome::success: return x.result.text();
    case reply_outcome::failed:
      return x.error_code.value_or("") + ": " + x.error_message.value_or("")
             + " " + x.result.text();
    case reply_outcome::canceled: return x.reason.value_or("");
  }
  return "";
}

void print_replies_json(const std::vector<reply_row>& rows) {
  json_out out;
  out.begin_array();
  for (auto& row : rows) {
    out.begin_object()
      .field("msg_id", row.msg_id)
      .field("enqueued_at", row.enqueued_at)
      .field("read_ct", row.read_ct)
      .field("valid", row.decoded.has_value());
    if (auto& x = row.decoded) {
      out.field("command_id", x->command_id)
        .field("correlation_id", x->correlation_id)
        .field("outcome", to_string(x->outcome))
        .field("result", x->result)
        .field("error_code", x->error_code)
        .field("error_message", x->error_message)
        .field("reason", x->reason);
    } else {
      out.field("error", row.problem).key("raw");
      try {
        out.value(json::parse(row.raw));
      } catch (const std::exception&) {
        out.value(row.raw);
      }
    }
    out.end_object();
  }
  out.end_array();
  out.print(std::cout);
}

} // namespace

int run_replies(const std::vector<std::string>& argv) {
  args a{argv, replies_command};
  if (a.help())
    return print_help(replies_command);
  a.expect_positional(1, "QUEUE");
  auto queue = a.positional()[0];
  db::validate_queue_name(queue);
  auto limit = a.int_option("--limit", 1).value_or(100);
  auto wait = a.duration_option("--wait").value_or(milliseconds{0});
  bool peek = a.flag("--peek");
  db::pool pool{pool_options_for(a, 1)};
  auto conn = pool.acquire();
  if (!db::queue_exists(*conn, queue))
    throw not_found{"queue " + queue + " does not exist"};
  auto until = steady_clock::now() + wait;
  poll_backoff backoff;
  auto rows = take_replies(*conn, queue, limit, peek);
  while (rows.empty() && steady_clock::now() < until) {
    backoff.sleep_until_next(until);
    rows = take_replies(*conn, queue, limit, peek);
  }
  for (auto& row : rows)
    if (!row.decoded)
      std::cerr << "cmdbus: warning: message " << row.msg_id << " of " << queue
                << " is not a valid reply (" << row.problem << "); "
                << (peek ? "left in the queue" : "archived") << '\n';
  if (a.flag("--json")) {
    print_replies_json(rows);
    return exit_ok;
  }
  std::vector<std::vector<std::string>> table;
  for (auto& row : rows) {
    if (auto& x = row.decoded)
      table.push_back({std::to_string(row.msg_id),
                       format_timestamp(row.enqueued_at),
                       x->command_id.to_string(),
                       x->correlation_id ? x->correlation_id->to_string() : "",
                       std::string{to_string(x->outcome)}, detail(*x)});
    else
      table.push_back({std::to_string(row.msg_id),
                       format_timestamp(row.enqueued_at), "", "", "INVALID",
                       row.raw});
  }
  print_table(std::cout,
              {"msg_id", "enqueued_at", "command_id", "correlation_id",
               "outcome", "result / error / reason"},
              table);
  if (rows.empty())
    std::cout << "\nno replies waiting in " << queue << '\n';
  else if (peek)
    std::cout << '\n' << rows.size() << " message(s) shown, nothing consumed\n";
  else
    std::cout << '\n'
              << rows.size() << " message(s) consumed (archived in pgmq.a_"
              << queue << ")\n";
  return exit_ok;
}

// -- wait --------------------------------------------------------------------

namespace {

const command_spec wait_command{
  R"(usage: cmdbus wait DOMAIN COMMAND_ID [--timeout DUR] [--dsn DSN] [--json]

Blocks until the command's status is final and prints it (--json: the
command as `cmdbus show --json` prints its "command"). Polls the command row
with a growing delay (50 ms up to 1 s).
)",
  {{"--timeout", "DUR",
    "give up after DUR (e.g. 30s, 5m); default: wait forever"},
   {"--json", "", "print the command as JSON"},
   dsn_option,
   dsn_file_option,
   help_option},
  R"(
Exit codes:
  0  the command is COMPLETED
  1  usage error
  2  the command does not exist
  3  database unavailable (also when the connection breaks while waiting)
  5  the command is FAILED, CANCELED or IN_TROUBLESHOOTING_QUEUE
  7  --timeout passed first (the command is still PENDING or IN_PROGRESS)
)"};

bool finished(command_status s) {
  return is_terminal(s) || s == command_status::in_troubleshooting_queue;
}

} // namespace

int run_wait(const std::vector<std::string>& argv) {
  args a{argv, wait_command};
  if (a.help())
    return print_help(wait_command);
  a.expect_positional(2, "DOMAIN and COMMAND_ID");
  auto domain = domain_arg(a);
  auto id = parse_uuid_arg("COMMAND_ID", a.positional()[1]);
  auto timeout = a.duration_option("--timeout");
  auto until = timeout ? steady_clock::now() + *timeout
                       : steady_clock::time_point::max();
  db::pool pool{pool_options_for(a, 1)};
  command_bus bus{pool};
  poll_backoff backoff;
  for (;;) {
    auto m = bus.get_command(domain, id);
    if (!m)
      throw command_not_found_error{domain, id};
    if (finished(m->status)) {
      if (a.flag("--json")) {
        json_out out;
        write_command(out, *m);
        out.print(std::cout);
      } else {
        std::cout << to_string(m->status);
        if (m->status != command_status::completed && m->last_error_type)
          std::cout << " (" << *m->last_error_type << " "
                    << m->last_error_code.value_or("") << ": "
                    << m->last_error_msg.value_or("") << ")";
        std::cout << '\n';
      }
      return m->status == command_status::completed ? exit_ok : exit_incomplete;
    }
    if (steady_clock::now() >= until)
      throw exit_with{exit_timeout, "timed out: command " + id.to_string()
                                      + " is still "
                                      + std::string{to_string(m->status)}};
    backoff.sleep_until_next(until);
  }
}

} // namespace cmdbus::cli
