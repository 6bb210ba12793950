// Transient failures: a transient_command_error, any other exception (its
// type name becomes the error code) and a command type without a handler
// are retried after the worker's backoff, with the error recorded on the
// command and in a FAILED audit event, until the command's own max_attempts
// is used up; then the command moves to the troubleshooting queue (reason
// EXHAUSTED) and no reply is sent. Against the real database, state
// checked with SQL.

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/model/errors.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

struct custom_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace

// -- transient failures -------------------------------------------------------

TEST(WorkerRetry, TransientFailureIsRetriedWithBackoffThenSucceeds) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto sent = e.bus.send(make_req(d, "Flaky"));
  std::mutex mtx;
  std::vector<int> attempts;
  handler_registry reg;
  reg.add(d, "Flaky", [&](const command&, handler_context& ctx) -> json {
    {
      std::lock_guard<std::mutex> guard{mtx};
      attempts.push_back(ctx.attempt());
    }
    if (ctx.attempt() == 1)
      throw transient_command_error("TIMEOUT", "downstream timed out");
    return obj(R"({"ok":1})");
  });
  auto cfg = make_cfg({d});
  cfg.retry.backoff_seconds = {2};
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return count_events(e.conn, d, sent.command_id, "FAILED") == 1; }));
  // While waiting for the backoff: still IN_PROGRESS, error recorded, the
  // message hidden for about the backoff.
  EXPECT_EQ(status_of(e.conn, d, sent.command_id), opt_str{"IN_PROGRESS"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"TRANSIENT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"TIMEOUT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_msg"),
            opt_str{"downstream timed out"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "FAILED", "{error_type}"),
            opt_str{"TRANSIENT"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "FAILED", "{error_code}"),
            opt_str{"TIMEOUT"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "FAILED", "{attempt}"),
            opt_str{"1"});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "FAILED", "{max_attempts}"),
    opt_str{"3"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 1);
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
  stop_worker(w);
  EXPECT_EQ(attempts_of(e.conn, d, sent.command_id), 2);
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "FAILED", "RECEIVED", "COMPLETED"}));
  // The second delivery came after the backoff (>= ~2 s after the failure).
  auto gap = scalar(
    e.conn,
    "SELECT extract(epoch FROM (SELECT ts FROM commandbus.audit WHERE domain "
    "= $1 AND command_id = $2::uuid AND event_type = 'RECEIVED' ORDER BY ts "
    "DESC LIMIT 1) - (SELECT ts FROM commandbus.audit WHERE domain = $1 AND "
    "command_id = $2::uuid AND event_type = 'FAILED'))::text",
    d, sent.command_id.to_string());
  ASSERT_TRUE(gap.has_value());
  EXPECT_GE(std::stod(*gap), 1.5);
  std::lock_guard<std::mutex> guard{mtx};
  EXPECT_EQ(attempts, (std::vector<int>{1, 2}));
  EXPECT_EQ(w.stats().retried, 1);
  EXPECT_EQ(w.stats().received, 2);
}

TEST(WorkerRetry, UnknownExceptionIsTransientWithTypeNameAsCode) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto std_err = e.bus.send(make_req(d, "Std"));
  auto custom = e.bus.send(make_req(d, "Custom"));
  handler_registry reg;
  reg.add(d, "Std", [](const command&, handler_context& ctx) -> json {
    if (ctx.attempt() == 1)
      throw std::runtime_error("boom");
    return json::null();
  });
  reg.add(d, "Custom", [](const command&, handler_context& ctx) -> json {
    if (ctx.attempt() == 1)
      throw custom_failure("custom boom");
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, std_err.command_id, "COMPLETED")
           && has_status(e.conn, d, custom.command_id, "COMPLETED");
  }));
  stop_worker(w);
  EXPECT_EQ(audit_detail(e.conn, d, std_err.command_id, "FAILED",
                         "{error_type}"),
            opt_str{"TRANSIENT"});
  EXPECT_EQ(audit_detail(e.conn, d, std_err.command_id, "FAILED",
                         "{error_code}"),
            opt_str{"runtime_error"});
  EXPECT_EQ(
    audit_detail(e.conn, d, std_err.command_id, "FAILED", "{error_msg}"),
    opt_str{"boom"});
  EXPECT_EQ(
    audit_detail(e.conn, d, custom.command_id, "FAILED", "{error_code}"),
    opt_str{"custom_failure"});
  EXPECT_EQ(events(e.conn, d, custom.command_id),
            (strings{"SENT", "RECEIVED", "FAILED", "RECEIVED", "COMPLETED"}));
  EXPECT_EQ(attempts_of(e.conn, d, std_err.command_id), 2);
}

TEST(WorkerRetry, MissingHandlerIsTransientHandlerNotFoundError) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto req = make_req(d, "Unregistered");
  req.max_attempts = 2;
  auto sent = e.bus.send(req);
  handler_registry reg;
  reg.add(d, "Other", null_result);
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, sent.command_id, "IN_TROUBLESHOOTING_QUEUE");
  }));
  stop_worker(w);
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "FAILED", "RECEIVED", "MOVED_TO_TSQ"}));
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "FAILED", "{error_code}"),
            opt_str{"HandlerNotFoundError"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"TRANSIENT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"HandlerNotFoundError"});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ", "{reason}"),
    opt_str{"EXHAUSTED"});
}

// -- exhaustion ---------------------------------------------------------------

TEST(WorkerFailure, ExhaustionUsesTheCommandsMaxAttempts) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto two = make_req(d, "AlwaysFails");
  two.max_attempts = 2;
  two.reply_to = reply_q;
  auto four = make_req(d, "AlwaysFails");
  four.max_attempts = 4;
  four.reply_to = reply_q;
  auto s2 = e.bus.send(two);
  auto s4 = e.bus.send(four);
  std::mutex mtx;
  std::map<std::string, int> calls;
  handler_registry reg;
  reg.add(d, "AlwaysFails", [&](const command& cmd, handler_context&) -> json {
    {
      std::lock_guard<std::mutex> guard{mtx};
      calls[cmd.command_id.to_string()] += 1;
    }
    throw transient_command_error("UNAVAILABLE", "still down");
  });
  // The worker's policy says 3, but each command is tried as often as its
  // sender asked (its own max_attempts).
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, s2.command_id, "IN_TROUBLESHOOTING_QUEUE")
           && has_status(e.conn, d, s4.command_id, "IN_TROUBLESHOOTING_QUEUE");
  }));
  stop_worker(w);
  for (auto [sent, max] : {std::make_pair(s2, 2), std::make_pair(s4, 4)}) {
    SCOPED_TRACE("max_attempts " + std::to_string(max));
    auto id = sent.command_id;
    EXPECT_EQ(attempts_of(e.conn, d, id), max);
    strings expected{"SENT"};
    for (int i = 1; i < max; ++i) {
      expected.push_back("RECEIVED");
      expected.push_back("FAILED");
    }
    expected.push_back("RECEIVED");
    expected.push_back("MOVED_TO_TSQ");
    EXPECT_EQ(events(e.conn, d, id), expected);
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{reason}"),
              opt_str{"EXHAUSTED"});
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{attempt}"),
              opt_str{std::to_string(max)});
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{max_attempts}"),
              opt_str{std::to_string(max)});
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{error_type}"),
              opt_str{"TRANSIENT"});
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{error_code}"),
              opt_str{"UNAVAILABLE"});
    EXPECT_EQ(column(e.conn, d, id, "last_error_type"), opt_str{"TRANSIENT"});
    EXPECT_EQ(column(e.conn, d, id, "last_error_code"), opt_str{"UNAVAILABLE"});
    EXPECT_TRUE(archived(e.conn, queue_of(d), sent.msg_id));
    std::lock_guard<std::mutex> guard{mtx};
    EXPECT_EQ(calls[id.to_string()], max);
  }
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  // No reply on exhaustion.
  EXPECT_EQ(messages(e.conn, reply_q).size(), 0u);
  auto s = w.stats();
  EXPECT_EQ(s.moved_to_tsq, 2);
  EXPECT_EQ(s.retried, 1 + 3);
}
