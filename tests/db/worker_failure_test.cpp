// Failures that end a command on its first attempt: a permanent failure
// moves it to the troubleshooting queue with its error details and sends no
// reply; a business-rule failure makes it FAILED, archives its message and
// replies FAILED with the error both nested in `result` and at the top
// level. Against the real database, state checked with SQL.

#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "cmdbus/model/errors.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

// -- permanent failures -------------------------------------------------------

TEST(WorkerFailure, PermanentFailureMovesToTsqAtOnceWithoutReply) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto req = make_req(d, "Bad");
  req.reply_to = reply_q;
  auto sent = e.bus.send(req);
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Bad", [&](const command&, handler_context&) -> json {
    ++calls;
    throw permanent_command_error("INVALID_ACCOUNT", "no such account",
                                  obj(R"({"account":"X-1","field":"iban"})"));
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, sent.command_id, "IN_TROUBLESHOOTING_QUEUE");
  }));
  stop_worker(w);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(attempts_of(e.conn, d, sent.command_id), 1);
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"PERMANENT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"INVALID_ACCOUNT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_msg"),
            opt_str{"no such account"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ",
                         "{error_details,account}"),
            opt_str{"X-1"});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ", "{error_code}"),
    opt_str{"INVALID_ACCOUNT"});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ", "{msg_id}"),
    opt_str{std::to_string(sent.msg_id)});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ", "{attempt}"),
    opt_str{"1"});
  // Archived (not deleted), no reply.
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  EXPECT_TRUE(archived(e.conn, queue_of(d), sent.msg_id));
  EXPECT_EQ(messages(e.conn, reply_q).size(), 0u);
  EXPECT_EQ(w.stats().moved_to_tsq, 1);
  EXPECT_EQ(w.stats().retried, 0);
}

// -- business-rule failures ---------------------------------------------------

TEST(WorkerFailure, BusinessRuleFailsArchivesAndRepliesFailed) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto req = make_req(d, "Rule");
  req.reply_to = reply_q;
  req.correlation_id = uuid::random();
  auto sent = e.bus.send(req);
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Rule", [&](const command&, handler_context&) -> json {
    ++calls;
    throw business_rule_error("ACCOUNT_CLOSED", "account closed",
                              obj(R"({"account":"A-1","closed_on":"2024-01-01"})"));
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "FAILED"); }));
  stop_worker(w);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "BUSINESS_RULE_FAILED"}));
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"BUSINESS_RULE"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"ACCOUNT_CLOSED"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_msg"),
            opt_str{"account closed"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "BUSINESS_RULE_FAILED",
                         "{error_details,account}"),
            opt_str{"A-1"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "BUSINESS_RULE_FAILED",
                         "{error_code}"),
            opt_str{"ACCOUNT_CLOSED"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  EXPECT_TRUE(archived(e.conn, queue_of(d), sent.msg_id));
  auto replies = messages(e.conn, reply_q);
  ASSERT_EQ(replies.size(), 1u);
  auto& rep = replies[0];
  EXPECT_EQ(jget(e.conn, rep, "{outcome}"), opt_str{"FAILED"});
  EXPECT_EQ(jget(e.conn, rep, "{command_id}"),
            opt_str{sent.command_id.to_string()});
  EXPECT_EQ(jget(e.conn, rep, "{correlation_id}"),
            opt_str{req.correlation_id->to_string()});
  EXPECT_EQ(jget(e.conn, rep, "{error_code}"), opt_str{"ACCOUNT_CLOSED"});
  EXPECT_EQ(jget(e.conn, rep, "{error_message}"), opt_str{"account closed"});
  EXPECT_EQ(jget(e.conn, rep, "{result,error_code}"), opt_str{"ACCOUNT_CLOSED"});
  EXPECT_EQ(jget(e.conn, rep, "{result,error_message}"),
            opt_str{"account closed"});
  EXPECT_TRUE(jeq(e.conn, rep, "{result,error_details}",
                  R"({"account":"A-1","closed_on":"2024-01-01"})"))
    << rep;
  EXPECT_EQ(w.stats().failed, 1);
}
