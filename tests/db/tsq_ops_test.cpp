// The operator actions of the troubleshooting queue (db/troubleshooting.hpp):
// retry, cancel and complete, the reference library's scenarios, batches
// through the TSQ and two operators racing for one command.

#include <atomic>
#include <thread>

#include "tests/db/tsq_support.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

using TsqOps = TsqTest;

// -- retry -------------------------------------------------------------------

TEST_F(TsqOps, RetryOfAnUnknownCommandIsNotFound) {
  EXPECT_THROW(tsq.retry(d, uuid::random()), command_not_found_error);
}

TEST_F(TsqOps, RetryOfACommandOutsideTheTsqIsInvalid) {
  auto sent = env.bus.send(make_req(d));
  try {
    tsq.retry(d, sent.command_id);
    FAIL() << "no error";
  } catch (const not_in_tsq_error& e) {
    EXPECT_EQ(std::string{e.what()},
              "command " + sent.command_id.to_string()
                + " is not in the troubleshooting queue (status PENDING)");
  }
  EXPECT_EQ(status(sent.command_id), opt_str{"PENDING"});
}

TEST_F(TsqOps, RetryResendsTheArchivedMessageAndResetsTheCommand) {
  park_spec spec;
  spec.reply_to = replies;
  auto id = park(spec);
  auto archived_message = scalar(conn,
                                 "SELECT message::text FROM pgmq.a_" + q
                                   + " WHERE message->>'command_id' = $1",
                                 id.to_string());
  auto msg_id = tsq.retry(d, id, std::string{"alice"});
  EXPECT_EQ(status(id), opt_str{"PENDING"});
  EXPECT_EQ(attempts_of(conn, d, id), 0);
  EXPECT_EQ(column(conn, d, id, "msg_id"), opt_str{std::to_string(msg_id)});
  EXPECT_FALSE(column(conn, d, id, "last_error_type"));
  EXPECT_FALSE(column(conn, d, id, "last_error_code"));
  EXPECT_FALSE(column(conn, d, id, "last_error_msg"));
  // The same message is in the queue again.
  EXPECT_EQ(scalar(conn,
                   "SELECT (message = $2::jsonb)::text FROM pgmq.q_" + q
                     + " WHERE msg_id = $1::bigint",
                   static_cast<long long>(msg_id), archived_message),
            opt_str{"true"});
  // Audit OPERATOR_RETRY {operator, new_msg_id}; no reply.
  EXPECT_EQ(events(conn, d, id).back(), "OPERATOR_RETRY");
  EXPECT_TRUE(
    jeq(conn, *audit_detail(conn, d, id, "OPERATOR_RETRY", "{}"), "{}",
        R"({"operator":"alice","new_msg_id":)" + std::to_string(msg_id) + "}"));
  EXPECT_TRUE(reply_messages().empty());
  // Gone from the listing.
  EXPECT_TRUE(listed().empty());
}

TEST_F(TsqOps, RetryWithoutOperatorRecordsNull) {
  auto id = park();
  tsq.retry(d, id);
  EXPECT_TRUE(jeq(conn, *audit_detail(conn, d, id, "OPERATOR_RETRY", "{}"),
                  "{operator}", "null"));
}

TEST_F(TsqOps, RetriedCommandIsProcessedByAWorker) {
  auto id = park();
  tsq.retry(d, id);
  handler_registry reg;
  reg.add(d, "DebitAccount", null_result);
  worker w{make_cfg({d}), std::move(reg)};
  w.start();
  finally stop{[&] { stop_worker(w); }};
  EXPECT_TRUE(eventually([&] { return has_status(conn, d, id, "COMPLETED"); }));
  EXPECT_EQ(attempts_of(conn, d, id), 1);
  auto trail = events(conn, d, id);
  EXPECT_EQ(trail.back(), "COMPLETED");
}

// -- cancel ------------------------------------------------------------------

TEST_F(TsqOps, CancelOfAnUnknownCommandIsNotFound) {
  EXPECT_THROW(tsq.cancel(d, uuid::random(), std::string{"r"}),
               command_not_found_error);
}

TEST_F(TsqOps, CancelOfACommandOutsideTheTsqIsInvalid) {
  auto sent = env.bus.send(make_req(d));
  EXPECT_THROW(tsq.cancel(d, sent.command_id, std::string{"r"}),
               not_in_tsq_error);
  EXPECT_EQ(status(sent.command_id), opt_str{"PENDING"});
}

TEST_F(TsqOps, CancelMarksCanceledRepliesAndAudits) {
  park_spec spec;
  spec.reply_to = replies;
  spec.correlation_id = uuid::random();
  auto id = park(spec);
  auto r = tsq.cancel(d, id, std::string{"duplicate order"},
                      std::string{"bob"});
  EXPECT_FALSE(r.batch_id);
  EXPECT_FALSE(r.batch_completed);
  EXPECT_EQ(status(id), opt_str{"CANCELED"});
  // The error fields stay.
  EXPECT_EQ(column(conn, d, id, "last_error_code"), opt_str{"BAD_INPUT"});
  auto msgs = reply_messages();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_TRUE(jeq(conn, msgs[0], "{}",
                  R"({"command_id":")" + id.to_string()
                    + R"(","correlation_id":")"
                    + spec.correlation_id->to_string()
                    + R"(","outcome":"CANCELED","reason":"duplicate order"})"));
  EXPECT_EQ(events(conn, d, id).back(), "OPERATOR_CANCEL");
  EXPECT_TRUE(jeq(conn, *audit_detail(conn, d, id, "OPERATOR_CANCEL", "{}"),
                  "{}",
                  R"({"operator":"bob","reason":"duplicate order","reply_to":")"
                    + replies + "\"}"));
  EXPECT_TRUE(listed().empty());
}

TEST_F(TsqOps, CancelWithoutReplyToSendsNothing) {
  auto id = park();
  tsq.cancel(d, id, std::string{"r"});
  EXPECT_EQ(status(id), opt_str{"CANCELED"});
  EXPECT_TRUE(jeq(conn, *audit_detail(conn, d, id, "OPERATOR_CANCEL", "{}"),
                  "{reply_to}", "null"));
  EXPECT_TRUE(reply_messages().empty());
}

// -- complete ----------------------------------------------------------------

TEST_F(TsqOps, CompleteOfAnUnknownCommandIsNotFound) {
  EXPECT_THROW(tsq.complete(d, uuid::random(), std::nullopt),
               command_not_found_error);
}

TEST_F(TsqOps, CompleteOfACommandOutsideTheTsqIsInvalid) {
  auto id = park();
  tsq.complete(d, id, std::nullopt);
  EXPECT_THROW(tsq.complete(d, id, std::nullopt), not_in_tsq_error);
}

TEST_F(TsqOps, CompleteMarksCompletedRepliesSuccessAndAudits) {
  park_spec spec;
  spec.reply_to = replies;
  auto id = park(spec);
  tsq.complete(d, id, std::nullopt, std::string{"carol"});
  EXPECT_EQ(status(id), opt_str{"COMPLETED"});
  auto msgs = reply_messages();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(jget(conn, msgs[0], "{outcome}"), opt_str{"SUCCESS"});
  EXPECT_EQ(jget(conn, msgs[0], "{command_id}"), opt_str{id.to_string()});
  EXPECT_TRUE(jhas(conn, msgs[0], "result"));
  EXPECT_TRUE(jeq(conn, msgs[0], "{result}", "null"));
  EXPECT_TRUE(jeq(conn, *audit_detail(conn, d, id, "OPERATOR_COMPLETE", "{}"),
                  "{}",
                  R"({"operator":"carol","has_result_data":false,"reply_to":")"
                    + replies + "\"}"));
  EXPECT_TRUE(listed().empty());
}

TEST_F(TsqOps, CompleteSendsTheResultData) {
  park_spec spec;
  spec.reply_to = replies;
  auto id = park(spec);
  tsq.complete(d, id, json::parse(R"({"refund":12,"by":"hand"})"));
  auto msgs = reply_messages();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_TRUE(jeq(conn, msgs[0], "{result}", R"({"refund":12,"by":"hand"})"));
  EXPECT_TRUE(jeq(conn, *audit_detail(conn, d, id, "OPERATOR_COMPLETE", "{}"),
                  "{has_result_data}", "true"));
}

// -- batches -----------------------------------------------------------------

TEST_F(TsqOps, CancelOfTheLastOpenMemberCompletesTheBatchWithFailures) {
  auto batch = make_batch(2);
  auto first = batch.command_results[0].command_id;
  auto second = batch.command_results[1].command_id;
  complete_normally(d, first, batch.batch_id);
  to_tsq(d, second, {}, batch.batch_id);
  auto b = read_batch(conn, d, batch.batch_id.to_string());
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS");

  auto r = tsq.cancel(d, second, std::string{"no"});
  EXPECT_EQ(r.batch_id, batch.batch_id);
  EXPECT_TRUE(r.batch_completed);
  b = read_batch(conn, d, batch.batch_id.to_string());
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.canceled, 1);
  EXPECT_EQ(b.in_tsq, 0);
  EXPECT_TRUE(b.completed_at);
  EXPECT_EQ(count_events(conn, d, batch.batch_id, "BATCH_COMPLETED"), 1);
  EXPECT_EQ(scalar(conn,
                   "SELECT count(*) FROM commandbus.cmdbus_batch_delivery "
                   "WHERE domain = $1 AND batch_id = $2::uuid AND "
                   "delivered_at IS NULL",
                   d, batch.batch_id.to_string()),
            opt_str{"1"});
}

TEST_F(TsqOps, RetryLowersTheTsqCounterWithoutCompletingTheBatch) {
  auto batch = make_batch(2);
  auto first = batch.command_results[0].command_id;
  auto second = batch.command_results[1].command_id;
  to_tsq(d, first, {}, batch.batch_id);
  complete_normally(d, second, batch.batch_id);
  EXPECT_EQ(read_batch(conn, d, batch.batch_id.to_string()).in_tsq, 1);
  tsq.retry(d, first);
  auto b = read_batch(conn, d, batch.batch_id.to_string());
  EXPECT_EQ(b.in_tsq, 0);
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_EQ(count_events(conn, d, batch.batch_id, "BATCH_COMPLETED"), 0);
  EXPECT_EQ(scalar(conn,
                   "SELECT count(*) FROM commandbus.cmdbus_batch_delivery "
                   "WHERE domain = $1 AND batch_id = $2::uuid",
                   d, batch.batch_id.to_string()),
            opt_str{"0"});
}

TEST_F(TsqOps, CompleteOfTheLastMemberCompletesTheBatchOnce) {
  auto batch = make_batch(2);
  auto first = batch.command_results[0].command_id;
  auto second = batch.command_results[1].command_id;
  to_tsq(d, first, {}, batch.batch_id);
  to_tsq(d, second, {}, batch.batch_id);
  auto r = tsq.complete(d, first, std::nullopt);
  EXPECT_FALSE(r.batch_completed);
  r = tsq.complete(d, second, std::nullopt);
  EXPECT_TRUE(r.batch_completed);
  auto b = read_batch(conn, d, batch.batch_id.to_string());
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_EQ(b.completed, 2);
  EXPECT_EQ(b.in_tsq, 0);
  EXPECT_THROW(tsq.complete(d, second, std::nullopt), not_in_tsq_error);
  EXPECT_EQ(count_events(conn, d, batch.batch_id, "BATCH_COMPLETED"), 1);
  EXPECT_EQ(scalar(conn,
                   "SELECT count(*) FROM commandbus.cmdbus_batch_delivery "
                   "WHERE domain = $1 AND batch_id = $2::uuid",
                   d, batch.batch_id.to_string()),
            opt_str{"1"});
}

TEST_F(TsqOps, AWorkerWithCallbacksDeliversABatchCompletedByAnOperator) {
  auto batch = make_batch(1);
  auto id = batch.command_results[0].command_id;
  to_tsq(d, id, {}, batch.batch_id);
  // The operator completes the batch while no worker runs; the next worker
  // with callbacks for the domain delivers it (at its start).
  EXPECT_TRUE(tsq.cancel(d, id, std::string{"no"}).batch_completed);
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "DebitAccount", null_result);
  worker w{make_cfg({d}), std::move(reg)};
  w.on_batch_complete([&](const std::string& domain, const uuid& batch_id) {
    if (domain == d && batch_id == batch.batch_id)
      ++calls;
  });
  w.start();
  finally stop{[&] { stop_worker(w); }};
  EXPECT_TRUE(eventually([&] { return calls.load() == 1; }));
  EXPECT_TRUE(eventually([&] {
    return scalar(conn,
                  "SELECT (delivered_at IS NOT NULL)::text FROM "
                  "commandbus.cmdbus_batch_delivery WHERE domain = $1 AND "
                  "batch_id = $2::uuid",
                  d, batch.batch_id.to_string())
           == opt_str{"true"};
  }));
}

// -- two operators -----------------------------------------------------------

// Both operators wait behind a transaction that holds the command's row
// lock; once it ends, exactly one of them acts and the other finds the
// command out of the TSQ.
TEST_F(TsqOps, OfTwoConcurrentOperatorsExactlyOneSucceeds) {
  park_spec spec;
  spec.reply_to = replies;
  auto id = park(spec);
  auto app = unique_name("tsqrace");
  auto opts = pool_options(2);
  opts.connection.application_name = app;
  db::pool racers{opts};
  troubleshooting_queue other{racers};
  auto holder = connect();
  holder.exec("BEGIN");
  holder.query("SELECT 1 FROM commandbus.command WHERE domain = $1 AND "
               "command_id = $2::uuid FOR UPDATE",
               d, id.to_string());
  std::atomic<int> ok{0};
  std::atomic<int> refused{0};
  auto act = [&](bool cancel) {
    try {
      if (cancel)
        other.cancel(d, id, std::string{"race"});
      else
        other.complete(d, id, std::nullopt);
      ++ok;
    } catch (const not_in_tsq_error&) {
      ++refused;
    }
  };
  std::thread a{act, true};
  std::thread b{act, false};
  auto waiting = [&] {
    return scalar(conn,
                  "SELECT count(*) FROM pg_stat_activity WHERE "
                  "application_name = $1 AND wait_event_type = 'Lock'",
                  app)
           == opt_str{"2"};
  };
  bool both_waited = eventually(waiting);
  holder.exec("COMMIT");
  a.join();
  b.join();
  EXPECT_TRUE(both_waited);
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(refused.load(), 1);
  auto st = status(id);
  EXPECT_TRUE(st == opt_str{"CANCELED"} || st == opt_str{"COMPLETED"}) << *st;
  EXPECT_EQ(reply_messages().size(), 1u);
  EXPECT_EQ(count_events(conn, d, id, "OPERATOR_CANCEL")
              + count_events(conn, d, id, "OPERATOR_COMPLETE"),
            1);
}

} // namespace
