// What a worker reads, and when: only the queues of its own domains (one or
// several), woken by NOTIFY or, without it, by polling; and the receive
// guard, which archives a message whose command is unknown or already in a
// terminal state (audit RECEIVE_SKIPPED) or which is no command message at
// all, and moves a claimed command whose message cannot be decoded to the
// troubleshooting queue. Against the real database; every test works in
// its own domains, awaits conditions with a deadline (`eventually`) and
// checks state with SQL on a separate connection.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cmdbus/db/queue_name.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

// -- reading the right queues -------------------------------------------------

TEST(WorkerRun, ReadsOnlyItsOwnDomainAndProcessesCommandsSentBeforeStart) {
  bus_env e;
  auto mine = test::unique_name("wk");
  auto other = test::unique_name("wk");
  auto a1 = e.bus.send(make_req(mine, "Ok"));
  auto a2 = e.bus.send(make_req(mine, "Ok"));
  auto b1 = e.bus.send(make_req(other, "Ok"));
  std::atomic<int> calls{0};
  handler_registry reg;
  auto ok = [&](const command&, handler_context&) -> json {
    ++calls;
    return json::null();
  };
  reg.add(mine, "Ok", ok);
  // A handler for the other domain too: only the queue choice keeps the
  // worker away from it.
  reg.add(other, "Ok", ok);
  worker w{make_cfg({mine}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  EXPECT_FALSE(w.is_running());
  w.start();
  EXPECT_TRUE(w.is_running());
  EXPECT_EQ(w.domain(), mine);
  EXPECT_THROW(w.start(), std::logic_error);
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, mine, a1.command_id, "COMPLETED")
           && has_status(e.conn, mine, a2.command_id, "COMPLETED");
  }));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(status_of(e.conn, other, b1.command_id), opt_str{"PENDING"});
  EXPECT_EQ(attempts_of(e.conn, other, b1.command_id), 0);
  EXPECT_EQ(queue_rows(e.conn, queue_of(other)), 1);
  // The RECEIVED audit event names the attempt, the delivery's msg_id and
  // the command's max_attempts.
  EXPECT_EQ(audit_detail(e.conn, mine, a1.command_id, "RECEIVED", "{attempt}"),
            opt_str{"1"});
  EXPECT_EQ(audit_detail(e.conn, mine, a1.command_id, "RECEIVED", "{msg_id}"),
            opt_str{std::to_string(a1.msg_id)});
  EXPECT_EQ(
    audit_detail(e.conn, mine, a1.command_id, "RECEIVED", "{max_attempts}"),
    opt_str{"3"});
  EXPECT_EQ(attempts_of(e.conn, mine, a1.command_id), 1);
  stop_worker(w);
  EXPECT_FALSE(w.is_running());
  EXPECT_EQ(status_of(e.conn, other, b1.command_id), opt_str{"PENDING"});
  auto s = w.stats();
  EXPECT_EQ(s.received, 2);
  EXPECT_EQ(s.completed, 2);
}

TEST(WorkerRun, OneWorkerServesSeveralDomains) {
  bus_env e;
  auto a = test::unique_name("wk");
  auto b = test::unique_name("wk");
  auto sa = e.bus.send(make_req(a, "Ok"));
  auto sb = e.bus.send(make_req(b, "Ok"));
  std::mutex mtx;
  strings seen;
  handler_registry reg;
  auto fn = [&](const command& cmd, handler_context&) -> json {
    std::lock_guard<std::mutex> guard{mtx};
    seen.push_back(cmd.domain);
    return json::null();
  };
  reg.add(a, "Ok", fn);
  reg.add(b, "Ok", fn);
  worker w{make_cfg({a, b}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  EXPECT_EQ(w.domain(), a);
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, a, sa.command_id, "COMPLETED")
           && has_status(e.conn, b, sb.command_id, "COMPLETED");
  }));
  // Commands sent while running, to both domains.
  auto sa2 = e.bus.send(make_req(a, "Ok"));
  auto sb2 = e.bus.send(make_req(b, "Ok"));
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, a, sa2.command_id, "COMPLETED")
           && has_status(e.conn, b, sb2.command_id, "COMPLETED");
  }));
  stop_worker(w);
  std::lock_guard<std::mutex> guard{mtx};
  EXPECT_EQ(std::count(seen.begin(), seen.end(), a), 2);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), b), 2);
  EXPECT_EQ(w.stats().completed, 4);
}

// -- wake-up: NOTIFY and polling ----------------------------------------------

TEST(WorkerWakeup, NotifyWakesAnIdleWorkerLongBeforeThePollInterval) {
  bus_env e;
  auto d = test::unique_name("wk");
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  auto cfg = make_cfg({d});
  cfg.poll_interval = 60s;
  cfg.use_notify = true;
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  auto channel = db::notify_channel(queue_of(d));
  ASSERT_TRUE(eventually([&] {
    return scalar(e.conn,
                  "SELECT count(*)::text FROM pg_stat_activity WHERE "
                  "application_name = 'cmdbus-listener' AND query ILIKE '%' "
                  "|| $1 || '%'",
                  channel)
           == opt_str{"1"};
  }));
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("command " + std::to_string(i + 1));
    auto t0 = std::chrono::steady_clock::now();
    auto sent = e.bus.send(make_req(d, "Ok"));
    EXPECT_TRUE(eventually(
      [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); },
      5s));
    RecordProperty("notify_ms_" + std::to_string(i),
                   static_cast<int>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - t0)
                       .count()));
  }
}

TEST(WorkerWakeup, PollingFallbackWithoutNotify) {
  bus_env e;
  auto d = test::unique_name("wk");
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  auto cfg = make_cfg({d});
  cfg.poll_interval = 200ms;
  cfg.use_notify = false;
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  // Let it go idle first, then send.
  auto first = e.bus.send(make_req(d, "Ok"));
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, first.command_id, "COMPLETED"); }, 5s));
  auto second = e.bus.send(make_req(d, "Ok"));
  EXPECT_TRUE(eventually(
    [&] { return has_status(e.conn, d, second.command_id, "COMPLETED"); },
    5s));
  EXPECT_EQ(scalar(e.conn,
                   "SELECT count(*)::text FROM pg_stat_activity WHERE "
                   "application_name = 'cmdbus-listener' AND query ILIKE '%' "
                   "|| $1 || '%'",
                   db::notify_channel(queue_of(d))),
            opt_str{"0"});
}

// -- receive guard ------------------------------------------------------------

TEST(WorkerReceive, TerminalUnknownAndInvalidMessagesAreArchived) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto q = queue_of(d);
  auto done = e.bus.send(make_req(d, "Ok"));
  // Simulate a command that completed while its message stayed behind.
  e.conn.query("UPDATE commandbus.command SET status = 'COMPLETED' WHERE "
               "domain = $1 AND command_id = $2::uuid",
               d, done.command_id.to_string());
  int64_t raw_no_id = std::stoll(*scalar(
    e.conn, "SELECT pgmq.send($1, '{\"foo\":1}'::jsonb)::text", q));
  int64_t raw_array = std::stoll(
    *scalar(e.conn, "SELECT pgmq.send($1, '[1,2]'::jsonb)::text", q));
  auto unknown_id = uuid::random();
  int64_t raw_unknown = std::stoll(*scalar(
    e.conn,
    "SELECT pgmq.send($1, jsonb_build_object('domain', $2::text, "
    "'command_type', 'Ok', 'command_id', $3::text, 'data', '{}'::jsonb))::text",
    q, d, unknown_id.to_string()));
  auto good = e.bus.send(make_req(d, "Ok"));
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Ok", [&](const command&, handler_context&) -> json {
    ++calls;
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, good.command_id, "COMPLETED")
           && queue_rows(e.conn, q) == 0;
  }));
  EXPECT_TRUE(eventually([&] { return w.stats().rejected == 4; }))
    << "rejected = " << w.stats().rejected;
  stop_worker(w);
  EXPECT_EQ(calls.load(), 1); // only the good command ran
  for (int64_t id : std::vector<int64_t>{done.msg_id, raw_no_id, raw_array,
                                        raw_unknown})
    EXPECT_TRUE(archived(e.conn, q, id)) << "msg_id " << id;
  // The terminal command: untouched, RECEIVE_SKIPPED audit.
  EXPECT_EQ(status_of(e.conn, d, done.command_id), opt_str{"COMPLETED"});
  EXPECT_EQ(attempts_of(e.conn, d, done.command_id), 0);
  EXPECT_EQ(events(e.conn, d, done.command_id),
            (strings{"SENT", "RECEIVE_SKIPPED"}));
  EXPECT_EQ(
    audit_detail(e.conn, d, done.command_id, "RECEIVE_SKIPPED", "{reason}"),
    opt_str{"TERMINAL_STATUS"});
  EXPECT_EQ(
    audit_detail(e.conn, d, done.command_id, "RECEIVE_SKIPPED", "{status}"),
    opt_str{"COMPLETED"});
  EXPECT_EQ(
    audit_detail(e.conn, d, done.command_id, "RECEIVE_SKIPPED", "{msg_id}"),
    opt_str{std::to_string(done.msg_id)});
  EXPECT_EQ(
    audit_detail(e.conn, d, unknown_id, "RECEIVE_SKIPPED", "{reason}"),
    opt_str{"UNKNOWN_COMMAND"});
  EXPECT_EQ(w.stats().completed, 1);
}

TEST(WorkerReceive, UndecodableClaimedMessageGoesToTsq) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto q = queue_of(d);
  auto sent = e.bus.send(make_req(d, "Ok"));
  // The command row is fine, its message lost a required field.
  db::validate_queue_name(q);
  e.conn.query("UPDATE pgmq.q_" + q
                 + " SET message = message - 'command_type' WHERE msg_id = $1",
               static_cast<long long>(sent.msg_id));
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Ok", [&](const command&, handler_context&) -> json {
    ++calls;
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, sent.command_id, "IN_TROUBLESHOOTING_QUEUE");
  }));
  stop_worker(w);
  EXPECT_EQ(calls.load(), 0);
  EXPECT_TRUE(archived(e.conn, q, sent.msg_id));
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"PERMANENT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"INVALID_MESSAGE"});
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
  EXPECT_EQ(w.in_flight_count(), 0u);
}
