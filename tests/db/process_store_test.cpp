// The process store (process/store.hpp) against a real PostgreSQL: the rows
// `start` writes (column by column as the reference library writes them),
// replies fed to `apply` through the happy path, a failed step with its
// compensations one at a time in reverse order, an operator's cancel and
// complete through the troubleshooting queue, late and duplicate replies,
// the outbox (a caller's transaction), mark_waiting_for_tsq and PROCESS
// batches. The example process type is tests/unit/process_workflow_fixture.hpp.
// Every test works in its own domain.

#include "cmdbus/process/store.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/troubleshooting.hpp"
#include "cmdbus/model/wire.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/rows.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/test_db.hpp"
#include "tests/unit/process_workflow_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace cmdbus::process_test;

namespace {

// A domain with its command queue and process reply queue, a bus (for the
// pool) and the store.
struct process_env {
  process_env()
    : domain(unique_name("pm")), reply_queue(domain + "__process_replies") {
    env.bus.ensure_queue(db::command_queue(domain));
    env.bus.ensure_queue(reply_queue);
  }

  uuid start(const json& input = order_input(),
             const std::optional<uuid>& batch_id = std::nullopt) {
    return store.start(env.conn, order_workflow(), domain, input, reply_queue,
                       batch_id);
  }

  transition apply(const uuid& process_id, const reply& r) {
    return store.apply(env.conn, domain, process_id, r, order_workflow());
  }

  // The command the process waits for (its latest audit row).
  uuid current(const uuid& process_id) {
    auto trail = store.audit_trail(env.conn, domain, process_id);
    EXPECT_FALSE(trail.empty());
    return trail.back().command_id;
  }

  process_metadata get(const uuid& process_id) {
    auto p = store.get(env.conn, domain, process_id);
    EXPECT_TRUE(p);
    return p ? *p : process_metadata{};
  }

  // A column of the process row as text.
  opt_str column(const uuid& process_id, const std::string& col) {
    return scalar(env.conn,
                  "SELECT " + col
                    + "::text FROM commandbus.process WHERE domain = $1 AND "
                      "process_id = $2::uuid",
                  domain, process_id.to_string());
  }

  // The step names of the audit trail, in order.
  strings steps(const uuid& process_id) {
    strings out;
    for (auto& e : store.audit_trail(env.conn, domain, process_id))
      out.push_back(e.step_name);
    return out;
  }

  // Moves commands to the troubleshooting queue (as a worker does when they
  // fail permanently; their messages are not needed here).
  void to_tsq(const std::vector<uuid>& ids) {
    std::vector<std::string> texts;
    for (auto& id : ids)
      texts.push_back(id.to_string());
    env.conn.query("UPDATE commandbus.command SET status = "
                   "'IN_TROUBLESHOOTING_QUEUE' WHERE domain = $1 AND "
                   "command_id = ANY($2::uuid[])",
                   domain, db::array_literal(texts));
  }

  int64_t commands_of(const uuid& process_id) {
    return env.conn
      .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
             "correlation_id = $2::uuid",
             domain, process_id.to_string())
      .int64(0, 0);
  }

  bus_env env;
  std::string domain;
  std::string reply_queue;
  process_store store;
};

reply success(const uuid& id, const std::string& result = "null") {
  reply r;
  r.command_id = id;
  r.result = json::parse(result);
  return r;
}

// A FAILED reply as the reference's worker sends it: the error fields only
// inside `result`.
reply failed(const uuid& id, const std::string& code = "NO_FUNDS") {
  return wire::decode_reply(R"({"command_id":")" + id.to_string()
                            + R"(","correlation_id":null,"outcome":"FAILED",)"
                              R"("result":{"error_code":")"
                            + code
                            + R"(","error_message":"insufficient funds",)"
                              R"("error_details":{"balance":3}}})");
}

reply canceled(const uuid& id) {
  reply r;
  r.command_id = id;
  r.outcome = reply_outcome::canceled;
  r.reason = "duplicate order";
  return r;
}

// Takes the oldest reply message of `queue` off the queue and decodes it.
reply take_reply(db::connection& c, const std::string& queue) {
  db::validate_queue_name(queue);
  auto r = c.exec("DELETE FROM pgmq.q_" + queue
                  + " WHERE msg_id = (SELECT min(msg_id) FROM pgmq.q_" + queue
                  + ") RETURNING message::text");
  EXPECT_EQ(r.rows(), 1);
  return wire::decode_reply(r.rows() == 1 ? std::string{r.text(0, 0)} : "{}");
}

// -- start --------------------------------------------------------------------

TEST(ProcessStore, StartWritesTheReferenceRows) {
  process_env e;
  auto id = e.start(order_input("o-42", 99));
  auto& c = e.env.conn;
  // commandbus.process, column by column.
  EXPECT_EQ(e.column(id, "domain"), e.domain);
  EXPECT_EQ(e.column(id, "process_type"), "OrderFulfilment");
  EXPECT_EQ(e.column(id, "status"), "WAITING");
  EXPECT_EQ(e.column(id, "current_step"), "Reserve");
  EXPECT_TRUE(jeq(c, *e.column(id, "state"), "{}",
                  R"({"order_id":"o-42","amount":99,"reservation":null,)"
                  R"("debited":false,"notified":false,"last_error":null})"));
  EXPECT_EQ(e.column(id, "error_code"), std::nullopt);
  EXPECT_EQ(e.column(id, "error_message"), std::nullopt);
  EXPECT_EQ(e.column(id, "completed_at"), std::nullopt);
  EXPECT_EQ(e.column(id, "batch_id"), std::nullopt);
  EXPECT_EQ(e.column(id, "(created_at = updated_at)"), "true");
  // commandbus.process_audit: one row for the first step.
  auto a = c.query("SELECT step_name, command_id::text, command_type, "
                   "command_data::text, sent_at IS NOT NULL, reply_outcome, "
                   "reply_data, received_at FROM commandbus.process_audit "
                   "WHERE domain = $1 AND process_id = $2::uuid",
                   e.domain, id.to_string());
  ASSERT_EQ(a.rows(), 1);
  EXPECT_EQ(a.text(0, 0), "Reserve");
  auto command_id = std::string{a.text(0, 1)};
  EXPECT_EQ(a.text(0, 2), "ReserveStock");
  EXPECT_TRUE(jeq(c, std::string{a.text(0, 3)}, "{}",
                  R"({"order_id":"o-42","amount":99})"));
  EXPECT_TRUE(a.boolean(0, 4));
  EXPECT_TRUE(a.is_null(0, 5));
  EXPECT_TRUE(a.is_null(0, 6));
  EXPECT_TRUE(a.is_null(0, 7));
  // The command row: sent with the bus's send path.
  auto cmd = *uuid::parse(command_id);
  EXPECT_EQ(test::column(c, e.domain, cmd, "status"), "PENDING");
  EXPECT_EQ(test::column(c, e.domain, cmd, "command_type"), "ReserveStock");
  EXPECT_EQ(test::column(c, e.domain, cmd, "correlation_id"), id.to_string());
  EXPECT_EQ(test::column(c, e.domain, cmd, "reply_queue"), e.reply_queue);
  EXPECT_EQ(test::column(c, e.domain, cmd, "max_attempts"), "3");
  EXPECT_EQ(test::column(c, e.domain, cmd, "batch_id"), std::nullopt);
  EXPECT_EQ(events(c, e.domain, cmd), strings{"SENT"});
  // The PGMQ message.
  auto msgs = messages(c, queue_of(e.domain));
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(jget(c, msgs[0], "{command_id}"), command_id);
  EXPECT_EQ(jget(c, msgs[0], "{correlation_id}"), id.to_string());
  EXPECT_EQ(jget(c, msgs[0], "{reply_to}"), e.reply_queue);
  EXPECT_EQ(jget(c, msgs[0], "{domain}"), e.domain);
  EXPECT_EQ(jget(c, msgs[0], "{command_type}"), "ReserveStock");
  EXPECT_TRUE(jeq(c, msgs[0], "{data}", R"({"order_id":"o-42","amount":99})"));
  // And the store reads it back.
  auto p = e.get(id);
  EXPECT_EQ(p.status, process_status::waiting);
  EXPECT_EQ(p.current_step, "Reserve");
  EXPECT_EQ(from_json(p.state).order_id, "o-42");
  EXPECT_FALSE(p.completed_at);
}

TEST(ProcessStore, StartRejectsBadInputAndQueueNamesBeforeWriting) {
  process_env e;
  auto& c = e.env.conn;
  EXPECT_THROW(e.start(json::parse(R"({"amount":1})")), std::invalid_argument);
  EXPECT_THROW(e.store.start(c, order_workflow(), e.domain, order_input(),
                             "bad-queue"),
               db::invalid_argument);
  EXPECT_THROW(e.store.start(c, order_workflow(), "no-such domain",
                             order_input(), e.reply_queue),
               db::invalid_argument);
  EXPECT_TRUE(e.store.list(c, e.domain).empty());
  EXPECT_EQ(command_rows(c, e.domain), 0);
  EXPECT_FALSE(c.in_transaction());
}

TEST(ProcessStore, FailedStartWritesNothingAndLeavesTheConnectionUsable) {
  // The domain's command queue does not exist: the send fails, and the
  // store's own transaction rolls back the process row with it.
  bus_env env;
  auto domain = unique_name("pm");
  auto reply_queue = domain + "__process_replies";
  env.bus.ensure_queue(reply_queue);
  process_store store;
  EXPECT_THROW(store.start(env.conn, order_workflow(), domain, order_input(),
                           reply_queue),
               db::error);
  EXPECT_FALSE(env.conn.in_transaction());
  EXPECT_TRUE(store.list(env.conn, domain).empty());
  EXPECT_EQ(scalar(env.conn,
                   "SELECT count(*)::text FROM commandbus.process_audit "
                   "WHERE domain = $1",
                   domain),
            "0");
}

// -- the outbox ---------------------------------------------------------------

TEST(ProcessStore, StartInsideACallersTransactionCommitsOrRollsBackWithIt) {
  process_env e;
  auto& c = e.env.conn;
  // Starts a process in a transaction of the caller's; returns its id after
  // the transaction ended (committed or rolled back).
  auto start_in_tx = [&](bool commit) {
    auto lease = e.env.pool.acquire();
    db::transaction tx{*lease};
    auto id = e.store.start(*lease, order_workflow(), e.domain, order_input(),
                            e.reply_queue);
    EXPECT_TRUE(lease->in_transaction()); // the store did not commit it
    // Visible inside the transaction, not outside.
    EXPECT_TRUE(e.store.get(*lease, e.domain, id));
    EXPECT_FALSE(e.store.get(c, e.domain, id));
    if (commit)
      tx.commit();
    return id;
  };
  auto rolled_back = start_in_tx(false);
  EXPECT_FALSE(e.store.get(c, e.domain, rolled_back));
  EXPECT_TRUE(e.store.audit_trail(c, e.domain, rolled_back).empty());
  EXPECT_EQ(command_rows(c, e.domain), 0);
  EXPECT_EQ(queue_rows(c, queue_of(e.domain)), 0);
  auto committed = start_in_tx(true);
  EXPECT_EQ(e.get(committed).status, process_status::waiting);
  EXPECT_EQ(e.store.audit_trail(c, e.domain, committed).size(), 1u);
  EXPECT_EQ(command_rows(c, e.domain), 1);
  EXPECT_EQ(queue_rows(c, queue_of(e.domain)), 1);
}

// -- replies ------------------------------------------------------------------

TEST(ProcessStore, HappyPathCompletes) {
  process_env e;
  auto id = e.start();
  auto& c = e.env.conn;
  auto first = e.current(id);
  auto t = e.apply(id, success(first, R"({"reservation_id":"r-7"})"));
  EXPECT_EQ(t.disposition, reply_disposition::applied);
  EXPECT_EQ(e.get(id).status, process_status::waiting);
  EXPECT_EQ(e.get(id).current_step, "Debit");
  e.apply(id, success(e.current(id)));
  EXPECT_EQ(e.get(id).current_step, "Notify");
  t = e.apply(id, success(e.current(id), R"({"sent":true})"));
  EXPECT_EQ(t.status, process_status::completed);
  auto p = e.get(id);
  EXPECT_EQ(p.status, process_status::completed);
  EXPECT_EQ(p.current_step, "Notify");
  EXPECT_TRUE(p.completed_at);
  auto st = from_json(p.state);
  EXPECT_EQ(st.reservation, "r-7");
  EXPECT_TRUE(st.debited);
  EXPECT_TRUE(st.notified);
  EXPECT_EQ(e.column(id, "(completed_at >= created_at)"), "true");
  // The audit trail: every step with its reply.
  auto trail = e.store.audit_trail(c, e.domain, id);
  ASSERT_EQ(trail.size(), 3u);
  EXPECT_EQ(e.steps(id), (strings{"Reserve", "Debit", "Notify"}));
  EXPECT_EQ(trail[0].command_type, "ReserveStock");
  EXPECT_EQ(trail[1].command_type, "DebitAccount");
  EXPECT_EQ(trail[2].command_type, "SendNotification");
  for (auto& row : trail) {
    EXPECT_EQ(row.outcome, reply_outcome::success);
    EXPECT_TRUE(row.received_at);
    EXPECT_GE(*row.received_at, row.sent_at);
  }
  ASSERT_TRUE(trail[0].reply_data);
  EXPECT_TRUE(
    jeq(c, trail[0].reply_data->text(), "{}", R"({"reservation_id":"r-7"})"));
  EXPECT_FALSE(trail[1].reply_data); // a null result: NULL
  EXPECT_EQ(scalar(c,
                   "SELECT reply_outcome || ' ' || (reply_data IS NULL)::text "
                   "FROM commandbus.process_audit WHERE command_id = $1::uuid",
                   trail[1].command_id.to_string()),
            "SUCCESS true");
  // Three commands, each with the process as correlation id.
  EXPECT_EQ(e.commands_of(id), 3);
  EXPECT_EQ(queue_rows(c, queue_of(e.domain)), 3);
}

TEST(ProcessStore, FailedStepCompensatesOneAtATimeInReverseOrder) {
  process_env e;
  auto id = e.start();
  auto& c = e.env.conn;
  e.apply(id, success(e.current(id), R"({"reservation_id":"r-1"})"));
  e.apply(id, success(e.current(id)));
  auto notify = e.current(id);
  e.apply(id, failed(notify));
  auto p = e.get(id);
  EXPECT_EQ(p.status, process_status::compensating);
  EXPECT_EQ(p.current_step, "Refund");
  EXPECT_EQ(p.error_code, "NO_FUNDS"); // read from inside `result`
  EXPECT_EQ(p.error_message, "insufficient funds");
  EXPECT_FALSE(p.completed_at);
  // Only the first compensation is sent.
  EXPECT_EQ(e.steps(id), (strings{"Reserve", "Debit", "Notify", "Refund"}));
  EXPECT_EQ(e.commands_of(id), 4);
  // The failed step's reply as the reference stores it.
  auto data = scalar(c,
                     "SELECT reply_data::text FROM commandbus.process_audit "
                     "WHERE command_id = $1::uuid AND reply_outcome = "
                     "'FAILED'",
                     notify.to_string());
  ASSERT_TRUE(data);
  EXPECT_TRUE(jeq(c, *data, "{}",
                  R"({"error_code":"NO_FUNDS","error_message":)"
                  R"("insufficient funds","error_details":{"balance":3}})"));
  e.apply(id, success(e.current(id)));
  p = e.get(id);
  EXPECT_EQ(p.status, process_status::compensating);
  EXPECT_EQ(p.current_step, "Release");
  EXPECT_EQ(e.commands_of(id), 5);
  e.apply(id, success(e.current(id)));
  p = e.get(id);
  EXPECT_EQ(p.status, process_status::canceled);
  EXPECT_TRUE(p.completed_at);
  EXPECT_EQ(p.error_code, "NO_FUNDS");
  EXPECT_EQ(e.steps(id),
            (strings{"Reserve", "Debit", "Notify", "Refund", "Release"}));
  // The compensation commands, in the order they were sent.
  auto types = c.query("SELECT command_type FROM commandbus.command WHERE "
                       "domain = $1 AND correlation_id = $2::uuid ORDER BY "
                       "created_at, msg_id",
                       e.domain, id.to_string());
  ASSERT_EQ(types.rows(), 5);
  EXPECT_EQ(types.text(3, 0), "RefundAccount");
  EXPECT_EQ(types.text(4, 0), "ReleaseStock");
}

TEST(ProcessStore, OperatorCancelCompensatesToCompensated) {
  process_env e;
  auto id = e.start();
  auto& c = e.env.conn;
  e.apply(id, success(e.current(id), R"({"reservation_id":"r-1"})"));
  // The Debit command lands in the troubleshooting queue; the operator
  // cancels it, which sends a CANCELED reply to the process reply queue.
  auto debit = e.current(id);
  e.to_tsq({debit});
  EXPECT_EQ(e.store.mark_waiting_for_tsq(c, e.domain), std::vector<uuid>{id});
  EXPECT_EQ(e.get(id).status, process_status::waiting_for_tsq);
  troubleshooting_queue tsq{e.env.pool};
  tsq.cancel(e.domain, debit, std::string{"duplicate order"});
  auto r = take_reply(c, e.reply_queue);
  EXPECT_EQ(r.outcome, reply_outcome::canceled);
  EXPECT_EQ(r.correlation_id, id);
  e.apply(id, r);
  auto p = e.get(id);
  EXPECT_EQ(p.status, process_status::compensating);
  EXPECT_EQ(p.current_step, "Release");
  EXPECT_EQ(scalar(c,
                   "SELECT reply_outcome || ' ' || (reply_data IS NULL)::text "
                   "FROM commandbus.process_audit WHERE command_id = $1::uuid",
                   debit.to_string()),
            "CANCELED true");
  e.apply(id, success(e.current(id)));
  p = e.get(id);
  EXPECT_EQ(p.status, process_status::compensated);
  EXPECT_TRUE(p.completed_at);
  EXPECT_FALSE(p.error_code);
  EXPECT_EQ(e.steps(id), (strings{"Reserve", "Debit", "Release"}));
}

TEST(ProcessStore, OperatorCompleteResumesAWaitingForTsqProcess) {
  process_env e;
  auto id = e.start();
  auto& c = e.env.conn;
  auto reserve = e.current(id);
  e.to_tsq({reserve});
  e.store.mark_waiting_for_tsq(c, e.domain);
  ASSERT_EQ(e.get(id).status, process_status::waiting_for_tsq);
  troubleshooting_queue tsq{e.env.pool};
  tsq.complete(e.domain, reserve, json::parse(R"({"reservation_id":"r-op"})"));
  e.apply(id, take_reply(c, e.reply_queue));
  auto p = e.get(id);
  EXPECT_EQ(p.status, process_status::waiting);
  EXPECT_EQ(p.current_step, "Debit");
  EXPECT_EQ(from_json(p.state).reservation, "r-op");
}

TEST(ProcessStore, LateAndDuplicateRepliesChangeNothing) {
  process_env e;
  auto id = e.start();
  auto& c = e.env.conn;
  auto reserve = e.current(id);
  e.apply(id, success(reserve, R"({"reservation_id":"r-1"})"));
  auto before = e.get(id);
  auto received = scalar(c,
                         "SELECT received_at::text FROM "
                         "commandbus.process_audit WHERE command_id = $1::uuid",
                         reserve.to_string());
  // The same reply again, and a contradicting one.
  for (auto& r :
       {success(reserve, R"({"reservation_id":"r-2"})"), failed(reserve)}) {
    auto t = e.apply(id, r);
    EXPECT_EQ(t.disposition, reply_disposition::already_answered);
  }
  // A reply for a command that is not the process's.
  auto t = e.apply(id, success(uuid::random()));
  EXPECT_EQ(t.disposition, reply_disposition::unknown_command);
  // A reply for a process that does not exist.
  t = e.apply(uuid::random(), success(reserve));
  EXPECT_EQ(t.disposition, reply_disposition::unknown_process);
  auto after = e.get(id);
  EXPECT_EQ(after.status, before.status);
  EXPECT_EQ(after.current_step, "Debit");
  EXPECT_EQ(after.state, before.state);
  EXPECT_EQ(after.updated_at, before.updated_at);
  EXPECT_EQ(scalar(c,
                   "SELECT received_at::text FROM commandbus.process_audit "
                   "WHERE command_id = $1::uuid",
                   reserve.to_string()),
            received);
  EXPECT_EQ(scalar(c,
                   "SELECT reply_data->>'reservation_id' FROM "
                   "commandbus.process_audit WHERE command_id = $1::uuid",
                   reserve.to_string()),
            "r-1");
  EXPECT_EQ(e.commands_of(id), 2);
}

TEST(ProcessStore, ConcurrentCopiesOfOneReplyApplyOnce) {
  // A redelivered reply read by a second router while the first still holds
  // the process: the second waits for the lock, then finds the reply
  // recorded.
  process_env e;
  auto id = e.start();
  auto reserve = e.current(id);
  auto holder = e.env.pool.acquire();
  db::transaction tx{*holder};
  auto first = e.store.apply(*holder, e.domain, id, success(reserve),
                             order_workflow());
  EXPECT_EQ(first.disposition, reply_disposition::applied);
  auto second = std::make_shared<std::optional<transition>>();
  auto domain = e.domain;
  auto other = std::make_shared<db::connection>(connect());
  std::thread loser{[second, other, domain, id, reserve] {
    process_store store;
    *second = store.apply(*other, domain, id, success(reserve),
                          order_workflow());
  }};
  EXPECT_TRUE(eventually([&] {
    return e.env.conn
             .query("SELECT count(*) FROM pg_stat_activity WHERE "
                    "pg_blocking_pids(pid) @> ARRAY[$1::int]",
                    holder->backend_pid())
             .int64(0, 0)
           > 0;
  }));
  tx.commit();
  loser.join();
  ASSERT_TRUE(*second);
  EXPECT_EQ((*second)->disposition, reply_disposition::already_answered);
  EXPECT_EQ(e.steps(id), (strings{"Reserve", "Debit"}));
  EXPECT_EQ(e.commands_of(id), 2);
}

TEST(ProcessStore, ThrowingWorkflowWritesNothing) {
  // A reply the workflow cannot take (here: update_state throws) fails the
  // transition before anything is written; the reply can be read again.
  process_env e;
  auto id = e.start();
  auto spec = order_spec();
  spec.update_state = [](order_state&, order_step, const reply&) {
    throw std::runtime_error("unexpected result");
  };
  workflow_definition<order_state, order_step> broken{spec};
  auto reserve = e.current(id);
  EXPECT_THROW(e.store.apply(e.env.conn, e.domain, id, success(reserve),
                             broken),
               std::runtime_error);
  EXPECT_FALSE(e.env.conn.in_transaction());
  auto trail = e.store.audit_trail(e.env.conn, e.domain, id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_FALSE(trail[0].outcome);
  EXPECT_EQ(e.get(id).status, process_status::waiting);
  // The same reply with the working definition moves the process on.
  EXPECT_EQ(e.apply(id, success(reserve)).disposition,
            reply_disposition::applied);
  EXPECT_EQ(e.get(id).current_step, "Debit");
}

TEST(ProcessStore, TerminalProcessRecordsTheReplyOnly) {
  // As the reference leaves a process it compensated: COMPENSATED with a
  // compensation command still out.
  process_env e;
  auto id = e.start();
  auto& c = e.env.conn;
  e.apply(id, success(e.current(id)));
  auto debit = e.current(id);
  c.query("UPDATE commandbus.process SET status = 'COMPENSATED', "
          "completed_at = NOW() WHERE domain = $1 AND process_id = $2::uuid",
          e.domain, id.to_string());
  auto before = e.get(id);
  auto t = e.apply(id, success(debit));
  EXPECT_EQ(t.disposition, reply_disposition::terminal_process);
  auto after = e.get(id);
  EXPECT_EQ(after.status, process_status::compensated);
  EXPECT_EQ(after.current_step, "Debit");
  EXPECT_EQ(after.updated_at, before.updated_at);
  EXPECT_EQ(after.completed_at, before.completed_at);
  EXPECT_EQ(after.state, before.state);
  auto trail = e.store.audit_trail(c, e.domain, id);
  ASSERT_EQ(trail.size(), 2u);
  EXPECT_EQ(trail[1].outcome, reply_outcome::success);
  EXPECT_TRUE(trail[1].received_at);
  EXPECT_EQ(e.commands_of(id), 2);
}

// -- the troubleshooting queue ------------------------------------------------

TEST(ProcessStore,
     MarkWaitingForTsqMovesOnlyWaitingProcessesWithTheirCommandInTheTsq) {
  process_env e;
  auto& c = e.env.conn;
  auto stuck = e.start();
  auto fine = e.start();
  auto done = e.start();
  e.to_tsq({e.current(stuck), e.current(done)});
  // A terminal process is not moved, whatever its command's status.
  c.query("UPDATE commandbus.process SET status = 'CANCELED' WHERE domain = "
          "$1 AND process_id = $2::uuid",
          e.domain, done.to_string());
  EXPECT_EQ(e.store.mark_waiting_for_tsq(c, e.domain),
            std::vector<uuid>{stuck});
  EXPECT_EQ(e.get(stuck).status, process_status::waiting_for_tsq);
  EXPECT_EQ(e.get(fine).status, process_status::waiting);
  EXPECT_EQ(e.get(done).status, process_status::canceled);
  EXPECT_TRUE(e.store.mark_waiting_for_tsq(c, e.domain).empty());
  process_query q;
  q.statuses = {process_status::waiting_for_tsq};
  auto listed = e.store.list(c, e.domain, q);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].process_id, stuck);
}

// -- batches ------------------------------------------------------------------

TEST(ProcessStore, ProcessBatchCountsItsProcesses) {
  process_env e;
  auto& c = e.env.conn;
  auto batch = e.store.create_batch(c, e.domain, 3, std::string{"orders"});
  EXPECT_EQ(read_batch(c, e.domain, batch.to_string()).status, "PENDING");
  EXPECT_EQ(scalar(c,
                   "SELECT batch_type FROM commandbus.batch WHERE domain = $1 "
                   "AND batch_id = $2::uuid",
                   e.domain, batch.to_string()),
            "PROCESS");
  auto ok = e.start(order_input("a"), batch);
  auto b = read_batch(c, e.domain, batch.to_string());
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_TRUE(b.started_at);
  EXPECT_EQ(e.column(ok, "batch_id"), batch.to_string());
  auto bad = e.start(order_input("b"), batch);
  auto tsq = e.start(order_input("c"), batch);
  // The commands of the processes belong to no batch.
  EXPECT_EQ(test::column(c, e.domain, e.current(ok), "batch_id"), std::nullopt);
  for (int i = 0; i < 3; ++i)
    e.apply(ok, success(e.current(ok)));
  b = read_batch(c, e.domain, batch.to_string());
  EXPECT_EQ(b.completed, 1);
  e.apply(bad, failed(e.current(bad)));
  b = read_batch(c, e.domain, batch.to_string());
  EXPECT_EQ(b.canceled, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  e.to_tsq({e.current(tsq)});
  e.store.mark_waiting_for_tsq(c, e.domain);
  EXPECT_EQ(read_batch(c, e.domain, batch.to_string()).in_tsq, 1);
  e.apply(tsq, canceled(e.current(tsq))); // nothing to compensate
  EXPECT_EQ(e.get(tsq).status, process_status::compensated);
  b = read_batch(c, e.domain, batch.to_string());
  EXPECT_EQ(b.completed, 2);
  EXPECT_EQ(b.canceled, 1);
  EXPECT_EQ(b.in_tsq, 0);
  EXPECT_EQ(b.failed, 0);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_TRUE(b.completed_at);
  EXPECT_EQ(count_events(c, e.domain, batch, "BATCH_COMPLETED"), 1);
  EXPECT_EQ(
    scalar(c,
           "SELECT count(*)::text FROM commandbus.cmdbus_batch_delivery "
           "WHERE domain = $1 AND batch_id = $2::uuid",
           e.domain, batch.to_string()),
    "1");
  // The repair path counts the same.
  c.query("SELECT 1 FROM commandbus.sp_refresh_batch_stats($1, $2::uuid)",
          e.domain, batch.to_string());
  auto r = read_batch(c, e.domain, batch.to_string());
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.canceled, 1);
  EXPECT_EQ(r.in_tsq, 0);
}

TEST(ProcessStore, StartRejectsUnknownAndCommandBatches) {
  process_env e;
  auto& c = e.env.conn;
  EXPECT_THROW(e.start(order_input(), uuid::random()), batch_not_found_error);
  batch_command noop;
  noop.command_type = "Noop";
  noop.command_id = uuid::random();
  auto created = e.env.bus.create_batch(e.domain, {noop});
  EXPECT_THROW(e.start(order_input(), created.batch_id),
               invalid_operation_error);
  auto batch = e.store.create_batch(c, e.domain, 1);
  EXPECT_THROW(e.store.create_batch(c, e.domain, 1, {}, {}, batch),
               invalid_operation_error);
  EXPECT_TRUE(e.store.list(c, e.domain).empty());
}

// -- reads --------------------------------------------------------------------

TEST(ProcessStore, ListFiltersByStatusAndType) {
  process_env e;
  auto& c = e.env.conn;
  auto a = e.start(order_input("a"));
  auto b = e.start(order_input("b"));
  e.apply(b, failed(e.current(b)));
  c.query("INSERT INTO commandbus.process (domain, process_id, process_type, "
          "status, state) VALUES ($1, $2::uuid, 'Other', 'WAITING', '{}')",
          e.domain, new_uuid());
  EXPECT_EQ(e.store.list(c, e.domain).size(), 3u);
  process_query q;
  q.statuses = {process_status::waiting};
  auto waiting = e.store.list(c, e.domain, q);
  EXPECT_EQ(waiting.size(), 2u);
  q.process_type = "OrderFulfilment";
  auto typed = e.store.list(c, e.domain, q);
  ASSERT_EQ(typed.size(), 1u);
  EXPECT_EQ(typed[0].process_id, a);
  q = {};
  q.statuses = {process_status::canceled, process_status::completed};
  auto either = e.store.list(c, e.domain, q);
  ASSERT_EQ(either.size(), 1u);
  EXPECT_EQ(either[0].process_id, b);
  EXPECT_EQ(either[0].error_code, "NO_FUNDS");
  EXPECT_EQ(e.store.list(c, e.domain, {{}, std::nullopt, 1}).size(), 1u);
  EXPECT_TRUE(e.store.list(c, unique_name("none")).empty());
  EXPECT_FALSE(e.store.get(c, e.domain, uuid::random()));
}

} // namespace

namespace {

process_store::workflow_lookup order_lookup() {
  return
    [](const std::string&) -> const workflow* { return &order_workflow(); };
}

} // namespace

TEST(ProcessStore, AGroupOfRepliesGetsTheOutcomeOfEachAloneInOneTransaction) {
  // apply_many (a writer's group): replies of different processes, each
  // decided as apply() decides it alone, written together; a process twice
  // in a group is refused before any SQL.
  process_env e;
  auto& c = e.env.conn;
  auto a = e.start(), b = e.start(), x = e.start(), late = e.start();
  auto late_first = e.current(late);
  e.apply(late, success(late_first));
  auto a_first = e.current(a);
  auto ts = e.store.apply_many(
    c, e.domain,
    {{a, success(a_first, R"({"reservation_id":"r-1"})")},
     {b, failed(e.current(b))},
     {x, canceled(e.current(x))},
     {late, success(late_first)},
     {uuid::random(), success(uuid::random())}},
    order_lookup());
  EXPECT_FALSE(c.in_transaction());
  ASSERT_EQ(ts.size(), 5u);
  EXPECT_EQ(ts[0].disposition, reply_disposition::applied);
  EXPECT_EQ(e.get(a).current_step, "Debit");
  EXPECT_EQ(e.steps(a), (strings{"Reserve", "Debit"}));
  EXPECT_EQ(e.commands_of(a), 2);
  auto trail = e.store.audit_trail(c, e.domain, a);
  ASSERT_EQ(trail.size(), 2u);
  EXPECT_EQ(trail[0].outcome, reply_outcome::success);
  ASSERT_TRUE(trail[0].reply_data);
  EXPECT_NE(trail[0].reply_data->text().find("r-1"), std::string::npos);
  EXPECT_FALSE(trail[1].outcome);
  // The next command is in the queue, replying to the process's queue.
  EXPECT_EQ(scalar(c,
                   "SELECT status || ' ' || reply_queue FROM "
                   "commandbus.command WHERE domain = $1 AND command_id = "
                   "$2::uuid",
                   e.domain, trail[1].command_id.to_string()),
            "PENDING " + e.reply_queue);
  EXPECT_EQ(ts[1].disposition, reply_disposition::applied);
  EXPECT_EQ(e.get(b).status, ts[1].status);
  EXPECT_EQ(e.get(b).error_code, "NO_FUNDS");
  EXPECT_EQ(ts[2].disposition, reply_disposition::applied);
  EXPECT_EQ(e.get(x).status, process_status::compensated);
  EXPECT_EQ(ts[3].disposition, reply_disposition::already_answered);
  EXPECT_EQ(e.commands_of(late), 2);
  EXPECT_EQ(ts[4].disposition, reply_disposition::unknown_process);
  // Each alone would have given the same: the late reply again.
  EXPECT_EQ(e.apply(late, success(late_first)).disposition,
            reply_disposition::already_answered);
  auto next = e.current(a);
  EXPECT_THROW(e.store.apply_many(c, e.domain,
                                  {{a, success(next)}, {a, success(next)}},
                                  order_lookup()),
               invalid_operation_error);
  EXPECT_FALSE(c.in_transaction());
  EXPECT_EQ(e.steps(a), (strings{"Reserve", "Debit"}));
}

TEST(ProcessStore, AStepUpdatesItsRowsInPlace) {
  // The process tables keep room on each page (V018, fillfactor 50), so
  // that a step's updates of the process row and of the reply's audit row
  // are HOT updates: the new version on the same page, no new index entry.
  // With full pages (the default fillfactor) none of these was. Counted for
  // the group's own transaction, which PostgreSQL reports exactly. All 100
  // replies in one transaction is the hardest case: no old version can be
  // pruned meanwhile, and a recorded reply is longer than the empty one, so
  // a few audit rows may find their page full (96 of 100 here).
  process_env e;
  auto& c = e.env.conn;
  std::vector<process_reply> group;
  for (int i = 0; i < 100; ++i) {
    auto p = e.start();
    group.push_back({p, success(e.current(p))});
  }
  c.exec("BEGIN");
  auto ts = e.store.apply_many(c, e.domain, group, order_lookup());
  ASSERT_EQ(ts.size(), group.size());
  for (auto& t : ts)
    ASSERT_EQ(t.disposition, reply_disposition::applied);
  auto updated = [&](const char* table, const char* kind) {
    return std::stoll(*scalar(c,
                              std::string{"SELECT pg_stat_get_xact_tuples_"}
                                + kind + "('commandbus." + table
                                + "'::regclass)::text"));
  };
  for (auto* table : {"process", "process_audit"}) {
    EXPECT_EQ(updated(table, "updated"), 100) << table;
    EXPECT_GE(updated(table, "hot_updated"), 90) << table;
  }
  c.exec("COMMIT");
}

TEST(ProcessStore, RepliesFindTheirProcessByKeyInADomainTheStatisticsMissed) {
  // The tables analyzed before the domain had a row (a domain new since the
  // last ANALYZE; a fresh database is alike): a plan made for the domain's
  // value estimates it at one row, and a statement written with `domain =
  // $1` may then walk the whole domain per reply through any index that
  // leads with the domain (the commands by (domain, command_id) with the
  // domain alone; the processes by idx_process_status). Each reply must
  // find its rows by key.
  process_env e;
  auto& c = e.env.conn;
  // Statistics of tables with rows, all of another domain.
  auto other = unique_name("pm_other");
  c.query("INSERT INTO commandbus.process (domain, process_id, process_type, "
          "status, current_step, state, created_at, updated_at) SELECT $1, "
          "gen_random_uuid(), 'OrderFulfilment', 'WAITING', 'Reserve', '{}', "
          "NOW(), NOW() FROM generate_series(1, 3000)",
          other);
  c.query("INSERT INTO commandbus.process_audit (domain, process_id, "
          "step_name, command_id, command_type, sent_at) SELECT domain, "
          "process_id, 'Reserve', gen_random_uuid(), 'ReserveStock', NOW() "
          "FROM commandbus.process WHERE domain = $1",
          other);
  c.query("INSERT INTO commandbus.command (domain, queue_name, msg_id, "
          "command_id, command_type, status, attempts, max_attempts, "
          "reply_queue, correlation_id) SELECT domain, $2, 0, command_id, "
          "command_type, 'PENDING', 0, 3, $3, process_id FROM "
          "commandbus.process_audit WHERE domain = $1",
          other, db::command_queue(other), other + "__process_replies");
  c.exec("ANALYZE commandbus.process, commandbus.process_audit, "
         "commandbus.command");
  // The domain grows after the ANALYZE: processes waiting at their first
  // step, with their commands.
  c.query("INSERT INTO commandbus.process (domain, process_id, process_type, "
          "status, current_step, state, created_at, updated_at) SELECT $1, "
          "gen_random_uuid(), 'OrderFulfilment', 'WAITING', 'Reserve', '{}', "
          "NOW(), NOW() FROM generate_series(1, 1000)",
          e.domain);
  c.query("INSERT INTO commandbus.command (domain, queue_name, msg_id, "
          "command_id, command_type, status, attempts, max_attempts, "
          "reply_queue, correlation_id) SELECT domain, $2, 0, "
          "gen_random_uuid(), 'ReserveStock', 'PENDING', 0, 3, $3, process_id "
          "FROM commandbus.process WHERE domain = $1",
          e.domain, db::command_queue(e.domain), e.reply_queue);
  std::vector<uuid> ids;
  for (int i = 0; i < 12; ++i)
    ids.push_back(e.start());
  // The rows the statements read from the tables (heap fetches through an
  // index and rows of sequential scans).
  auto rows_read = [&] {
    c.query("SELECT pg_stat_force_next_flush()");
    return c
      .query("SELECT COALESCE(sum(COALESCE(seq_tup_read, 0) + "
             "COALESCE(idx_tup_fetch, 0)), 0)::bigint FROM "
             "pg_stat_user_tables WHERE schemaname = 'commandbus' AND "
             "relname IN ('process', 'process_audit', 'command')")
      .int64(0, 0);
  };
  // The trails and commands of the processes read beforehand, so that what
  // is counted is the applies' reads only.
  std::vector<uuid> firsts;
  for (auto& id : ids)
    firsts.push_back(e.current(id));
  auto read_before = rows_read();
  // Index scans of the process tables, flushed from this session first.
  auto scans = [&](const std::string& index) {
    c.query("SELECT pg_stat_force_next_flush()");
    return c
      .query("SELECT COALESCE(sum(idx_scan), 0)::bigint FROM "
             "pg_stat_user_indexes WHERE schemaname = 'commandbus' AND "
             "indexrelname = $1",
             index)
      .int64(0, 0);
  };
  auto status_before = scans("idx_process_status");
  auto type_before = scans("idx_process_type");
  auto key_before = scans("process_pkey") + scans("ix_cmdbus_process_id");
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(e.apply(ids[i], success(firsts[i])).disposition,
              reply_disposition::applied);
  // A few rows per reply (the process, its trail, its latest command; the
  // foreign key checks of the rows inserted), not the domain's.
  auto read = rows_read() - read_before;
  EXPECT_LE(read, static_cast<int64_t>(ids.size()) * 10) << read;
  EXPECT_EQ(scans("idx_process_status") - status_before, 0);
  EXPECT_EQ(scans("idx_process_type") - type_before, 0);
  // (The counters move: the processes were found by key.)
  EXPECT_GT(scans("process_pkey") + scans("ix_cmdbus_process_id") - key_before,
            0);
}

TEST(ProcessStore, AGroupCutBeforeItsCommitWritesNothingAndAppliesOnceLater) {
  // The connection of a group is cut while the group waits for the lock of
  // its last process (the others locked already): nothing of the group is
  // written, every lock is released, and the same group applied again
  // moves each process on once; a third time changes nothing.
  process_env e;
  auto& c = e.env.conn;
  std::vector<uuid> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(e.start());
  std::sort(ids.begin(), ids.end());
  std::vector<process_reply> group;
  for (auto& id : ids)
    group.push_back({id, success(e.current(id))});
  auto port = std::stoi(
    std::string{scalar(c, "SELECT current_setting('port')").value_or("0")});
  auto proxy = std::make_shared<tcp_proxy>(port);
  auto cut_conn = std::make_shared<db::connection>(db::connection::open(
    dsn() + " host=127.0.0.1 port=" + std::to_string(proxy->port())
    + " connect_timeout=2"));
  auto cut_pid = cut_conn->backend_pid();
  auto holder = e.env.pool.acquire();
  db::transaction tx{*holder};
  holder->query("SELECT 1 FROM commandbus.process WHERE domain = $1 AND "
                "process_id = $2::uuid FOR UPDATE",
                e.domain, ids.back().to_string());
  auto error = std::make_shared<std::string>();
  auto domain = e.domain;
  std::thread applier{[cut_conn, group, domain, error] {
    try {
      process_store{}.apply_many(*cut_conn, domain, group, order_lookup());
      *error = "no error";
    } catch (const db::error& x) {
      *error = x.code() == db::errc::connection ? "connection" : x.what();
    } catch (const std::exception& x) {
      *error = x.what();
    }
  }};
  EXPECT_TRUE(eventually([&] {
    return c.query("SELECT count(*) FROM pg_stat_activity WHERE "
                   "pg_blocking_pids(pid) @> ARRAY[$1::int]",
                   holder->backend_pid())
             .int64(0, 0)
           > 0;
  }));
  proxy->cut();
  applier.join();
  EXPECT_EQ(*error, "connection");
  tx.commit();
  // The server ends the cut session (it rolls back) once it finds the
  // client gone.
  EXPECT_TRUE(eventually([&] {
    return c.query("SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                   cut_pid)
             .int64(0, 0)
           == 0;
  }));
  for (auto& id : ids) {
    EXPECT_EQ(e.steps(id), (strings{"Reserve"}));
    EXPECT_EQ(e.get(id).current_step, "Reserve");
  }
  auto again = e.store.apply_many(c, e.domain, group, order_lookup());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(again[i].disposition, reply_disposition::applied);
    EXPECT_EQ(e.steps(ids[i]), (strings{"Reserve", "Debit"}));
    EXPECT_EQ(e.commands_of(ids[i]), 2);
  }
  for (auto& t : e.store.apply_many(c, e.domain, group, order_lookup()))
    EXPECT_EQ(t.disposition, reply_disposition::already_answered);
}
