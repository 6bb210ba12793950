// A handler that returns: what it is given (the command and its context),
// and what success leaves behind (the message deleted, the command
// COMPLETED, the audit trail SENT, RECEIVED, COMPLETED, and a SUCCESS reply
// with the result when the command named a reply queue); the same outcomes
// for non-blocking handlers, which run on the scheduler's threads, beside
// blocking ones on threads of their own. Against the real database, state
// checked with SQL.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/model/errors.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

// -- the handler's command and context ----------------------------------------

TEST(WorkerRun, HandlerGetsCommandAndContext) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto req = make_req(d, "DebitAccount", R"({"amount":100,"currency":"EUR"})");
  req.correlation_id = uuid::random();
  req.reply_to = reply_q;
  req.max_attempts = 5;
  auto sent = e.bus.send(req);
  std::mutex mtx;
  std::optional<command> seen;
  int attempt = 0, max_attempts = 0;
  int64_t msg_id = 0;
  bool cancelled = true;
  handler_registry reg;
  reg.add(d, "DebitAccount", [&](const command& cmd, handler_context& ctx) {
    std::lock_guard<std::mutex> guard{mtx};
    seen = cmd;
    attempt = ctx.attempt();
    max_attempts = ctx.max_attempts();
    msg_id = ctx.msg_id();
    cancelled = ctx.cancelled();
    // ctx.cmd() is the same command.
    EXPECT_EQ(ctx.cmd(), cmd);
    return obj(R"({"ok":true})");
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
  stop_worker(w);
  std::lock_guard<std::mutex> guard{mtx};
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->domain, d);
  EXPECT_EQ(seen->command_type, "DebitAccount");
  EXPECT_EQ(seen->command_id, req.command_id);
  EXPECT_TRUE(jeq(e.conn, seen->data.text(), "{}",
                  R"({"amount":100,"currency":"EUR"})"))
    << seen->data.text();
  EXPECT_EQ(seen->correlation_id, req.correlation_id);
  EXPECT_EQ(seen->reply_to, opt_str{reply_q});
  EXPECT_EQ(attempt, 1);
  EXPECT_EQ(max_attempts, 5);
  EXPECT_EQ(msg_id, sent.msg_id);
  EXPECT_EQ(column(e.conn, d, sent.command_id, "msg_id"),
            opt_str{std::to_string(msg_id)});
  EXPECT_FALSE(cancelled);
}

// -- success and its reply ----------------------------------------------------

TEST(WorkerRun, SuccessDeletesMessageCompletesAuditsAndReplies) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto with_reply = make_req(d, "Ok", R"({"n":1})");
  with_reply.reply_to = reply_q;
  with_reply.correlation_id = uuid::random();
  auto r1 = e.bus.send(with_reply);
  auto r2 = e.bus.send(make_req(d, "Ok", R"({"n":2})")); // no reply_to
  handler_registry reg;
  reg.add(d, "Ok", [](const command& cmd, handler_context&) {
    return obj(R"({"balance":42,"echo":)" + cmd.data.text() + "}");
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, r1.command_id, "COMPLETED")
           && has_status(e.conn, d, r2.command_id, "COMPLETED");
  }));
  stop_worker(w);
  // The messages are deleted, not archived.
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  EXPECT_EQ(archive_rows(e.conn, queue_of(d)), 0);
  EXPECT_EQ(events(e.conn, d, r1.command_id),
            (strings{"SENT", "RECEIVED", "COMPLETED"}));
  EXPECT_EQ(events(e.conn, d, r2.command_id),
            (strings{"SENT", "RECEIVED", "COMPLETED"}));
  EXPECT_EQ(audit_detail(e.conn, d, r1.command_id, "COMPLETED", "{msg_id}"),
            opt_str{std::to_string(r1.msg_id)});
  EXPECT_EQ(audit_detail(e.conn, d, r1.command_id, "COMPLETED", "{reply_to}"),
            opt_str{reply_q});
  EXPECT_EQ(
    audit_detail(e.conn, d, r1.command_id, "COMPLETED", "{has_result}"),
    opt_str{"true"});
  EXPECT_EQ(audit_detail(e.conn, d, r2.command_id, "COMPLETED", "{reply_to}"),
            std::nullopt);
  // Exactly one reply: the command without reply_to gets none.
  auto replies = messages(e.conn, reply_q);
  ASSERT_EQ(replies.size(), 1u);
  auto& rep = replies[0];
  EXPECT_EQ(jget(e.conn, rep, "{command_id}"),
            opt_str{r1.command_id.to_string()});
  EXPECT_EQ(jget(e.conn, rep, "{correlation_id}"),
            opt_str{with_reply.correlation_id->to_string()});
  EXPECT_EQ(jget(e.conn, rep, "{outcome}"), opt_str{"SUCCESS"});
  EXPECT_TRUE(jeq(e.conn, rep, "{result}", R"({"balance":42,"echo":{"n":1}})"))
    << rep;
  auto s = w.stats();
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.received, 2);
  EXPECT_EQ(s.in_flight, 0);
}

TEST(WorkerRun, SuccessWithNullResultRepliesWithNullResult) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto req = make_req(d, "Ok");
  req.reply_to = reply_q;
  auto sent = e.bus.send(req);
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
  stop_worker(w);
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "COMPLETED", "{has_result}"),
    opt_str{"false"});
  auto replies = messages(e.conn, reply_q);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(jget(e.conn, replies[0], "{outcome}"), opt_str{"SUCCESS"});
  EXPECT_TRUE(jhas(e.conn, replies[0], "result")) << replies[0];
  EXPECT_EQ(jget(e.conn, replies[0], "{result}"), std::nullopt);
  // The bus generated a correlation id; the reply carries it.
  EXPECT_EQ(jget(e.conn, replies[0], "{correlation_id}"),
            column(e.conn, d, sent.command_id, "correlation_id"));
}

// -- handler modes ------------------------------------------------------------

TEST(WorkerModes, NonBlockingHandlersRunBesideBlockingOnesWithTheSameOutcomes) {
  bus_env e;
  auto d = test::unique_name("wk");
  std::vector<uuid> fast, slow;
  for (int i = 0; i < 20; ++i) {
    fast.push_back(e.bus.send(make_req(d, "Fast", R"({"n":7})")).command_id);
    slow.push_back(e.bus.send(make_req(d, "Slow")).command_id);
  }
  auto rule = e.bus.send(make_req(d, "Rule"));
  auto extend = e.bus.send(make_req(d, "Extend"));
  std::mutex mtx;
  std::set<std::thread::id> fast_threads, slow_threads;
  auto note = [&](std::set<std::thread::id>& into) {
    std::lock_guard<std::mutex> guard{mtx};
    into.insert(std::this_thread::get_id());
  };
  std::atomic<bool> extend_failed{false};
  handler_registry reg;
  reg.add(
      d, "Fast",
      [&](const command& cmd, handler_context&) -> json {
        note(fast_threads);
        return cmd.data;
      },
      handler_mode::non_blocking);
  reg.add(
      d, "Rule",
      [&](const command&, handler_context&) -> json {
        throw business_rule_error("LIMIT", "over the limit");
      },
      handler_mode::non_blocking);
  reg.add(
      d, "Extend",
      [&](const command&, handler_context& ctx) -> json {
        try {
          ctx.extend_visibility(120s);
        } catch (const std::exception&) {
          extend_failed = true;
        }
        return json::null();
      },
      handler_mode::non_blocking);
  reg.add(d, "Slow", [&](const command&, handler_context&) -> json {
    note(slow_threads);
    std::this_thread::sleep_for(1ms); // a blocking handler may block
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return count_status(e.conn, d, "COMPLETED") == 41
           && has_status(e.conn, d, rule.command_id, "FAILED");
  }));
  stop_worker(w);
  for (auto& id : fast) {
    EXPECT_EQ(events(e.conn, d, id),
              (strings{"SENT", "RECEIVED", "COMPLETED"}));
  }
  EXPECT_EQ(events(e.conn, d, rule.command_id),
            (strings{"SENT", "RECEIVED", "BUSINESS_RULE_FAILED"}));
  EXPECT_TRUE(has_status(e.conn, d, extend.command_id, "COMPLETED"));
  EXPECT_FALSE(extend_failed.load());
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  // Blocking handlers have threads of their own, never the scheduler
  // threads that ran the non-blocking ones.
  std::lock_guard<std::mutex> guard{mtx};
  EXPECT_FALSE(fast_threads.empty());
  EXPECT_FALSE(slow_threads.empty());
  for (auto& t : fast_threads)
    EXPECT_EQ(slow_threads.count(t), 0u);
}
