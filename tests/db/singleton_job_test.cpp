// Singleton jobs (worker::add_job, docs/scheduling.md "Singleton jobs")
// against the real database: two workers registering the same job never
// run it at the same time (each run records its start and end; no two
// intervals overlap); a failing run is counted, rolled back and run again;
// kill -9 of the replica holding the lock lets the other one take the next
// run; the runner recovers from ended connections (a restarted server), a
// cut network and a stalled statement (the statement timeout); the lock
// key is the one documented (pg_locks shows it).

#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <map>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "cmdbus/db/jobs.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

// A table of job runs: who ran, from when to when.
std::string make_runs_table(db::connection& c) {
  auto table = unique_name("job_runs");
  c.exec("CREATE TABLE " + table
         + " (id bigserial PRIMARY KEY, replica text NOT NULL, started "
           "timestamptz NOT NULL, ended timestamptz)");
  return table;
}

// A job that records its run in `table` as `replica`, taking ~20 ms.
job_fn recording_job(const std::string& table, const std::string& replica) {
  return [table, replica](job_context& ctx) {
    auto id = ctx.conn
                .query("INSERT INTO " + table
                         + " (replica, started) VALUES ($1, clock_timestamp()) "
                           "RETURNING id",
                       replica)
                .int64(0, 0);
    ctx.conn.exec("SELECT pg_sleep(0.02)");
    ctx.conn.query(
      "UPDATE " + table + " SET ended = clock_timestamp() WHERE id = $1", id);
  };
}

int64_t count_rows(db::connection& c, const std::string& sql) {
  return c.exec(sql).int64(0, 0);
}

int64_t runs_of(db::connection& c, const std::string& table,
                const std::string& replica) {
  return c
    .query("SELECT count(*) FROM " + table + " WHERE replica = $1", replica)
    .int64(0, 0);
}

const job_metrics& job_counts(const worker& w) {
  return *w.job_metrics_all().front();
}

// Whether some session holds the advisory lock of job `name`.
bool lock_held(db::connection& c, const std::string& name) {
  return c.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                 "AND granted AND objsubid = 1 AND database = (SELECT oid FROM "
                 "pg_database "
                 "WHERE datname = current_database()) AND ((classid::bigint "
                 "<< 32) | objid::bigint) = $1::bigint",
                 db::job_lock_key(name))
           .int64(0, 0)
         > 0;
}

struct SingletonJob : ::testing::Test {
  db::connection conn = connect();
  std::string domain = unique_name("jobs");
  std::string table = make_runs_table(conn);
  std::string job = unique_name("job");

  handler_registry handlers() const {
    handler_registry r;
    r.add(domain, "Noop", null_result);
    return r;
  }
};

TEST_F(SingletonJob, TwoWorkersNeverRunItAtTheSameTime) {
  worker a{make_cfg({domain}), handlers()};
  worker b{make_cfg({domain}), handlers()};
  a.add_job(job, 10ms, recording_job(table, "a"));
  b.add_job(job, 10ms, recording_job(table, "b"));
  a.start();
  b.start();
  // Both replicas get runs, and see the other one holding the lock.
  ASSERT_TRUE(eventually(
    [&] {
      return runs_of(conn, table, "a") >= 5 && runs_of(conn, table, "b") >= 5;
    },
    30s));
  EXPECT_TRUE(eventually(
    [&] {
      return job_counts(a).skipped.load() + job_counts(b).skipped.load() >= 2;
    },
    10s));
  stop_worker(a);
  stop_worker(b);
  EXPECT_EQ(
    count_rows(conn, "SELECT count(*) FROM " + table + " WHERE ended IS NULL"),
    0);
  EXPECT_EQ(count_rows(conn, "SELECT count(*) FROM " + table + " x JOIN "
                               + table
                               + " y ON x.id < y.id AND tstzrange(x.started, "
                                 "x.ended) && tstzrange(y.started, y.ended)"),
            0)
    << "two runs overlapped";
  EXPECT_EQ(job_counts(a).ran.load() + job_counts(b).ran.load(),
            count_rows(conn, "SELECT count(*) FROM " + table));
  EXPECT_EQ(job_counts(a).failed.load() + job_counts(b).failed.load(), 0);
}

TEST_F(SingletonJob, AFailingRunIsCountedRolledBackAndRunAgain) {
  std::atomic<int> attempts{0};
  auto record = recording_job(table, "a");
  worker w{make_cfg({domain}), handlers()};
  w.add_job(job, 20ms, [&](job_context& ctx) {
    record(ctx);
    if (++attempts == 1)
      throw std::runtime_error("the first run fails after writing");
  });
  w.start();
  ASSERT_TRUE(eventually([&] { return job_counts(w).ran.load() >= 2; }, 30s));
  stop_worker(w);
  EXPECT_EQ(job_counts(w).failed.load(), 1);
  // The failed run's row was rolled back with it.
  EXPECT_EQ(count_rows(conn, "SELECT count(*) FROM " + table),
            job_counts(w).ran.load());
}

TEST_F(SingletonJob, KillNineOfTheHolderLetsTheOtherReplicaRunIt) {
  // The holder is a child process whose job never ends (it holds the lock
  // until it dies). Forked first, before this process starts any thread.
  auto child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      worker holder{make_cfg({domain}), handlers()};
      holder.add_job(job, 10ms, [](job_context&) {
        while (true)
          std::this_thread::sleep_for(50ms);
      });
      holder.start();
      while (true)
        std::this_thread::sleep_for(1s);
    } catch (...) {
      _exit(3);
    }
  }
  bool reaped = false;
  finally reap{[&] {
    if (!reaped) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
  }};
  ASSERT_TRUE(eventually([&] { return lock_held(conn, job); }, 30s));
  worker other{make_cfg({domain}), handlers()};
  other.add_job(job, 10ms, recording_job(table, "other"));
  other.start();
  ASSERT_TRUE(
    eventually([&] { return job_counts(other).skipped.load() >= 3; }, 30s));
  EXPECT_EQ(job_counts(other).ran.load(), 0);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  reaped = true;
  EXPECT_TRUE(
    eventually([&] { return job_counts(other).ran.load() >= 1; }, 30s));
  stop_worker(other);
  EXPECT_EQ(job_counts(other).failed.load(), 0);
}

TEST_F(SingletonJob, RecoversFromEndedConnectionsAndAStalledStatement) {
  auto cfg = make_cfg({domain});
  cfg.statement_timeout = 300ms;
  worker w{cfg, handlers()};
  w.add_job(job, 20ms, recording_job(table, "a"));
  w.start();
  ASSERT_TRUE(eventually([&] { return job_counts(w).ran.load() >= 2; }, 30s));
  // A restarted server: its connection ends; a run fails or not, and the
  // next ones run on a new connection.
  for (int i = 0; i < 3; ++i) {
    conn.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
              "application_name = 'cmdbus-jobs' AND datname = "
              "current_database()");
    auto ran = job_counts(w).ran.load();
    ASSERT_TRUE(
      eventually([&] { return job_counts(w).ran.load() > ran + 1; }, 30s));
  }
  // A stalled statement: the table is locked, the job's INSERT waits until
  // the statement timeout fails the run.
  {
    auto locker = connect();
    locker.exec("BEGIN");
    locker.exec("LOCK TABLE " + table + " IN ACCESS EXCLUSIVE MODE");
    auto failed = job_counts(w).failed.load();
    ASSERT_TRUE(eventually(
      [&] { return job_counts(w).failed.load() >= failed + 2; }, 30s));
    locker.exec("ROLLBACK");
  }
  auto ran = job_counts(w).ran.load();
  EXPECT_TRUE(
    eventually([&] { return job_counts(w).ran.load() >= ran + 2; }, 30s));
  stop_worker(w);
}

TEST_F(SingletonJob, RecoversFromACutConnection) {
  auto port = conn.exec("SELECT current_setting('port')");
  tcp_proxy proxy{std::stoi(std::string{port.text(0, 0)})};
  auto cfg = make_cfg({domain});
  cfg.dsn = dsn() + " host=127.0.0.1 port=" + std::to_string(proxy.port())
            + " connect_timeout=2";
  worker w{cfg, handlers()};
  w.add_job(job, 20ms, recording_job(table, "a"));
  w.start();
  ASSERT_TRUE(eventually([&] { return job_counts(w).ran.load() >= 2; }, 30s));
  // While the network is cut, runs fail (counted); none is lost for good:
  // the job runs again once the database is reachable.
  proxy.cut();
  ASSERT_TRUE(
    eventually([&] { return job_counts(w).failed.load() >= 1; }, 30s));
  proxy.restore();
  auto ran = job_counts(w).ran.load();
  EXPECT_TRUE(
    eventually([&] { return job_counts(w).ran.load() >= ran + 2; }, 30s));
  stop_worker(w);
  // A run whose COMMIT was cut on its way back may have committed: it
  // counts as failed although its row is there.
  auto rows = count_rows(conn, "SELECT count(*) FROM " + table);
  EXPECT_GE(rows, job_counts(w).ran.load());
  EXPECT_LE(rows, job_counts(w).ran.load() + job_counts(w).failed.load());
}

TEST_F(SingletonJob, TickShardsSplitTheJobsWithoutOverlap) {
  // Two tick runs, shard 0 and 1 of 2, each registering the same ten jobs:
  // every job runs exactly once, in the run of its shard.
  std::map<std::string, int> runs;
  std::vector<std::string> names;
  for (int i = 0; i < 10; ++i)
    names.push_back(job + "-" + std::to_string(i));
  for (int index = 0; index < 2; ++index) {
    auto cfg = make_cfg({domain});
    cfg.tick = true;
    cfg.tick_shard_index = index;
    cfg.tick_shard_count = 2;
    cfg.tick_runners = {"jobs", "app"};
    worker w{cfg, handlers()};
    for (auto& n : names)
      w.add_job(n, 1h, [&runs, n](job_context&) { ++runs[n]; });
    // An application's runner takes its place in the order.
    int app_steps = 0;
    w.add_tick_runner({"app",
                       [&app_steps](const tick_limits&) {
                         ++app_steps;
                         return tick_step{1, false};
                       },
                       {}});
    auto result = w.run_tick_runners(30s);
    ASSERT_EQ(result.report.runners.size(), 2u);
    EXPECT_EQ(result.report.runners[0].name, "jobs");
    EXPECT_EQ(result.report.runners[1].name, "app");
    EXPECT_EQ(app_steps, 1);
    int64_t mine = 0;
    for (auto& n : names)
      if (db::job_in_shard(n, index, 2)) {
        ++mine;
        EXPECT_EQ(runs[n], 1) << n << " in shard " << index;
      }
    EXPECT_EQ(result.report.runners[0].items, mine);
    EXPECT_FALSE(result.report.cut());
  }
  for (auto& n : names)
    EXPECT_EQ(runs[n], 1) << n;
  // An unknown runner name is refused before anything runs.
  auto cfg = make_cfg({domain});
  cfg.tick_runners = {"jobs", "nosuch"};
  worker w{cfg, handlers()};
  EXPECT_THROW(w.run_tick_runners(30s), std::invalid_argument);
}

TEST_F(SingletonJob, RegistrationIsChecked) {
  worker w{make_cfg({domain}), handlers()};
  w.add_job(job, 1s, [](job_context&) {});
  EXPECT_THROW(w.add_job(job, 1s, [](job_context&) {}), std::invalid_argument);
  EXPECT_THROW(w.add_job("", 1s, [](job_context&) {}), std::invalid_argument);
  EXPECT_THROW(w.add_job("x", 0ms, [](job_context&) {}), std::invalid_argument);
  EXPECT_THROW(w.add_job("y", 1s, job_fn{}), std::invalid_argument);
  w.start();
  EXPECT_THROW(w.add_job("z", 1s, [](job_context&) {}), std::logic_error);
  stop_worker(w);
}

} // namespace
