#pragma once

// The fixture of the troubleshooting-queue tests (tests/db/tsq_*_test.cpp):
// commands sent with the C++ bus and put into the TSQ the way the reference
// library's worker does it (pgmq.read, sp_receive_command, pgmq.archive,
// sp_finish_command to IN_TROUBLESHOOTING_QUEUE), each test in its own
// domain.

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/troubleshooting.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/rows.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::test {

/// How a command reaches the TSQ.
struct park_spec {
  std::string type = "DebitAccount";
  std::string data = R"({"amount":100})";
  std::optional<std::string> reply_to;
  std::optional<uuid> correlation_id;
  /// A permanent failure with this code; with `exhausted`, a transient one
  /// on every attempt (max_attempts 2: one FAILED, then MOVED_TO_TSQ).
  std::string error_code = "BAD_INPUT";
  bool exhausted = false;
};

class TsqTest : public ::testing::Test {
protected:
  TsqTest()
    : env(4), conn(env.conn), tsq(env.pool), d(unique_name("tsq")),
      q(db::command_queue(d)), replies(unique_name("tsqr")) {
    env.bus.ensure_queue(q);
    env.bus.ensure_queue(replies);
  }

  /// Sends a command of domain `domain` (default: the test's) and moves it
  /// to the TSQ through the reference procedures.
  uuid park(const park_spec& spec = {}, std::string domain = {}) {
    if (domain.empty())
      domain = d;
    auto req = make_req(domain, spec.type, spec.data);
    req.reply_to = spec.reply_to;
    req.correlation_id = spec.correlation_id;
    req.max_attempts = spec.exhausted ? 2 : 3;
    env.bus.send(req);
    to_tsq(domain, req.command_id, spec, std::nullopt);
    return req.command_id;
  }

  /// Moves the sent command `id` (its message the next visible one of the
  /// domain's queue) to the TSQ as the reference worker does.
  void to_tsq(const std::string& domain, const uuid& id, const park_spec& spec,
              const std::optional<uuid>& batch_id) {
    auto queue = db::command_queue(domain);
    auto batch = batch_id ? opt_str{batch_id->to_string()} : std::nullopt;
    if (spec.exhausted) {
      auto msg = read_one(queue, id);
      receive(domain, id, msg);
      conn.query("SELECT commandbus.sp_fail_command($1, $2::uuid, "
                 "'TRANSIENT', $3, 'timed out', 1, 2, $4::bigint)",
                 domain, id.to_string(), spec.error_code,
                 static_cast<long long>(msg));
      conn.query("SELECT pgmq.set_vt($1, $2::bigint, 0)", queue,
                 static_cast<long long>(msg));
      msg = read_one(queue, id);
      receive(domain, id, msg);
      conn.query("SELECT pgmq.archive($1, $2::bigint)", queue,
                 static_cast<long long>(msg));
      conn.query(
        "SELECT commandbus.sp_finish_command($1, $2::uuid, "
        "'IN_TROUBLESHOOTING_QUEUE', 'MOVED_TO_TSQ', 'TRANSIENT', $3, "
        "'timed out', jsonb_build_object('msg_id', $4::bigint, 'attempt', 2, "
        "'max_attempts', 2, 'reason', 'EXHAUSTED', 'error_type', "
        "'TRANSIENT', 'error_code', $3::text, 'error_msg', 'timed out'), "
        "$5::uuid)",
        domain, id.to_string(), spec.error_code, static_cast<long long>(msg),
        batch);
      return;
    }
    auto msg = read_one(queue, id);
    receive(domain, id, msg);
    conn.query("SELECT pgmq.archive($1, $2::bigint)", queue,
               static_cast<long long>(msg));
    conn.query("SELECT commandbus.sp_finish_command($1, $2::uuid, "
               "'IN_TROUBLESHOOTING_QUEUE', 'MOVED_TO_TSQ', 'PERMANENT', $3, "
               "'bad input', jsonb_build_object('msg_id', $4::bigint, "
               "'attempt', 1, 'error_type', 'PERMANENT', 'error_code', "
               "$3::text, 'error_msg', 'bad input'), $5::uuid)",
               domain, id.to_string(), spec.error_code,
               static_cast<long long>(msg), batch);
  }

  /// Finishes the sent command `id` successfully as the reference worker
  /// does (read, receive, delete, sp_finish_command COMPLETED).
  void complete_normally(const std::string& domain, const uuid& id,
                         const std::optional<uuid>& batch_id) {
    auto queue = db::command_queue(domain);
    auto msg = read_one(queue, id);
    receive(domain, id, msg);
    conn.query("SELECT pgmq.delete($1, $2::bigint)", queue,
               static_cast<long long>(msg));
    conn.query("SELECT commandbus.sp_finish_command($1, $2::uuid, "
               "'COMPLETED', 'COMPLETED', NULL, NULL, NULL, NULL, $3::uuid)",
               domain, id.to_string(),
               batch_id ? opt_str{batch_id->to_string()} : std::nullopt);
  }

  /// Creates a batch of `n` commands in `domain` (default: the test's).
  create_batch_result
  make_batch(int n, std::string domain = {},
             const std::optional<std::string>& reply_to = std::nullopt) {
    if (domain.empty())
      domain = d;
    std::vector<batch_command> cmds;
    for (int i = 0; i < n; ++i) {
      batch_command c;
      c.command_type = "DebitAccount";
      c.command_id = uuid::random();
      c.data = json::parse(R"({"amount":1})");
      c.reply_to = reply_to;
      cmds.push_back(c);
    }
    return env.bus.create_batch(domain, cmds);
  }

  /// The status of `id` in the test's domain.
  opt_str status(const uuid& id) {
    return status_of(conn, d, id);
  }

  /// The messages of the test's reply queue (JSON text, oldest first).
  strings reply_messages() {
    return messages(conn, replies);
  }

  /// The ids of the test's TSQ listing.
  std::vector<std::string> listed(tsq_filter f = {}) {
    f.domain = d;
    std::vector<std::string> out;
    for (auto& x : tsq.list(f))
      out.push_back(x.command_id.to_string());
    return out;
  }

  /// Runs the cmdbus binary on the test database.
  process_result cli(const std::vector<std::string>& args) {
    return run_cmdbus(args, {"CMDBUS_DSN=" + dsn()});
  }

  bus_env env;
  db::connection& conn;
  troubleshooting_queue tsq;
  std::string d;
  std::string q;
  std::string replies;

private:
  int64_t read_one(const std::string& queue, const uuid& id) {
    auto r = conn.query("SELECT msg_id, message->>'command_id' FROM "
                        "pgmq.read($1, 30, 1)",
                        queue);
    EXPECT_EQ(r.rows(), 1);
    if (r.rows() != 1)
      throw std::runtime_error("no message to read");
    EXPECT_EQ(std::string{r.text(0, 1)}, id.to_string());
    return r.int64(0, 0);
  }

  void receive(const std::string& domain, const uuid& id, int64_t msg) {
    auto r = conn.query("SELECT * FROM commandbus.sp_receive_command($1, "
                        "$2::uuid, 'IN_PROGRESS', $3::bigint)",
                        domain, id.to_string(), static_cast<long long>(msg));
    EXPECT_EQ(r.rows(), 1);
  }
};

} // namespace cmdbus::test
