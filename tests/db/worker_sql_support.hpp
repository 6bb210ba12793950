#pragma once

// Shared fixtures of the worker SQL tests (tests/db/worker_sql_*_test.cpp): a
// pool, bus and fresh domain per test, wrappers of the functions under test,
// and readers of the rows they write.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "tests/db/audit_support.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/rows.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::worker_sql_test {

using namespace std::chrono_literals;

using opt_str = std::optional<std::string>;

// -- setup -------------------------------------------------------------------

/// A pool, a bus on it, a connection for the calls under test and checks,
/// and a fresh domain with its command queue.
struct env {
  env()
    : pool(test::pool_options(2)), bus(pool), conn(test::connect()),
      domain(test::unique_name("w")), queue(domain + "__commands") {
    bus.ensure_queue(queue);
  }
  db::pool pool;
  command_bus bus;
  db::connection conn;
  std::string domain;
  std::string queue;
};

/// A request for a DebitAccount command of `domain` with a correlation id
/// and optionally a reply queue and its own attempt limit.
inline send_request make_req(const std::string& domain,
                             const opt_str& reply_to = std::nullopt,
                             std::optional<int> max_attempts = std::nullopt) {
  auto req = test::make_req(domain, "DebitAccount", R"({"amount":100})");
  req.correlation_id = uuid::random();
  req.reply_to = reply_to;
  req.max_attempts = max_attempts;
  return req;
}

/// Sends one command; returns (command_id, msg_id).
inline std::pair<std::string, int64_t>
send(env& e, const opt_str& reply_to = {},
     std::optional<int> max_attempts = {}) {
  auto res = e.bus.send(make_req(e.domain, reply_to, max_attempts));
  return {res.command_id.to_string(), res.msg_id};
}

/// Creates a batch of `n` commands; returns the batch id and the commands
/// (command_id, msg_id) in order.
inline std::pair<std::string, std::vector<std::pair<std::string, int64_t>>>
make_batch(env& e, int n) {
  std::vector<batch_command> cmds;
  for (int i = 0; i < n; ++i) {
    batch_command c;
    c.command_type = "DebitAccount";
    c.command_id = uuid::random();
    c.data = json::parse(R"({"amount":1})");
    cmds.push_back(c);
  }
  auto res = e.bus.create_batch(e.domain, cmds);
  std::vector<std::pair<std::string, int64_t>> out;
  for (auto& r : res.command_results)
    out.emplace_back(r.command_id.to_string(), r.msg_id);
  return {res.batch_id.to_string(), out};
}

/// Sends a raw message to `queue`; returns its msg_id.
inline int64_t send_raw(db::connection& c, const std::string& queue,
                        const std::string& message) {
  return c.query("SELECT pgmq.send($1, $2::jsonb, 0)", queue, message)
    .int64(0, 0);
}

// -- calls under test --------------------------------------------------------

struct recv_row {
  int64_t msg_id = 0;
  int64_t read_ct = 0;
  std::string message;
  std::string outcome;
  opt_str command_id;
  opt_str command_type;
  opt_str status;
  opt_str attempts;
  opt_str max_attempts;
  opt_str correlation_id;
  opt_str reply_to;
  opt_str batch_id;
};

inline std::vector<recv_row>
receive(db::connection& c, const std::string& domain, const std::string& queue,
        int vt = 30, int qty = 10) {
  auto res = c.query(
    "SELECT msg_id, read_ct, message::text, outcome,"
    " command_id, command_type, status, attempts,"
    " max_attempts, correlation_id, reply_to, batch_id"
    " FROM commandbus.cmdbus_receive($1, $2, $3::int, $4::int)",
    domain, queue, vt, qty);
  std::vector<recv_row> out;
  for (int r = 0; r < res.rows(); ++r) {
    recv_row x;
    x.msg_id = res.int64(r, 0);
    x.read_ct = res.int64(r, 1);
    x.message = std::string{res.text(r, 2)};
    x.outcome = std::string{res.text(r, 3)};
    x.command_id = res.opt_text(r, 4);
    x.command_type = res.opt_text(r, 5);
    x.status = res.opt_text(r, 6);
    x.attempts = res.opt_text(r, 7);
    x.max_attempts = res.opt_text(r, 8);
    x.correlation_id = res.opt_text(r, 9);
    x.reply_to = res.opt_text(r, 10);
    x.batch_id = res.opt_text(r, 11);
    out.push_back(std::move(x));
  }
  return out;
}

using completions = std::vector<std::pair<std::string, bool>>;

inline completions read_completions(const db::result& res) {
  completions out;
  for (int r = 0; r < res.rows(); ++r)
    out.emplace_back(std::string{res.text(r, 0)}, res.boolean(r, 1));
  return out;
}

struct done_item {
  done_item(int64_t msg_id_, std::string command_id_, bool has_result_ = false,
            opt_str reply_to_ = std::nullopt, opt_str reply_ = std::nullopt)
    : msg_id(msg_id_), command_id(std::move(command_id_)),
      has_result(has_result_), reply_to(std::move(reply_to_)),
      reply(std::move(reply_)) {
    // nop
  }
  int64_t msg_id;
  std::string command_id;
  bool has_result;
  opt_str reply_to;
  opt_str reply;
};

inline completions complete(db::connection& c, const std::string& domain,
                            const std::string& queue,
                            const std::vector<done_item>& items) {
  std::vector<int64_t> msg_ids;
  std::vector<std::string> ids, has_result;
  std::vector<opt_str> reply_tos, replies;
  for (auto& x : items) {
    msg_ids.push_back(x.msg_id);
    ids.push_back(x.command_id);
    has_result.push_back(x.has_result ? "t" : "f");
    reply_tos.push_back(x.reply_to);
    replies.push_back(x.reply);
  }
  return read_completions(
    c.query("SELECT batch_id, batch_complete FROM commandbus.cmdbus_complete("
            "$1, $2, $3::bigint[], $4::uuid[], $5::boolean[], $6::text[],"
            " $7::jsonb[])",
            domain, queue, db::array_literal(msg_ids), db::array_literal(ids),
            db::array_literal(has_result), db::array_literal(reply_tos),
            db::array_literal(replies)));
}

struct fail_item {
  fail_item() = default;
  fail_item(int64_t msg_id_, std::string command_id_)
    : msg_id(msg_id_), command_id(std::move(command_id_)) {
    // nop
  }
  int64_t msg_id = 0;
  std::string command_id;
  int attempt = 1;
  int max_attempts = 3;
  opt_str error_type;
  opt_str error_code = std::string{"E_CODE"};
  opt_str error_msg = std::string{"something broke"};
  opt_str error_details;
  opt_str reply_to;
  opt_str reply;
};

inline completions fail_final(db::connection& c, const std::string& domain,
                              const std::string& queue, const opt_str& kind,
                              const std::vector<fail_item>& items) {
  std::vector<int64_t> msg_ids, attempts, max_attempts;
  std::vector<std::string> ids;
  std::vector<opt_str> types, codes, msgs, details, reply_tos, replies;
  for (auto& x : items) {
    msg_ids.push_back(x.msg_id);
    ids.push_back(x.command_id);
    attempts.push_back(x.attempt);
    max_attempts.push_back(x.max_attempts);
    types.push_back(x.error_type);
    codes.push_back(x.error_code);
    msgs.push_back(x.error_msg);
    details.push_back(x.error_details);
    reply_tos.push_back(x.reply_to);
    replies.push_back(x.reply);
  }
  return read_completions(c.query(
    "SELECT batch_id, batch_complete FROM commandbus.cmdbus_fail_final("
    "$1, $2, $3, $4::bigint[], $5::uuid[], $6::int[], $7::int[], $8::text[],"
    " $9::text[], $10::text[], $11::jsonb[], $12::text[], $13::jsonb[])",
    domain, queue, kind, db::array_literal(msg_ids), db::array_literal(ids),
    db::array_literal(attempts), db::array_literal(max_attempts),
    db::array_literal(types), db::array_literal(codes), db::array_literal(msgs),
    db::array_literal(details), db::array_literal(reply_tos),
    db::array_literal(replies)));
}

struct transient_item {
  int64_t msg_id = 0;
  std::string command_id;
  int attempt = 1;
  int max_attempts = 3;
  std::string error_code = "TIMEOUT";
  std::string error_msg = "upstream timed out";
  int backoff = 10;
};

inline int64_t fail_transient(db::connection& c, const std::string& domain,
                              const std::string& queue,
                              const std::vector<transient_item>& items) {
  std::vector<int64_t> msg_ids, attempts, max_attempts, backoffs;
  std::vector<std::string> ids, codes, msgs;
  for (auto& x : items) {
    msg_ids.push_back(x.msg_id);
    ids.push_back(x.command_id);
    attempts.push_back(x.attempt);
    max_attempts.push_back(x.max_attempts);
    codes.push_back(x.error_code);
    msgs.push_back(x.error_msg);
    backoffs.push_back(x.backoff);
  }
  return c
    .query("SELECT commandbus.cmdbus_fail_transient($1, $2, $3::bigint[],"
           " $4::uuid[], $5::int[], $6::int[], $7::text[], $8::text[],"
           " $9::int[])",
           domain, queue, db::array_literal(msg_ids), db::array_literal(ids),
           db::array_literal(attempts), db::array_literal(max_attempts),
           db::array_literal(codes), db::array_literal(msgs),
           db::array_literal(backoffs))
    .int64(0, 0);
}

inline int64_t extend_visibility(db::connection& c, const std::string& queue,
                                 const std::vector<int64_t>& msg_ids,
                                 int seconds) {
  return c
    .query("SELECT commandbus.cmdbus_extend_visibility($1, $2::bigint[],"
           " $3::int)",
           queue, db::array_literal(msg_ids), seconds)
    .int64(0, 0);
}

// -- state checks (SQL) ------------------------------------------------------

struct command_row {
  std::string status;
  int64_t attempts = 0;
  opt_str last_error_type;
  opt_str last_error_code;
  opt_str last_error_msg;
  std::string updated_at;
};

inline command_row read_command(db::connection& c, const std::string& domain,
                                const std::string& id) {
  auto res = c.query("SELECT status, attempts, last_error_type,"
                     " last_error_code, last_error_msg, updated_at::text"
                     " FROM commandbus.command"
                     " WHERE domain = $1 AND command_id = $2::uuid",
                     domain, id);
  if (res.rows() != 1)
    throw std::runtime_error("command row not found");
  command_row row;
  row.status = std::string{res.text(0, 0)};
  row.attempts = res.int64(0, 1);
  row.last_error_type = res.opt_text(0, 2);
  row.last_error_code = res.opt_text(0, 3);
  row.last_error_msg = res.opt_text(0, 4);
  row.updated_at = std::string{res.text(0, 5)};
  return row;
}

inline void set_status(db::connection& c, const std::string& domain,
                       const std::string& id, const std::string& status) {
  c.query("UPDATE commandbus.command SET status = $3"
          " WHERE domain = $1 AND command_id = $2::uuid",
          domain, id, status);
}

using test::read_batch;

using audit_test::audit_events;
using audit_test::audit_row;
using audit_test::audit_trail;
using audit_test::count_events;
using audit_test::json_eq;

/// Details of the last audit row of `event_type` for `id`.
inline opt_str last_details(db::connection& c, const std::string& domain,
                            const std::string& id,
                            const std::string& event_type) {
  opt_str out;
  for (auto& row : audit_trail(c, domain, id))
    if (row.event_type == event_type)
      out = row.details;
  return out;
}

/// Whether the message is in the queue table / the archive table.
inline bool in_queue(db::connection& c, const std::string& queue,
                     int64_t msg_id) {
  db::validate_queue_name(queue);
  return c.query("SELECT count(*) FROM pgmq.q_" + queue + " WHERE msg_id = $1",
                 msg_id)
           .int64(0, 0)
         == 1;
}

inline bool in_archive(db::connection& c, const std::string& queue,
                       int64_t msg_id) {
  db::validate_queue_name(queue);
  return c.query("SELECT count(*) FROM pgmq.a_" + queue + " WHERE msg_id = $1",
                 msg_id)
           .int64(0, 0)
         == 1;
}

/// Messages of `queue` in msg_id order (the queue must exist).
inline std::vector<std::string> queue_messages(db::connection& c,
                                               const std::string& queue) {
  db::validate_queue_name(queue);
  auto res = c.exec("SELECT message::text FROM pgmq.q_" + queue
                    + " ORDER BY msg_id");
  std::vector<std::string> out;
  for (int r = 0; r < res.rows(); ++r)
    out.emplace_back(res.text(r, 0));
  return out;
}

inline bool queue_exists(db::connection& c, const std::string& queue) {
  return c.query("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1", queue)
           .int64(0, 0)
         > 0;
}

/// Collects notification channels until all of `want` arrived or 5 s passed.
inline std::set<std::string>
collect_channels(db::connection& listener, const std::set<std::string>& want) {
  std::set<std::string> got;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!std::includes(got.begin(), got.end(), want.begin(), want.end())) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    for (auto& ch : listener.wait_for_notifications(left))
      got.insert(ch);
  }
  return got;
}

/// Runs `fn`, expecting a db::error with SQLSTATE 22023 whose message
/// contains `text`.
template <class F>
::testing::AssertionResult raises_invalid(F&& fn, const std::string& text) {
  try {
    fn();
  } catch (const db::error& e) {
    if (e.sqlstate() != "22023")
      return ::testing::AssertionFailure()
             << "SQLSTATE " << e.sqlstate() << ": " << e.what();
    if (std::string{e.what()}.find(text) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message '" << e.what() << "' lacks '" << text << "'";
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no error raised";
}

inline const std::vector<std::string> terminal_statuses = {
  "COMPLETED", "CANCELED", "FAILED", "IN_TROUBLESHOOTING_QUEUE"};

} // namespace cmdbus::worker_sql_test
