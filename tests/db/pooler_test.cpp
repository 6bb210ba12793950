// cmdbus behind PgBouncer (tests/support/pgbouncer.hpp), in session and in
// transaction pooling mode. What each mode keeps of a client's session
// (named prepared statements, session settings, LISTEN, advisory locks),
// what a connection opened for a transaction pooler does instead, and that
// workers, sends and the tool complete every command exactly once through
// either mode, also when the pooler dies or drops its clients and when a
// worker is killed or frozen. Last, the connections one worker process
// opens (docs/operations.md, "Connection poolers").

#include <gtest/gtest.h>

#include <csignal>
#include <map>

#include "cmdbus/db/migrate.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/sql/bundle.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/pgbouncer.hpp"
#include "tests/support/process.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

db::connection open_for(const std::string& dsn, db::pooler_mode pooler,
                        std::optional<std::chrono::milliseconds> timeout = {}) {
  db::connection_options opts;
  opts.pooler = pooler;
  opts.statement_timeout = timeout;
  return db::connection::open(dsn, opts);
}

std::string text_of(db::connection& c, const std::string& sql) {
  return c.exec(sql).opt_text(0, 0).value_or("");
}

int64_t plus_one(db::connection& c, int64_t x) {
  return c
    .exec_prepared("pooler_plus_one", "SELECT $1::bigint + 1",
                   {db::to_param(std::to_string(x))})
    .int64(0, 0);
}

/// The SQLSTATE of what `fn` throws ("" when it throws nothing).
template <class F>
std::string sqlstate_of(F fn) {
  try {
    fn();
  } catch (const db::error& e) {
    return e.sqlstate();
  }
  return "";
}

/// The test database's name, as the pooler's admin console names its pool.
std::string test_dbname() {
  auto c = connect();
  return text_of(c, "SELECT current_database()");
}

/// Commands of `domain` without exactly one COMPLETED event.
int64_t not_completed_once(db::connection& c, const std::string& domain) {
  return c
    .query("SELECT count(*) FROM commandbus.command c WHERE c.domain = $1 "
           "AND (SELECT count(*) FROM commandbus.audit a WHERE a.domain = "
           "c.domain AND a.command_id = c.command_id AND a.event_type = "
           "'COMPLETED') <> 1",
           domain)
    .int64(0, 0);
}

/// Sends `n` demo commands to `domain` on `bus`: half one by one, half in
/// one send_batch (its pipelines and chunks).
std::vector<uuid> send_commands(command_bus& bus, const std::string& domain,
                                int n) {
  std::vector<uuid> ids;
  std::vector<send_request> batch;
  for (int i = 0; i < n; ++i) {
    auto req = make_req(domain, "Test", "{}");
    ids.push_back(req.command_id);
    if (i % 2 == 0)
      bus.send(req);
    else
      batch.push_back(req);
  }
  bus.send_batch(batch);
  return ids;
}

/// A bus on connections through `dsn` opened for `pooler`.
struct pooled_bus {
  pooled_bus(const std::string& dsn, db::pooler_mode pooler)
    : pool(options(dsn, pooler)), bus(pool) {
    // nop
  }

  static db::pool_options options(const std::string& dsn,
                                  db::pooler_mode pooler) {
    auto opts = pool_options(2);
    opts.dsn = dsn;
    opts.connection.pooler = pooler;
    return opts;
  }

  db::pool pool;
  command_bus bus;
};

/// `cmdbus worker --demo` on `domain` through `dsn`, polling every 50 ms.
std::vector<std::string> worker_args(const std::string& domain,
                                     const std::string& dsn,
                                     const std::string& pooler) {
  return {"worker",
          "--demo",
          "--domain",
          domain,
          "--dsn",
          dsn,
          "--pooler",
          pooler,
          "--poll-interval",
          "50ms",
          "--visibility-timeout",
          "1",
          "--statement-timeout",
          "500ms",
          "--backoff",
          "0",
          "--quiet"};
}

} // namespace

TEST(Pooler, WhatEachModeKeepsOfASession) {
  // Transaction mode with one server connection for all clients: what one
  // client leaves in the server session, the next one finds there.
  {
    pgbouncer b{{pool_mode::transaction, 1, std::nullopt}};
    auto a = open_for(b.dsn(), db::pooler_mode::none);
    auto c = open_for(b.dsn(), db::pooler_mode::none);
    EXPECT_EQ(plus_one(a, 1), 2);
    // c prepares the name again, on the session a prepared it on.
    EXPECT_EQ(sqlstate_of([&] { plus_one(c, 1); }), "42P05");
    a.set_statement_timeout(1234ms);
    EXPECT_EQ(text_of(c, "SHOW statement_timeout"), "1234ms");
    // The pooler keeps DateStyle per client, though (we rely on it).
    c.exec("SET datestyle TO 'SQL, DMY'");
    EXPECT_EQ(text_of(a, "SHOW datestyle"), "ISO, MDY");
  }
  // The same, opened for a transaction pooler: unnamed statements (also
  // in pipelines), no session setting, no LISTEN, no migration.
  {
    pgbouncer b{{pool_mode::transaction, 2, std::nullopt}};
    auto a = open_for(b.dsn(), db::pooler_mode::transaction, 1000ms);
    auto c = open_for(b.dsn(), db::pooler_mode::transaction, 1000ms);
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(plus_one(i % 2 == 0 ? a : c, i), i + 1);
      auto results = (i % 2 == 0 ? c : a)
                       .pipeline({{"SELECT $1::bigint * 2",
                                   {db::to_param(std::to_string(i))},
                                   "pooler_twice"},
                                  {"SELECT 1", {}, "pooler_one"}});
      ASSERT_EQ(results.size(), 2u);
      EXPECT_EQ(results[0].int64(0, 0), 2 * i);
    }
    EXPECT_EQ(text_of(c, "SHOW statement_timeout"), "0")
      << "opened with a timeout, set nothing in the shared session";
    EXPECT_THROW(a.set_statement_timeout(1s), db::invalid_argument);
    EXPECT_THROW(a.listen("pooler_probe"), db::invalid_argument);
    EXPECT_THROW(db::migrate(a, sql::pgmq_files(), sql::commandbus_files()),
                 db::invalid_argument);
    // The server applies no timeout: refused, saying what to set.
    try {
      db::check_pooled_statement_timeout(a, 2s);
      ADD_FAILURE() << "no statement timeout accepted";
    } catch (const db::invalid_argument& e) {
      EXPECT_NE(std::string{e.what()}.find("ALTER ROLE"), std::string::npos)
        << e.what();
    }
    // A transaction keeps its server session: transaction-scoped advisory
    // locks work (the singleton jobs' kind).
    a.exec("BEGIN");
    EXPECT_EQ(text_of(a, "SELECT pg_try_advisory_xact_lock(42424242)"), "t");
    EXPECT_EQ(text_of(c, "SELECT pg_try_advisory_xact_lock(42424242)"), "f");
    a.exec("COMMIT");
    EXPECT_EQ(text_of(c, "SELECT pg_try_advisory_xact_lock(42424242)"), "t");
  }
  // A server timeout set by the pooler's connect query: accepted up to
  // the wanted one.
  {
    pgbouncer b{{pool_mode::transaction, 1, 1500ms}};
    auto a = open_for(b.dsn(), db::pooler_mode::transaction);
    EXPECT_NO_THROW(db::check_pooled_statement_timeout(a, 2s));
    EXPECT_THROW(db::check_pooled_statement_timeout(a, 1s),
                 db::invalid_argument);
    auto plain = open_for(b.dsn(), db::pooler_mode::none);
    EXPECT_NO_THROW(db::check_pooled_statement_timeout(plain, 1s))
      << "checks only behind a transaction pooler";
  }
  // Session mode: a server session per client, reset (DISCARD ALL) when
  // the client leaves; everything works as without a pooler.
  {
    pgbouncer b{{pool_mode::session, 2, std::nullopt}};
    auto c = open_for(b.dsn(), db::pooler_mode::session);
    {
      auto a = open_for(b.dsn(), db::pooler_mode::session, 1234ms);
      EXPECT_EQ(plus_one(a, 1), 2);
      EXPECT_EQ(plus_one(c, 2), 3);
      EXPECT_EQ(text_of(c, "SHOW statement_timeout"), "0");
      a.listen("pooler_probe");
      c.exec("NOTIFY pooler_probe");
      std::vector<std::string> got;
      EXPECT_TRUE(eventually([&] {
        got = a.wait_for_notifications(100ms);
        return !got.empty();
      }));
    }
    // The next client gets a's server session, reset.
    auto d = open_for(b.dsn(), db::pooler_mode::session);
    EXPECT_EQ(plus_one(d, 3), 4);
    EXPECT_EQ(text_of(d, "SHOW statement_timeout"), "0");
  }
}

TEST(Pooler, WorkersCompleteEveryCommandOnceInBothModes) {
  auto dbname = test_dbname();
  auto conn = connect();
  // Session mode: a server connection per client connection, so the pool
  // holds all of them (a worker of one domain uses 5).
  {
    pgbouncer b{{pool_mode::session, 10, std::nullopt}};
    auto d = unique_name("pls");
    db::create_queue(conn, queue_of(d));
    background_cmdbus w{worker_args(d, b.dsn(), "session")};
    pooled_bus sender{b.dsn(), db::pooler_mode::session};
    auto ids = send_commands(sender.bus, d, 200);
    EXPECT_TRUE(eventually(
      [&] { return all_have_status(conn, d, ids, "COMPLETED"); }, 30s));
    EXPECT_EQ(not_completed_once(conn, d), 0);
    auto r = w.stop();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->exit_code, 0) << r->err;
  }
  // Transaction mode: two workers (4 connections each without LISTEN) and
  // the sender share 3 server connections.
  {
    pgbouncer b{{pool_mode::transaction, 3, 500ms}};
    auto d = unique_name("plt");
    db::create_queue(conn, queue_of(d));
    background_cmdbus w1{worker_args(d, b.dsn(), "transaction")};
    background_cmdbus w2{worker_args(d, b.dsn(), "transaction")};
    pooled_bus sender{b.dsn(), db::pooler_mode::transaction};
    auto ids = send_commands(sender.bus, d, 300);
    pool_figures most;
    EXPECT_TRUE(eventually(
      [&] {
        auto p = b.pool(dbname);
        most.servers = std::max(most.servers, p.servers);
        most.clients_active = std::max(most.clients_active,
                                       p.clients_active + p.clients_waiting);
        return all_have_status(conn, d, ids, "COMPLETED");
      },
      30s));
    EXPECT_EQ(not_completed_once(conn, d), 0);
    EXPECT_LE(most.servers, 3);
    EXPECT_GT(most.clients_active, 3) << "more clients than server sessions";
    // Without pooler = transaction the workers' statements fail on
    // server sessions without their names (and are retried).
    for (auto* w : {&w1, &w2}) {
      auto r = w->stop();
      ASSERT_TRUE(r);
      EXPECT_EQ(r->exit_code, 0) << r->err;
      EXPECT_EQ(r->err.find("prepared statement"), std::string::npos) << r->err;
    }
  }
}

TEST(Pooler, WorkersRecoverBehindATransactionPooler) {
  auto dbname = test_dbname();
  auto conn = connect();
  bus_env direct;
  pgbouncer b{{pool_mode::transaction, 3, 500ms}};
  auto d = unique_name("plr");
  db::create_queue(conn, queue_of(d));
  auto w1 = std::make_unique<background_cmdbus>(
    worker_args(d, b.dsn(), "transaction"));
  background_cmdbus w2{worker_args(d, b.dsn(), "transaction")};
  auto ids = send_commands(direct.bus, d, 60);
  auto completed = [&] { return count_status(conn, d, "COMPLETED"); };
  ASSERT_TRUE(eventually([&] { return completed() >= 20; }));
  // The pooler dies (kill -9) and comes back on its port.
  b.kill();
  for (auto& id : send_commands(direct.bus, d, 40))
    ids.push_back(id);
  b.start();
  ASSERT_TRUE(eventually([&] { return completed() >= 80; }, 30s));
  // It drops every client and server connection, then resumes.
  b.kill_clients(dbname);
  for (auto& id : send_commands(direct.bus, d, 40))
    ids.push_back(id);
  b.resume(dbname);
  ASSERT_TRUE(eventually([&] { return completed() >= 110; }, 30s));
  // A worker dies (kill -9); the other freezes (SIGSTOP) while a new one
  // takes over, then goes on (SIGCONT).
  w1->signal(SIGKILL);
  w1.reset();
  w2.signal(SIGSTOP);
  if (!eventually([&] { return w2.stopped(); })) {
    // Not stopped: it must have ended before the signal; say how.
    auto ended = w2.wait(std::chrono::seconds{1});
    FAIL() << "the second worker did not stop on SIGSTOP; "
           << (ended ? "it had exited with " + std::to_string(ended->exit_code)
                         + ": " + ended->err
                     : std::string{"it still runs"});
  }
  background_cmdbus w3{worker_args(d, b.dsn(), "transaction")};
  for (auto& id : send_commands(direct.bus, d, 40))
    ids.push_back(id);
  ASSERT_TRUE(eventually([&] { return completed() >= 150; }, 30s));
  w2.signal(SIGCONT);
  EXPECT_TRUE(
    eventually([&] { return all_have_status(conn, d, ids, "COMPLETED"); }, 30s))
    << completed() << " of " << ids.size() << " completed";
  EXPECT_EQ(not_completed_once(conn, d), 0);
  EXPECT_EQ(queue_length(conn, queue_of(d)), 0);
  for (auto* w : {&w2, &w3}) {
    auto r = w->stop();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->exit_code, 0) << r->err;
  }
}

TEST(Pooler, ToolWorksThroughBothModes) {
  auto conn = connect();
  for (auto mode : {pool_mode::session, pool_mode::transaction}) {
    bool tx = mode == pool_mode::transaction;
    std::string pooler = tx ? "transaction" : "session";
    SCOPED_TRACE(pooler);
    // Session mode needs a server connection per client (the tick's
    // worker opens several at once); transaction mode shares 2.
    pgbouncer b{{mode, tx ? 2 : 10, 500ms}};
    std::vector<std::string> env{"CMDBUS_DSN=" + b.dsn(),
                                 "CMDBUS_POOLER=" + pooler};
    auto d = unique_name("plc");
    auto ok = run_cmdbus({"send", d, "Test", "--data", "{}", "--create"}, env);
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    auto bad = run_cmdbus({"send", d, "Test", "--data",
                           R"({"behavior": {"fail_permanent_pct": 100}})",
                           "--max-attempts", "1"},
                          env);
    ASSERT_EQ(bad.exit_code, 0) << bad.err;
    auto tick = run_cmdbus({"worker", "--demo", "--tick", "--domain", d,
                            "--statement-timeout", "500ms",
                            "--visibility-timeout", "1"},
                           env);
    // 5: one command went to the troubleshooting queue.
    EXPECT_EQ(tick.exit_code, 5) << tick.err;
    auto list = run_cmdbus({"list", d}, env);
    EXPECT_EQ(list.exit_code, 0) << list.err;
    EXPECT_NE(list.out.find("COMPLETED"), std::string::npos) << list.out;
    EXPECT_NE(list.out.find("IN_TROUBLESHOOTING_QUEUE"), std::string::npos)
      << list.out;
    auto stats = run_cmdbus({"stats", d, "--json"}, env);
    EXPECT_EQ(stats.exit_code, 0) << stats.err;
    auto tsq = run_cmdbus({"tsq", "list", d}, env);
    EXPECT_EQ(tsq.exit_code, 0) << tsq.err;
    EXPECT_NE(tsq.out.find("Test"), std::string::npos) << tsq.out;
    auto retry = run_cmdbus({"tsq", "complete", d, "--all"}, env);
    EXPECT_EQ(retry.exit_code, 0) << retry.err;
    EXPECT_EQ(count_status(conn, d, "COMPLETED"), 2);
    // Migrations take a session lock: refused behind a transaction pooler.
    auto migrate = run_cmdbus({"migrate"}, env);
    if (tx) {
      EXPECT_EQ(migrate.exit_code, 1) << migrate.err;
      EXPECT_NE(migrate.err.find("transaction pooler"), std::string::npos)
        << migrate.err;
    } else {
      EXPECT_EQ(migrate.exit_code, 0) << migrate.err;
    }
  }
  // A worker behind a transaction pooler whose server applies no statement
  // timeout refuses to start, saying what to set.
  pgbouncer b{{pool_mode::transaction, 2, std::nullopt}};
  auto d = unique_name("plc");
  auto refused = run_cmdbus({"worker", "--demo", "--tick", "--create",
                             "--domain", d, "--dsn", b.dsn(), "--pooler",
                             "transaction"});
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("statement_timeout"), std::string::npos)
    << refused.err;
  auto typo = run_cmdbus({"list", d}, {"CMDBUS_DSN=" + b.dsn(),
                                       "CMDBUS_POOLER=transactional"});
  EXPECT_EQ(typo.exit_code, 1) << typo.err;
}

TEST(Pooler, ConnectionsOfOneWorker) {
  // On a database of its own, so that pg_stat_activity shows only its
  // connections. Two domains, LISTEN, the HTTP endpoint.
  scratch_database db;
  {
    auto c = db::connection::open(db.dsn());
    db::migrate(c, sql::pgmq_files(), sql::commandbus_files());
    // What a transaction pooler's worker needs of the server (make_cfg's
    // statement timeout); set on this database only.
    c.exec("ALTER DATABASE " + db.name() + " SET statement_timeout = '2s'");
  }
  using counts = std::map<std::string, int64_t>;
  // Runs a worker for `pooler` and waits until its connections are
  // `expected` (by application_name); returns what it saw last.
  auto count = [&](db::pooler_mode pooler, const counts& expected) {
    auto a = unique_name("pca");
    auto b = unique_name("pcb");
    handler_registry reg;
    // Fails its first attempt (the retry scheduler's write), then succeeds
    // (the completion's).
    auto once = [](const command&, handler_context& ctx) -> json {
      if (ctx.attempt() == 1)
        throw transient_command_error("POOLER_PROBE", "first attempt");
      return json::null();
    };
    reg.add(a, "Ok", once);
    reg.add(b, "Ok", once);
    auto cfg = make_cfg({a, b});
    cfg.dsn = db.dsn();
    cfg.http = "127.0.0.1:0";
    cfg.pooler = pooler;
    worker w{cfg, std::move(reg)};
    // The batch counter delivers to a callback only.
    std::atomic<int> delivered{0};
    w.on_batch_complete(
      [&delivered](const std::string&, const uuid&) { ++delivered; });
    finally stop{[&] { stop_worker(w); }};
    w.start();
    auto opts = pool_options(1);
    opts.dsn = db.dsn();
    db::pool pool{opts};
    command_bus bus{pool};
    auto conn = db::connection::open(db.dsn());
    // A command each, retried once and completed, so that every writer
    // has connected (domain a's in a batch, for the batch counter's
    // delivery), and a scrape for the endpoint's queue figures.
    batch_command in_batch;
    in_batch.command_type = "Ok";
    in_batch.command_id = uuid::random();
    bus.create_batch(a, {in_batch});
    EXPECT_TRUE(eventually([&] {
      return has_status(conn, a, in_batch.command_id, "COMPLETED")
             && delivered.load() == 1;
    }));
    auto id = bus.send(make_req(b, "Ok")).command_id;
    EXPECT_TRUE(
      eventually([&] { return has_status(conn, b, id, "COMPLETED"); }));
    scrape(w.http_port());
    counts seen;
    // Eventually: the previous worker's connections may still be closing.
    eventually([&] {
      seen.clear();
      auto rows = conn.query(
        "SELECT application_name, count(*) FROM pg_stat_activity WHERE "
        "datname = current_database() AND pid <> pg_backend_pid() AND "
        "application_name LIKE 'cmdbus-%' GROUP BY 1");
      for (int i = 0; i < rows.rows(); ++i)
        seen[std::string{rows.text(i, 0)}] = rows.int64(i, 1);
      return seen == expected;
    });
    return seen;
  };
  counts expected{{"cmdbus-poller", 2},    {"cmdbus-worker", 4},
                  {"cmdbus-listener", 2},  {"cmdbus-batches", 1},
                  {"cmdbus-scheduler", 1}, {"cmdbus-metrics", 1}};
  EXPECT_EQ(count(db::pooler_mode::none, expected), expected);
  expected.erase("cmdbus-listener");
  EXPECT_EQ(count(db::pooler_mode::transaction, expected), expected);
}
