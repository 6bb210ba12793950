// Delayed commands (docs/scheduling.md, "Delayed commands") through the
// client library against the real PostgreSQL: a not-before time becomes the
// message's vt, so that no reader of the queue, ours or a reference-style
// pgmq.read, takes the command early; the rows are a normal send's; the
// scheduled figures, listing and due time; the cancel before it runs (also
// under a cut connection).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/stats.hpp"
#include "cmdbus/db/troubleshooting.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

// The message row of `msg_id`: read_ct, whether vt is later than the
// server's clock, vt as text.
struct message_row {
  bool exists = false;
  int64_t read_ct = 0;
  bool hidden = false;
  std::string vt;
};

message_row message_of(db::connection& c, const std::string& domain,
                       int64_t msg_id) {
  auto r = c.query("SELECT read_ct, vt > clock_timestamp(), vt::text FROM "
                   "pgmq.q_"
                     + queue_of(domain) + " WHERE msg_id = $1::bigint",
                   static_cast<long long>(msg_id));
  message_row out;
  if (r.rows() == 0)
    return out;
  out.exists = true;
  out.read_ct = r.int64(0, 0);
  out.hidden = r.boolean(0, 1);
  out.vt = std::string{r.text(0, 2)};
  return out;
}

// What a reference worker does: pgmq.read of up to 10 messages with a 30 s
// visibility timeout, FIFO. Returns, per message taken, whether the server's
// clock had passed `not_before` at the read.
std::vector<std::pair<int64_t, bool>> reference_read(db::connection& c,
                                                     const std::string& domain,
                                                     timestamp not_before) {
  auto r = c.query("SELECT msg_id, clock_timestamp() >= $2::timestamptz FROM "
                   "pgmq.read($1, 30, 10)",
                   queue_of(domain), format_timestamp(not_before));
  std::vector<std::pair<int64_t, bool>> out;
  for (int i = 0; i < r.rows(); ++i)
    out.emplace_back(r.int64(i, 0), r.boolean(i, 1));
  return out;
}

timestamp server_now(db::connection& c) {
  auto r = c.exec("SELECT clock_timestamp()::text");
  return *parse_timestamp(r.text(0, 0));
}

} // namespace

TEST(DelayedSend,
     MessageIsHiddenUntilItsNotBeforeTimeAndTheRowsAreANormalSends) {
  bus_env env;
  auto domain = unique_name("dly");
  env.bus.ensure_queue(queue_of(domain));
  auto req = make_req(domain, "Later", R"({"n": 1})");
  req.not_before = server_now(env.conn) + 1h;
  auto sent = env.bus.send(req);
  auto m = message_of(env.conn, domain, sent.msg_id);
  ASSERT_TRUE(m.exists);
  EXPECT_EQ(m.read_ct, 0);
  EXPECT_TRUE(m.hidden);
  // vt is exactly the not-before time.
  EXPECT_EQ(env.conn
              .query("SELECT vt = $2::timestamptz FROM pgmq.q_"
                       + queue_of(domain) + " WHERE msg_id = $1::bigint",
                     static_cast<long long>(sent.msg_id),
                     format_timestamp(*req.not_before))
              .boolean(0, 0),
            true);
  // The message JSON has the reference's fields and nothing more.
  auto keys = env.conn.query("SELECT string_agg(k, ',' ORDER BY k) FROM "
                             "pgmq.q_"
                               + queue_of(domain)
                               + ", jsonb_object_keys(message) k WHERE "
                                 "msg_id = $1::bigint",
                             static_cast<long long>(sent.msg_id));
  EXPECT_EQ(std::string{keys.text(0, 0)},
            "command_id,command_type,correlation_id,data,domain");
  // The command row is PENDING with a SENT audit, as for any send.
  auto meta = env.bus.get_command(domain, req.command_id);
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->status, command_status::pending);
  EXPECT_EQ(meta->msg_id, sent.msg_id);
  auto trail = env.bus.get_audit_trail(req.command_id, domain);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "SENT");
  // A reference-style reader does not get it.
  EXPECT_TRUE(reference_read(env.conn, domain, *req.not_before).empty());
}

TEST(DelayedSend, ReferenceStyleConsumerNeverTakesItEarly) {
  bus_env env;
  auto domain = unique_name("dly");
  env.bus.ensure_queue(queue_of(domain));
  auto req = make_req(domain, "Soon");
  req.not_before = server_now(env.conn) + 1500ms;
  auto sent = env.bus.send(req);
  // A plain command sent after it is read at once; the delayed one only
  // once the server's clock passed its not-before time.
  auto plain = env.bus.send(make_req(domain, "Now"));
  std::vector<std::pair<int64_t, bool>> taken;
  ASSERT_TRUE(eventually(
    [&] {
      for (auto& x : reference_read(env.conn, domain, *req.not_before))
        taken.push_back(x);
      for (auto& x : taken)
        if (x.first == sent.msg_id)
          return true;
      return false;
    },
    20s));
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].first, plain.msg_id);
  EXPECT_EQ(taken[1].first, sent.msg_id);
  EXPECT_TRUE(taken[1].second) << "read before its not-before time";
}

TEST(DelayedSend, NotBeforeInThePastMeansNow) {
  bus_env env;
  auto domain = unique_name("dly");
  env.bus.ensure_queue(queue_of(domain));
  auto req = make_req(domain, "Past");
  req.not_before = server_now(env.conn) - 1h;
  auto sent = env.bus.send(req);
  auto r = env.conn.query("SELECT vt >= enqueued_at, vt <= clock_timestamp() "
                          "FROM pgmq.q_"
                            + queue_of(domain) + " WHERE msg_id = $1::bigint",
                          static_cast<long long>(sent.msg_id));
  EXPECT_TRUE(r.boolean(0, 0)) << "vt lies before the send";
  EXPECT_TRUE(r.boolean(0, 1));
  EXPECT_FALSE(env.bus.scheduled_due_at(domain, req.command_id));
}

TEST(DelayedSend, EachCommandOfABulkSendAndOfABatchHasItsOwnTime) {
  // The INSERT path (small chunks), the COPY path (copy_threshold 2) and
  // create_batch.
  for (size_t copy_threshold : {size_t{1000}, size_t{2}}) {
    SCOPED_TRACE("copy_threshold " + std::to_string(copy_threshold));
    auto pool = db::pool{pool_options()};
    command_bus_options opts;
    opts.copy_threshold = copy_threshold;
    command_bus bus{pool, opts};
    auto conn = connect();
    auto domain = unique_name("dly");
    bus.ensure_queue(queue_of(domain));
    auto now = server_now(conn);
    std::vector<send_request> reqs{make_req(domain, "A"), make_req(domain, "B"),
                                   make_req(domain, "C")};
    reqs[1].not_before = now + 1h;
    reqs[2].not_before = now - 1h;
    auto res = bus.send_batch(reqs);
    ASSERT_EQ(res.results.size(), 3u);
    EXPECT_FALSE(message_of(conn, domain, res.results[0].msg_id).hidden);
    EXPECT_TRUE(message_of(conn, domain, res.results[1].msg_id).hidden);
    EXPECT_FALSE(message_of(conn, domain, res.results[2].msg_id).hidden);
    EXPECT_EQ(bus.scheduled_due_at(domain, reqs[1].command_id),
              reqs[1].not_before);
    // A chunk without any delay keeps the undelayed path and its rows.
    auto plain = bus.send_batch({make_req(domain, "D"), make_req(domain, "E")});
    for (auto& x : plain.results)
      EXPECT_FALSE(message_of(conn, domain, x.msg_id).hidden);
  }
  bus_env env;
  auto domain = unique_name("dly");
  env.bus.ensure_queue(queue_of(domain));
  std::vector<batch_command> cmds(2);
  cmds[0].command_type = "Now";
  cmds[0].command_id = uuid::random();
  cmds[1].command_type = "Later";
  cmds[1].command_id = uuid::random();
  cmds[1].not_before = server_now(env.conn) + 1h;
  auto b = env.bus.create_batch(domain, cmds);
  EXPECT_FALSE(
    message_of(env.conn, domain, b.command_results[0].msg_id).hidden);
  EXPECT_TRUE(message_of(env.conn, domain, b.command_results[1].msg_id).hidden);
}

TEST(DelayedSend, ScheduledCommandsAreListedCountedAndHaveADueTime) {
  bus_env env;
  auto domain = unique_name("dly");
  env.bus.ensure_queue(queue_of(domain));
  auto now = server_now(env.conn);
  auto late = make_req(domain, "Late");
  late.not_before = now + 2h;
  auto early = make_req(domain, "Early");
  early.not_before = now + 1h;
  env.bus.send(late);
  env.bus.send(early);
  env.bus.send(make_req(domain, "Plain"));
  // A retry waiting for its backoff: read once, invisible again.
  auto retried = make_req(domain, "Retried");
  auto r = env.bus.send(retried);
  env.conn.query("UPDATE pgmq.q_" + queue_of(domain)
                   + " SET read_ct = 1, vt = now() + interval '1 hour' WHERE "
                     "msg_id = $1::bigint",
                 static_cast<long long>(r.msg_id));
  command_query q;
  q.domain = domain;
  auto listed = env.bus.query_scheduled(q);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].command.command_id, early.command_id);
  EXPECT_EQ(listed[0].due_at, *early.not_before);
  EXPECT_EQ(listed[1].command.command_id, late.command_id);
  q.command_type = "Late";
  ASSERT_EQ(env.bus.query_scheduled(q).size(), 1u);
  q.command_type.reset();
  q.status = command_status::in_progress;
  EXPECT_TRUE(env.bus.query_scheduled(q).empty());
  EXPECT_EQ(env.bus.scheduled_due_at(domain, early.command_id),
            early.not_before);
  EXPECT_FALSE(env.bus.scheduled_due_at(domain, retried.command_id));
  auto st = db::collect_stats(env.conn, {domain});
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].queue_depth, 4);
  EXPECT_EQ(st[0].visible, 1);
  EXPECT_EQ(st[0].scheduled, 2);
  EXPECT_EQ(st[0].invisible, 1);
  auto figures = db::collect_queue_figures(env.conn, {domain});
  ASSERT_EQ(figures.size(), 1u);
  EXPECT_EQ(figures[0].scheduled, 2);
  EXPECT_EQ(figures[0].visible, 1);
}

// -- cancel before it runs
// -----------------------------------------------------

TEST(DelayedCancel, WritesWhatTheTsqCancelWritesAndArchivesTheMessage) {
  bus_env env;
  troubleshooting_queue tsq{env.pool};
  auto domain = unique_name("dly");
  auto replies = unique_name("dly_replies");
  env.bus.ensure_queue(queue_of(domain));
  auto req = make_req(domain, "Later", R"({"n": 7})");
  req.reply_to = replies;
  req.not_before = server_now(env.conn) + 1h;
  auto sent = env.bus.send(req);
  auto res = tsq.cancel_pending(
    domain, req.command_id, std::string{"not needed"}, std::string{"alice"});
  EXPECT_FALSE(res.batch_id);
  auto meta = env.bus.get_command(domain, req.command_id);
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->status, command_status::canceled);
  EXPECT_FALSE(message_of(env.conn, domain, sent.msg_id).exists);
  EXPECT_EQ(env.conn
              .query("SELECT count(*) FROM pgmq.a_" + queue_of(domain)
                       + " WHERE msg_id = $1::bigint",
                     static_cast<long long>(sent.msg_id))
              .int64(0, 0),
            1);
  auto trail = env.bus.get_audit_trail(req.command_id, domain);
  ASSERT_EQ(trail.size(), 2u);
  EXPECT_EQ(trail[1].event_type, "OPERATOR_CANCEL");
  ASSERT_TRUE(trail[1].details);
  EXPECT_EQ(env.conn
              .query("SELECT $1::jsonb = jsonb_build_object('operator', "
                     "'alice', 'reason', 'not needed', 'reply_to', $2::text)",
                     trail[1].details->text(), replies)
              .boolean(0, 0),
            true);
  auto reply = env.conn.query("SELECT message->>'outcome', message->>'reason', "
                              "message->>'command_id' FROM pgmq.q_"
                              + replies);
  ASSERT_EQ(reply.rows(), 1);
  EXPECT_EQ(std::string{reply.text(0, 0)}, "CANCELED");
  EXPECT_EQ(std::string{reply.text(0, 1)}, "not needed");
  EXPECT_EQ(std::string{reply.text(0, 2)}, req.command_id.to_string());
  // Once canceled it cannot be canceled again.
  EXPECT_THROW(tsq.cancel_pending(domain, req.command_id, std::nullopt),
               not_pending_error);
  EXPECT_THROW(tsq.cancel_pending(domain, uuid::random(), std::nullopt),
               command_not_found_error);
}

TEST(DelayedCancel, LeavesACommandThatWasReadOrIsBeingRead) {
  bus_env env;
  troubleshooting_queue tsq{env.pool};
  auto domain = unique_name("dly");
  env.bus.ensure_queue(queue_of(domain));
  // Read before (a reference-style reader took it).
  auto read = make_req(domain, "Read");
  auto sent = env.bus.send(read);
  ASSERT_EQ(reference_read(env.conn, domain, server_now(env.conn)).size(), 1u);
  EXPECT_THROW(tsq.cancel_pending(domain, read.command_id, std::nullopt),
               not_pending_error);
  EXPECT_EQ(message_of(env.conn, domain, sent.msg_id).read_ct, 1);
  // Being claimed: another transaction holds the message's row lock, as a
  // worker's read does until it commits. The cancel neither waits nor
  // touches it.
  auto later = make_req(domain, "Later");
  later.not_before = server_now(env.conn) + 1h;
  auto held = env.bus.send(later);
  auto other = connect();
  other.exec("BEGIN");
  other.query("SELECT 1 FROM pgmq.q_" + queue_of(domain)
                + " WHERE msg_id = $1::bigint FOR UPDATE",
              static_cast<long long>(held.msg_id));
  EXPECT_TRUE(returns_within(
    [&tsq, domain, id = later.command_id] {
      EXPECT_THROW(tsq.cancel_pending(domain, id, std::nullopt),
                   not_pending_error);
    },
    10s));
  other.exec("ROLLBACK");
  EXPECT_EQ(env.bus.get_command(domain, later.command_id)->status,
            command_status::pending);
  // Free again: now it is canceled.
  tsq.cancel_pending(domain, later.command_id, std::nullopt);
  EXPECT_EQ(env.bus.get_command(domain, later.command_id)->status,
            command_status::canceled);
}

TEST(DelayedCancel, CountsInTheBatchAndMayCompleteIt) {
  bus_env env;
  troubleshooting_queue tsq{env.pool};
  auto domain = unique_name("dly");
  env.bus.ensure_queue(queue_of(domain));
  std::vector<batch_command> cmds(2);
  for (auto& c : cmds) {
    c.command_type = "Later";
    c.command_id = uuid::random();
    c.not_before = server_now(env.conn) + 1h;
  }
  auto b = env.bus.create_batch(domain, cmds);
  auto first = tsq.cancel_pending(domain, cmds[0].command_id, std::nullopt);
  EXPECT_EQ(first.batch_id, b.batch_id);
  EXPECT_FALSE(first.batch_completed);
  auto batch = env.bus.get_batch(domain, b.batch_id);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->canceled_count, 1);
  EXPECT_EQ(batch->in_troubleshooting_count, 0);
  auto second = tsq.cancel_pending(domain, cmds[1].command_id, std::nullopt);
  EXPECT_TRUE(second.batch_completed);
  batch = env.bus.get_batch(domain, b.batch_id);
  EXPECT_EQ(batch->canceled_count, 2);
  EXPECT_EQ(batch->in_troubleshooting_count, 0);
  EXPECT_EQ(batch->status, batch_status::completed_with_failures);
}

TEST(DelayedCancel, ACutConnectionMidCancelCommitsNothing) {
  bus_env env;
  auto domain = unique_name("dly");
  env.bus.ensure_queue(queue_of(domain));
  auto req = make_req(domain, "Later");
  req.not_before = server_now(env.conn) + 1h;
  auto sent = env.bus.send(req);
  // The cancel runs through a proxy that is cut while it waits for the
  // command row, which another transaction holds (after the cancel locked
  // the message).
  auto setting = env.conn.query("SELECT current_setting('port')");
  auto proxy = std::make_shared<tcp_proxy>(
    std::stoi(std::string{setting.text(0, 0)}));
  auto opts = pool_options(1);
  opts.dsn = dsn() + " host=127.0.0.1 port=" + std::to_string(proxy->port())
             + " connect_timeout=2";
  auto pool = std::make_shared<db::pool>(opts);
  auto holder = connect();
  holder.exec("BEGIN");
  holder.query("SELECT 1 FROM commandbus.command WHERE domain = $1 AND "
               "command_id = $2::uuid FOR UPDATE",
               domain, req.command_id.to_string());
  auto failed = std::make_shared<std::atomic<bool>>(false);
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread canceler{[pool, failed, done, domain, id = req.command_id] {
    try {
      troubleshooting_queue{*pool}.cancel_pending(domain, id, std::nullopt);
    } catch (const db::error& e) {
      failed->store(e.code() == db::errc::connection);
    } catch (...) {
    }
    done->store(true);
  }};
  // Waiting on the command row (blocked by the holder): the message is
  // locked by then.
  auto holder_pid = holder.exec("SELECT pg_backend_pid()").int64(0, 0);
  auto waiting = [&] {
    return env.conn
             .query("SELECT count(*) FROM pg_stat_activity WHERE "
                    "$1::int = ANY(pg_blocking_pids(pid))",
                    static_cast<int>(holder_pid))
             .int64(0, 0)
           > 0;
  };
  EXPECT_TRUE(eventually(waiting, 20s));
  proxy->cut();
  EXPECT_TRUE(eventually([&] { return done->load(); }, 20s));
  canceler.join();
  EXPECT_TRUE(failed->load());
  holder.exec("ROLLBACK");
  // Nothing of the cancel committed: still PENDING, message in the queue,
  // never read, no audit but SENT.
  EXPECT_EQ(env.bus.get_command(domain, req.command_id)->status,
            command_status::pending);
  auto m = message_of(env.conn, domain, sent.msg_id);
  EXPECT_TRUE(m.exists);
  EXPECT_EQ(m.read_ct, 0);
  EXPECT_EQ(env.bus.get_audit_trail(req.command_id, domain).size(), 1u);
  // Once the server has ended the cut session (and its message lock), a
  // cancel goes through.
  troubleshooting_queue tsq{env.pool};
  EXPECT_TRUE(eventually(
    [&] {
      try {
        tsq.cancel_pending(domain, req.command_id, std::nullopt);
        return true;
      } catch (const not_pending_error&) {
        return false;
      }
    },
    20s));
  EXPECT_EQ(env.bus.get_command(domain, req.command_id)->status,
            command_status::canceled);
}
