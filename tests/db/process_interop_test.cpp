// Process managers we do not run, beside a cmdbus worker that serves other
// process types in the same domain. The foreign manager is an external
// program (tests/support/foreign_process_manager.py, Python with psycopg2)
// that writes the reference library's rows and routes replies as the
// reference's router does: pgmq.read, apply its own, delete the rest.
//
// 1. On the same domain and the same reply queue, `cmdbus worker --demo`
//    (process type DemoOrder) runs the foreign processes' commands and its
//    own processes, and never reads, delays or archives a foreign reply:
//    first with the foreign router stopped (its replies wait in the queue
//    with read_ct 0 while DemoOrder processes run to completion), then
//    with both routing (every foreign reply is read once, by its manager).
// 2. The same while our workers are frozen (SIGSTOP), cut from the
//    database and killed (kill -9) as the foreign manager routes: every
//    foreign reply still reaches it at its first read.
// 3. A process type with a reply queue of its own runs to completion while
//    a reference-like manager, which deletes the replies of types it does
//    not know, routes the domain's shared queue: the way to run the two
//    side by side (docs/processes.md).

#include <gtest/gtest.h>

#include <csignal>
#include <future>
#include <string>
#include <vector>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/wire.hpp"
#include "cmdbus/process/manager.hpp"
#include "cmdbus/process/registry.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/process.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/worker_env.hpp"
#include "tests/unit/process_workflow_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

constexpr const char* foreign_type = "ForeignOrder";
constexpr int foreign_processes = 20;
constexpr int foreign_steps = 3;

// Runs the foreign manager (Debian's Python, which has psycopg2).
process_result foreign(const std::string& mode, const std::string& domain,
                       const std::string& queue,
                       const std::vector<std::string>& extra) {
  std::vector<std::string> argv{"/usr/bin/python3",
                                CMDBUS_SOURCE_DIR
                                "/tests/support/foreign_process_manager.py",
                                mode,
                                "--dsn",
                                test::dsn(),
                                "--domain",
                                domain,
                                "--queue",
                                queue,
                                "--type",
                                foreign_type,
                                "--steps",
                                std::to_string(foreign_steps)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_process(argv);
}

// Starts the foreign processes; returns their ids.
strings start_foreign(db::connection& c, const std::string& domain,
                      const std::string& queue) {
  auto r = foreign("start", domain, queue,
                   {"--processes", std::to_string(foreign_processes)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  strings ids;
  if (r.exit_code != 0)
    return ids;
  auto rows = c.query(
    "SELECT jsonb_array_elements_text($1::jsonb -> 'process_ids')", r.out);
  for (int i = 0; i < rows.rows(); ++i)
    ids.emplace_back(rows.text(i, 0));
  return ids;
}

int64_t count(db::connection& c, const std::string& sql,
              const std::string& domain) {
  return std::stoll(scalar(c, sql, domain).value_or("-1"));
}

// Counts the messages of `table` (pgmq.q_... or pgmq.a_...) that answer a
// process of `domain` of the foreign type, with `where` on top.
int64_t foreign_messages(db::connection& c, const std::string& table,
                         const std::string& domain,
                         const std::string& where = "TRUE") {
  return count(c,
               "SELECT count(*) FROM pgmq." + table + " m WHERE " + where
                 + " AND EXISTS (SELECT 1 FROM commandbus.process p WHERE "
                   "p.domain = $1 AND p.process_type = 'ForeignOrder' AND "
                   "p.process_id::text = m.message->>'correlation_id')",
               domain);
}

std::vector<std::string> worker_args(const std::string& domain,
                                     const std::string& dsn = test::dsn()) {
  return {"worker",
          "--demo",
          "--domain",
          domain,
          "--dsn",
          dsn,
          "--concurrency",
          "8",
          "--visibility-timeout",
          "1",
          "--statement-timeout",
          "500ms",
          "--poll-interval",
          "100ms",
          "--quiet"};
}

std::string start_demo_order(const std::string& domain,
                             const std::string& order) {
  auto r = run_cmdbus({"process", "start", domain, "DemoOrder", "--data",
                       R"({"order_id": ")" + order + R"("})", "--json"},
                      {"CMDBUS_DSN=" + test::dsn()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto conn = connect();
  return jget(conn, r.out, "{process_id}").value_or("");
}

} // namespace

TEST(ProcessInterop, AWorkerNeverTouchesTheRepliesOfAManagerItDoesNotRun) {
  bus_env env;
  auto& c = env.conn;
  auto d = unique_name("pif");
  auto queue = process_reply_queue(d);
  auto q_table = db::queue_table(queue);
  auto a_table = "a_" + q_table.substr(2);
  env.bus.ensure_queue(db::command_queue(d));
  env.bus.ensure_queue(queue);

  // The foreign processes' first commands wait in the command queue.
  auto ids = start_foreign(c, d, queue);
  ASSERT_EQ(ids.size(), size_t{foreign_processes});

  background_cmdbus worker{worker_args(d)};
  // Our worker runs their commands (the demo handler serves `Test`): the
  // foreign replies are in the shared queue, their router not running.
  ASSERT_TRUE(eventually(
    [&] {
      return foreign_messages(c, q_table, d) + foreign_messages(c, a_table, d)
             == foreign_processes;
    },
    30s))
    << foreign_messages(c, q_table, d) << " foreign replies queued";

  // Our own processes run to completion through the same queue: our router
  // read it again and again after the foreign replies arrived.
  strings ours;
  for (int i = 0; i < 4; ++i)
    ours.push_back(start_demo_order(d, "o-" + std::to_string(i)));
  auto ours_done = [&] {
    return count(c,
                 "SELECT count(*) FROM commandbus.process WHERE domain = $1 "
                 "AND process_type = 'DemoOrder' AND status = 'COMPLETED'",
                 d)
           == static_cast<int64_t>(ours.size());
  };
  ASSERT_TRUE(eventually(ours_done, 30s));

  // Every foreign reply is still there as it was sent: never read (read_ct
  // 0), visible (no visibility timeout set), not archived.
  EXPECT_EQ(foreign_messages(c, q_table, d,
                             "m.read_ct = 0 AND m.vt <= clock_timestamp()"),
            foreign_processes);
  EXPECT_EQ(foreign_messages(c, a_table, d), 0);

  // The foreign router runs beside our worker until its processes are done;
  // each of its replies reached it at its first read.
  auto r = foreign("run", d, queue, {"--deadline", "40", "--vt", "30"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(jeq(c, r.out, "{completed}", "true")) << r.out;
  EXPECT_TRUE(jeq(c, r.out, "{max_read_ct}", "1")) << r.out;
  EXPECT_TRUE(jeq(c, r.out, "{applied}",
                  std::to_string(foreign_processes * foreign_steps)))
    << r.out;
  EXPECT_TRUE(jeq(c, r.out, "{deleted_unknown}", "0")) << r.out;
  EXPECT_EQ(count(c,
                  "SELECT count(*) FROM commandbus.process WHERE domain = $1 "
                  "AND process_type = 'ForeignOrder' AND status = 'COMPLETED'",
                  d),
            foreign_processes);
  EXPECT_EQ(count(c,
                  "SELECT count(*) FROM commandbus.process_audit a JOIN "
                  "commandbus.process p USING (domain, process_id) WHERE "
                  "a.domain = $1 AND p.process_type = 'ForeignOrder' AND "
                  "a.reply_outcome = 'SUCCESS'",
                  d),
            foreign_processes * foreign_steps);
  EXPECT_EQ(foreign_messages(c, a_table, d), 0);
  EXPECT_EQ(foreign_messages(c, q_table, d), 0);

  // Ours are untouched by all this, and the worker stops cleanly.
  EXPECT_TRUE(ours_done());
  auto stopped = worker.stop();
  ASSERT_TRUE(stopped) << "the worker did not stop on SIGTERM";
  EXPECT_EQ(stopped->exit_code, 0) << stopped->err;
}

TEST(ProcessInterop, ForeignRepliesStayUntouchedWhileOurWorkersFail) {
  bus_env env;
  auto& c = env.conn;
  auto d = unique_name("pff");
  auto queue = process_reply_queue(d);
  auto a_table = "a_" + db::queue_table(queue).substr(2);
  env.bus.ensure_queue(db::command_queue(d));
  env.bus.ensure_queue(queue);
  auto ids = start_foreign(c, d, queue);
  ASSERT_EQ(ids.size(), size_t{foreign_processes});

  // Worker A reaches the database through a proxy (to cut it), B directly;
  // both serve DemoOrder, so their routers read the shared queue throughout.
  tcp_proxy proxy{std::stoi(*scalar(c, "SELECT current_setting('port')"))};
  auto proxied = test::dsn() + " port=" + std::to_string(proxy.port());
  auto a = std::make_unique<background_cmdbus>(worker_args(d, proxied));
  background_cmdbus b{worker_args(d)};
  auto routed = std::async(std::launch::async, [&] {
    return foreign("run", d, queue, {"--deadline", "60", "--vt", "30"});
  });
  auto applied = [&] {
    return count(c,
                 "SELECT count(*) FROM commandbus.process_audit a JOIN "
                 "commandbus.process p USING (domain, process_id) WHERE "
                 "a.domain = $1 AND p.process_type = 'ForeignOrder' AND "
                 "a.reply_outcome IS NOT NULL",
                 d);
  };
  auto reaches = [&](int64_t n) {
    return eventually([&] { return applied() >= n; }, 30s);
  };
  EXPECT_TRUE(reaches(10));
  a->signal(SIGSTOP);
  EXPECT_TRUE(reaches(25));
  proxy.cut();
  a->signal(SIGCONT);
  proxy.restore();
  EXPECT_TRUE(reaches(40));
  a->signal(SIGKILL);
  EXPECT_TRUE(a->wait(10s));
  a.reset();

  auto r = routed.get();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(jeq(c, r.out, "{max_read_ct}", "1")) << r.out;
  EXPECT_TRUE(jeq(c, r.out, "{applied}",
                  std::to_string(foreign_processes * foreign_steps)))
    << r.out;
  EXPECT_TRUE(jeq(c, r.out, "{deleted_unknown}", "0")) << r.out;
  EXPECT_EQ(foreign_messages(c, a_table, d), 0);

  // Our own processes still run on the survivor.
  auto id = start_demo_order(d, "o-after");
  EXPECT_TRUE(eventually(
    [&] {
      return scalar(c,
                    "SELECT status FROM commandbus.process WHERE domain = $1 "
                    "AND process_id = $2::uuid",
                    d, id)
             == opt_str{"COMPLETED"};
    },
    30s));
  auto stopped = b.stop();
  ASSERT_TRUE(stopped) << "the worker did not stop on SIGTERM";
  EXPECT_EQ(stopped->exit_code, 0) << stopped->err;
}

TEST(ProcessInterop, ATypeOnItsOwnReplyQueueRunsBesideAReferenceManager) {
  // The reference-like manager deletes the replies of process types it
  // does not know; ours go to a queue of their own, so both run at once.
  bus_env env;
  auto& c = env.conn;
  auto d = unique_name("pio");
  auto shared_queue = process_reply_queue(d);
  auto own_queue = d + "__orders";
  env.bus.ensure_queue(db::command_queue(d));
  env.bus.ensure_queue(shared_queue);

  handler_registry handlers;
  for (auto* t : {"ReserveStock", "DebitAccount", "SendNotification",
                  "ReleaseStock", "RefundAccount", "Test"})
    handlers.add(d, t, null_result);
  auto order = std::shared_ptr<const workflow>(std::shared_ptr<void>{},
                                               &process_test::order_workflow());
  auto registry = std::make_shared<process_registry>();
  registry->add(d, order, {own_queue});
  process_registry copy = *registry;
  worker w{make_cfg({d}, 8), std::move(handlers), std::move(copy)};
  finally stop{[&] { stop_worker(w); }};
  w.start();

  auto ids = start_foreign(c, d, shared_queue);
  ASSERT_EQ(ids.size(), size_t{foreign_processes});
  process_manager pm{env.pool, registry};
  std::vector<uuid> ours;
  for (int i = 0; i < 20; ++i)
    ours.push_back(
      pm.start(d, "OrderFulfilment",
               process_test::order_input("o-" + std::to_string(i), 5)));
  auto r = foreign("run", d, shared_queue, {"--deadline", "40", "--vt", "30"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(jeq(c, r.out, "{max_read_ct}", "1")) << r.out;
  // None of ours passed through the shared queue.
  EXPECT_TRUE(jeq(c, r.out, "{deleted_unknown}", "0")) << r.out;
  for (auto& id : ours)
    EXPECT_TRUE(eventually([&] {
      auto p = pm.get(d, id);
      return p && p->status == process_status::completed;
    }))
      << id.to_string();
  EXPECT_EQ(count(c,
                  "SELECT count(*) FROM commandbus.command WHERE domain = $1 "
                  "AND command_type <> 'Test' AND reply_queue <> '"
                    + own_queue + "'",
                  d),
            0);
  EXPECT_EQ(archive_rows(c, own_queue), 0);
  EXPECT_EQ(archive_rows(c, shared_queue), 0);
}
