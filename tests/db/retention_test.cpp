// Retention (db/retention.hpp, `cmdbus prune`, the worker's [retention]
// runner; docs/operations.md "Retention") against the real database:
// - what goes and what stays: old finished commands with their audit rows,
//   final processes with theirs, final batches without commands left, old
//   archived messages go; commands in the troubleshooting queue (and their
//   archived messages), unfinished commands, commands and processes of
//   unfinished batches, batches with undelivered callbacks or commands
//   left, and commands a live process refers to stay; --dry-run counts the
//   same and changes nothing; --json; a second prune removes nothing;
// - chunks: a prune of more rows than a chunk takes several transactions,
//   skips rows another pruner holds (SKIP LOCKED), and a worker keeps
//   completing commands of the domain while a chunk holds its rows;
// - kill -9 of `cmdbus prune` mid-way leaves no command without its audit
//   rows and no audit rows without their command; a second run finishes;
//   frozen by SIGSTOP, it stalls no worker, and finishes once continued;
// - the worker's runner prunes by itself and counts it in /metrics; with
//   the retention lock held elsewhere no replica prunes; it recovers from a
//   cut connection by itself.
// History is written directly with old timestamps (set-based INSERTs), the
// way years of a worker's work would have left it.

#include <gtest/gtest.h>

#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/jobs.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/retention.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

/// Older than the 30-day age every test prunes with.
const std::string old_age = "40 days";

process_result cli(std::vector<std::string> args) {
  args.push_back("--dsn");
  args.push_back(dsn());
  return run_cmdbus(args);
}

int64_t count(db::connection& c, const std::string& sql,
              const std::string& arg) {
  return c.query(sql, arg).int64(0, 0);
}

int64_t json_int(db::connection& c, const std::string& doc,
                 const std::string& key) {
  auto v = jget(c, doc, "{" + key + "}");
  return v ? std::stoll(*v) : -1;
}

struct Retention : ::testing::Test {
  db::connection conn = connect();
  std::string domain = unique_name("ret");
  std::string queue = db::command_queue(domain);
  int64_t next_msg_id = 1;

  void SetUp() override {
    db::create_queue(conn, queue);
  }

  // Inserts `n` commands tagged `tag` (their command_type) with `status`,
  // last changed `age` ago, each with three audit rows.
  void commands(int n, const std::string& status, const std::string& age,
                const std::string& tag,
                const std::optional<std::string>& batch = std::nullopt,
                const std::optional<std::string>& correlation = std::nullopt) {
    conn.query(
      "INSERT INTO commandbus.command (domain, queue_name, msg_id, "
      "command_id, command_type, status, attempts, max_attempts, created_at, "
      "updated_at, batch_id, correlation_id) "
      "SELECT $1, $2, g, gen_random_uuid(), $3, $4, 1, 3, "
      "now() - $5::interval, now() - $5::interval, $6::uuid, $7::uuid "
      "FROM generate_series($8::bigint, $9::bigint) g",
      domain, queue, tag, status, age, batch, correlation, next_msg_id,
      next_msg_id + n - 1);
    next_msg_id += n;
    conn.query("INSERT INTO commandbus.audit (domain, command_id, event_type, "
               "ts) SELECT c.domain, c.command_id, e, c.updated_at FROM "
               "commandbus.command c CROSS JOIN unnest(ARRAY['SENT', "
               "'RECEIVED', c.status]) e WHERE c.domain = $1 AND "
               "c.command_type = $2",
               domain, tag);
  }

  // Archives a message for each command tagged `tag`, `age` ago, as the
  // worker archives a finished command's message.
  void archive(const std::string& tag, const std::string& age) {
    conn.query("INSERT INTO pgmq.a_" + queue
                 + " (msg_id, vt, enqueued_at, archived_at, message) SELECT "
                   "c.msg_id, now(), now() - $3::interval, now() - "
                   "$3::interval, jsonb_build_object('domain', c.domain, "
                   "'command_id', c.command_id, 'command_type', "
                   "c.command_type, 'data', '{}'::jsonb) FROM "
                   "commandbus.command c WHERE c.domain = $1 AND "
                   "c.command_type = $2",
               domain, tag, age);
  }

  // Archives a message whose text is `message` (JSON), `age` ago.
  void archive_raw(const std::string& message, const std::string& age) {
    conn.query("INSERT INTO pgmq.a_" + queue
                 + " (msg_id, vt, enqueued_at, archived_at, message) VALUES "
                   "($1, now(), now() - $3::interval, now() - $3::interval, "
                   "$2::jsonb)",
               next_msg_id++, message, age);
  }

  // Inserts a batch and returns its id; `completed_age` set: completed then.
  std::string batch(const std::string& status,
                    const std::optional<std::string>& completed_age,
                    const std::string& type = "COMMAND") {
    auto id = new_uuid();
    conn.query("INSERT INTO commandbus.batch (domain, batch_id, status, "
               "created_at, completed_at, batch_type, total_count) VALUES "
               "($1, $2::uuid, $3, now() - interval '50 days', now() - "
               "$4::interval, $5, 1)",
               domain, id, status, completed_age, type);
    conn.query("INSERT INTO commandbus.audit (domain, command_id, event_type, "
               "ts) SELECT $1, $2::uuid, e, now() - interval '50 days' FROM "
               "unnest(ARRAY['BATCH_STARTED', 'BATCH_COMPLETED']) e",
               domain, id);
    return id;
  }

  // Inserts a process with `status`, last changed `age` ago, with
  // `audits` process_audit rows (for new command ids); returns its id.
  std::string process(const std::string& status, const std::string& age,
                      int audits,
                      const std::optional<std::string>& batch = std::nullopt) {
    auto id = new_uuid();
    conn.query("INSERT INTO commandbus.process (domain, process_id, "
               "process_type, status, created_at, updated_at, batch_id) "
               "VALUES ($1, $2::uuid, 'Flow', $3, now() - $4::interval, "
               "now() - $4::interval, $5::uuid)",
               domain, id, status, age, batch);
    conn.query("INSERT INTO commandbus.process_audit (domain, process_id, "
               "step_name, command_id, command_type, sent_at) SELECT $1, "
               "$2::uuid, 'step', gen_random_uuid(), 'Step', now() - "
               "$3::interval FROM generate_series(1, $4::int)",
               domain, id, age, audits);
    return id;
  }

  int64_t tagged(const std::string& tag) {
    return conn
      .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
             "command_type = $2",
             domain, tag)
      .int64(0, 0);
  }

  // Commands of the domain without a single audit row, and audit rows of
  // the domain that belong to neither a command nor a batch: both must
  // always be 0, whenever a prune stops.
  int64_t half_removed() {
    return count(conn,
                 "SELECT (SELECT count(*) FROM commandbus.command c WHERE "
                 "c.domain = $1 AND NOT EXISTS (SELECT 1 FROM "
                 "commandbus.audit a WHERE a.domain = c.domain AND "
                 "a.command_id = c.command_id)) + (SELECT count(*) FROM "
                 "commandbus.audit a WHERE a.domain = $1 AND NOT EXISTS "
                 "(SELECT 1 FROM commandbus.command c WHERE c.domain = "
                 "a.domain AND c.command_id = a.command_id) AND NOT EXISTS "
                 "(SELECT 1 FROM commandbus.batch b WHERE b.domain = a.domain "
                 "AND b.batch_id = a.command_id))",
                 domain);
  }

  // Every row of the domain in every table a prune touches, as one text.
  std::string footprint() {
    auto r = conn.query(
      "SELECT concat_ws(',', (SELECT count(*) FROM commandbus.command WHERE "
      "domain = $1), (SELECT count(*) FROM commandbus.audit WHERE domain = "
      "$1), (SELECT count(*) FROM commandbus.process WHERE domain = $1), "
      "(SELECT count(*) FROM commandbus.process_audit WHERE domain = $1), "
      "(SELECT count(*) FROM commandbus.batch WHERE domain = $1), (SELECT "
      "count(*) FROM commandbus.cmdbus_batch_delivery WHERE domain = $1), "
      "(SELECT count(*) FROM pgmq.a_"
        + queue + "))",
      domain);
    return std::string{r.text(0, 0)};
  }

  // A worker configuration for the domain whose runner prunes everything
  // older than 30 days, checking every 50 ms, in chunks of `chunk`.
  config::worker_config retention_cfg(int chunk) {
    auto cfg = make_cfg({domain});
    auto age = std::chrono::milliseconds{30LL * 86'400'000};
    cfg.retention.ages = {age, age, age, age};
    cfg.retention.interval = 50ms;
    cfg.retention.chunk_size = chunk;
    return cfg;
  }

  handler_registry handlers() const {
    handler_registry r;
    r.add(domain, "Noop", null_result);
    return r;
  }
};

/// Sends 20 Noop commands of `domain` and expects the running worker to
/// complete them while a prune holds its rows.
void expect_worker_completes_new_commands(db::connection& conn,
                                          const std::string& domain) {
  bus_env env;
  for (int i = 0; i < 20; ++i)
    env.bus.send(make_req(domain, "Noop"));
  EXPECT_TRUE(eventually(
    [&] {
      return count(conn,
                   "SELECT count(*) FROM commandbus.command WHERE domain = "
                   "$1 AND command_type = 'Noop' AND status = 'COMPLETED'",
                   domain)
             == 20;
    },
    10s));
}

const job_metrics& retention_job(const worker& w) {
  for (auto& m : w.job_metrics_all())
    if (m->name == db::retention_job_name)
      return *m;
  throw std::logic_error("no retention job");
}

} // namespace

TEST_F(Retention, RemovesOldFinishedHistoryAndKeepsWhatIsHeld) {
  // Goes: 30 old finished commands, their archived messages and two
  // malformed archived messages.
  commands(20, "COMPLETED", old_age, "done");
  commands(5, "FAILED", old_age, "failed");
  commands(5, "CANCELED", old_age, "canceled");
  archive("done", old_age);
  archive_raw(R"("a bare string")", old_age);
  archive_raw(R"({"domain": ")" + domain + R"(", "command_id": "nope"})",
              old_age);
  // Stays: recent, unfinished, troubleshooting (with its archived message).
  commands(4, "COMPLETED", "1 day", "recent");
  archive("recent", "1 day");
  commands(3, "IN_TROUBLESHOOTING_QUEUE", old_age, "tsq");
  archive("tsq", old_age);
  commands(2, "PENDING", old_age, "pending");
  commands(2, "IN_PROGRESS", old_age, "running");
  // Batches: an open one keeps its commands; a closed one goes with its
  // commands, audit and delivered callback record; one whose callbacks were
  // not delivered stays; one with a command in the TSQ stays (its finished
  // commands go).
  auto open = batch("IN_PROGRESS", std::nullopt);
  commands(3, "COMPLETED", old_age, "in_open", open);
  auto closed = batch("COMPLETED", old_age);
  commands(4, "COMPLETED", old_age, "in_closed", closed);
  conn.query("INSERT INTO commandbus.cmdbus_batch_delivery (domain, "
             "batch_id, completed_at, delivered_at) VALUES ($1, $2::uuid, "
             "now() - interval '40 days', now() - interval '40 days')",
             domain, closed);
  auto undelivered = batch("COMPLETED", old_age);
  conn.query("INSERT INTO commandbus.cmdbus_batch_delivery (domain, "
             "batch_id, completed_at) VALUES ($1, $2::uuid, now() - interval "
             "'40 days')",
             domain, undelivered);
  auto with_tsq = batch("COMPLETED_WITH_FAILURES", old_age);
  commands(1, "IN_TROUBLESHOOTING_QUEUE", old_age, "tsq_in_batch", with_tsq);
  commands(2, "COMPLETED", old_age, "done_in_batch", with_tsq);
  // Processes: a live one keeps the commands it refers to (by its audit,
  // by correlation id); a final one goes with its audit; a final one of an
  // unfinished batch stays.
  auto live = process("WAITING", old_age, 0);
  commands(1, "COMPLETED", old_age, "live_step");
  conn.query("INSERT INTO commandbus.process_audit (domain, process_id, "
             "step_name, command_id, command_type, sent_at) SELECT $1::text, "
             "$2::uuid, 'step', c.command_id, 'Step', now() FROM "
             "commandbus.command c WHERE c.domain = $1 AND c.command_type = "
             "'live_step'",
             domain, live);
  commands(1, "COMPLETED", old_age, "live_corr", std::nullopt, live);
  process("COMPLETED", old_age, 2);
  auto proc_batch = batch("IN_PROGRESS", std::nullopt, "PROCESS");
  process("COMPENSATED", old_age, 1, proc_batch);

  // --dry-run: the counts, and nothing changes.
  auto before = footprint();
  auto dry = cli({"prune", "--domain", domain, "--older-than", "30d",
                  "--dry-run", "--json"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(footprint(), before);
  EXPECT_EQ(jget(conn, dry.out, "{dry_run}"), "true") << dry.out;
  EXPECT_EQ(json_int(conn, dry.out, "commands"), 36) << dry.out;
  EXPECT_EQ(json_int(conn, dry.out, "command_audits"), 108) << dry.out;
  EXPECT_EQ(json_int(conn, dry.out, "processes"), 1) << dry.out;
  EXPECT_EQ(json_int(conn, dry.out, "process_audits"), 2) << dry.out;
  EXPECT_EQ(json_int(conn, dry.out, "batches"), 1) << dry.out;
  EXPECT_EQ(json_int(conn, dry.out, "batch_audits"), 2) << dry.out;
  EXPECT_EQ(json_int(conn, dry.out, "archived_messages"), 22) << dry.out;

  // The prune, in chunks of 7: the same counts.
  auto run = cli({"prune", "--domain", domain, "--older-than", "30d",
                  "--chunk-size", "7", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(jget(conn, run.out, "{dry_run}"), "false") << run.out;
  EXPECT_EQ(jget(conn, run.out, "{domain}"), domain);
  for (auto key : {"commands", "command_audits", "processes", "process_audits",
                   "batches", "batch_audits", "archived_messages"})
    EXPECT_EQ(json_int(conn, run.out, key), json_int(conn, dry.out, key))
      << key << ": " << run.out;
  // 36 commands in chunks of 7 alone take 6 transactions.
  EXPECT_GE(json_int(conn, run.out, "chunks"), 6) << run.out;

  for (auto tag : {"done", "failed", "canceled", "in_closed", "done_in_batch"})
    EXPECT_EQ(tagged(tag), 0) << tag;
  for (auto [tag, n] :
       std::vector<std::pair<std::string, int>>{{"recent", 4},
                                                {"tsq", 3},
                                                {"pending", 2},
                                                {"running", 2},
                                                {"in_open", 3},
                                                {"tsq_in_batch", 1},
                                                {"live_step", 1},
                                                {"live_corr", 1}})
    EXPECT_EQ(tagged(tag), n) << tag;
  EXPECT_EQ(half_removed(), 0);
  auto batch_left = [&](const std::string& id) {
    return count(conn,
                 "SELECT count(*) FROM commandbus.batch WHERE batch_id = "
                 "$1::uuid",
                 id);
  };
  EXPECT_EQ(batch_left(closed), 0);
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM commandbus.cmdbus_batch_delivery "
                  "WHERE batch_id = $1::uuid",
                  closed),
            0);
  for (auto& id : {open, undelivered, with_tsq, proc_batch})
    EXPECT_EQ(batch_left(id), 1) << id;
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM commandbus.process WHERE domain = $1",
                  domain),
            2);
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM commandbus.process WHERE process_id = "
                  "$1::uuid",
                  live),
            1);
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM commandbus.process_audit WHERE domain "
                  "= $1",
                  domain),
            2); // live's and the one of the batch
  // The archive keeps the TSQ commands' messages and the recent ones.
  EXPECT_EQ(archive_rows(conn, queue), 7);

  // Nothing is left to remove: a second prune removes nothing.
  auto again = cli({"prune", "--domain", domain, "--older-than", "30d"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("removed 0 commands (0 audit rows), 0 processes "
                           "(0 audit rows), 0 batches (0 audit rows), 0 "
                           "archived messages"),
            std::string::npos)
    << again.out;
  // Usage errors.
  EXPECT_EQ(cli({"prune", "--domain", domain}).exit_code, 1);
  EXPECT_EQ(cli({"prune", "--older-than", "soon"}).exit_code, 1);
  EXPECT_EQ(
    cli({"prune", "--older-than", "30d", "--chunk-size", "0"}).exit_code, 1);
}

TEST_F(Retention, ChunksSkipHeldRowsAndTheWorkerKeepsCompleting) {
  commands(250, "COMPLETED", old_age, "done");
  worker w{make_cfg({domain}), handlers()};
  w.start();
  finally stop{[&] { stop_worker(w); }};
  // A pruner holds its first chunk's rows (its transaction stays open).
  auto holder = connect();
  holder.exec("BEGIN");
  auto first = holder.query(
    "SELECT commands FROM commandbus.cmdbus_prune_commands($1, interval '30 "
    "days', 100)",
    domain);
  ASSERT_EQ(first.int64(0, 0), 100);
  // Meanwhile the worker completes new commands of the domain...
  expect_worker_completes_new_commands(conn, domain);
  // ... and another prune takes the other rows in chunks, skipping the
  // held ones.
  auto other = cli({"prune", "--domain", domain, "--older-than", "30d",
                    "--chunk-size", "40", "--json"});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(json_int(conn, other.out, "commands"), 150) << other.out;
  EXPECT_GE(json_int(conn, other.out, "chunks"), 4) << other.out;
  holder.exec("COMMIT");
  EXPECT_EQ(tagged("done"), 0);
  EXPECT_EQ(tagged("Noop"), 20);
  EXPECT_EQ(half_removed(), 0);
}

TEST_F(Retention, KillNineMidPruneLeavesNothingHalfRemovedAndARerunFinishes) {
  commands(1000, "COMPLETED", old_age, "done");
  archive("done", old_age);
  background_cmdbus prune{{"prune", "--domain", domain, "--older-than", "30d",
                           "--chunk-size", "20", "--pause", "5ms", "--dsn",
                           dsn()}};
  ASSERT_TRUE(eventually([&] { return tagged("done") < 950; }, 20s));
  prune.signal(SIGKILL);
  auto died = prune.wait(10s);
  ASSERT_TRUE(died);
  EXPECT_EQ(died->exit_code, 128 + SIGKILL) << died->out << died->err;
  // The killed client's backend may still be running its last chunk, which
  // then commits or rolls back on its own: count once it has ended.
  ASSERT_TRUE(eventually(
    [&] {
      return count(conn,
                   "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                   "current_database() AND application_name = $1",
                   "cmdbus-cli")
             == 0;
    },
    20s));
  auto left = tagged("done");
  EXPECT_GT(left, 0) << "the prune finished before it was killed";
  EXPECT_EQ(half_removed(), 0);
  // The re-run finishes the job.
  auto rerun = cli({"prune", "--domain", domain, "--older-than", "30d",
                    "--chunk-size", "1000", "--json"});
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_EQ(json_int(conn, rerun.out, "commands"), left) << rerun.out;
  EXPECT_EQ(tagged("done"), 0);
  EXPECT_EQ(archive_rows(conn, queue), 0);
  EXPECT_EQ(half_removed(), 0);
}

TEST_F(Retention, AFrozenPruneStallsNoWorkerAndFinishesWhenContinued) {
  commands(1000, "COMPLETED", old_age, "done");
  worker w{make_cfg({domain}), handlers()};
  w.start();
  finally stop{[&] { stop_worker(w); }};
  background_cmdbus prune{{"prune", "--domain", domain, "--older-than", "30d",
                           "--chunk-size", "20", "--pause", "5ms", "--dsn",
                           dsn()}};
  ASSERT_TRUE(eventually([&] { return tagged("done") < 950; }, 20s));
  // Frozen wherever it is: between chunks, or inside one (holding its rows
  // and the retention lock).
  prune.signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return prune.stopped(); }, 10s));
  expect_worker_completes_new_commands(conn, domain);
  EXPECT_GT(tagged("done"), 0);
  EXPECT_EQ(half_removed(), 0);
  prune.signal(SIGCONT);
  auto done = prune.wait(30s);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->exit_code, 0) << done->err;
  EXPECT_EQ(tagged("done"), 0);
  EXPECT_EQ(half_removed(), 0);
}

TEST_F(Retention, TheWorkersRunnerPrunesAndCountsItInMetrics) {
  commands(35, "COMPLETED", old_age, "done");
  // Five of them were sent through the command API with the client's ids:
  // their request fingerprints go with them.
  conn.query("INSERT INTO commandbus.cmdbus_api_request (domain, command_id, "
             "fingerprint) SELECT domain, command_id, '\\x00'::bytea FROM "
             "commandbus.command WHERE domain = $1 AND command_type = 'done' "
             "ORDER BY msg_id LIMIT 5",
             domain);
  archive("done", old_age);
  commands(2, "IN_TROUBLESHOOTING_QUEUE", old_age, "tsq");
  auto cfg = retention_cfg(10);
  cfg.http = "127.0.0.1:0";
  worker w{cfg, handlers()};
  w.start();
  finally stop{[&] { stop_worker(w); }};
  ASSERT_TRUE(eventually(
    [&] { return tagged("done") == 0 && archive_rows(conn, queue) == 0; },
    15s));
  auto port = w.http_port();
  ASSERT_GT(port, 0);
  // The counters follow the commit of the chunks: wait for the last one.
  ASSERT_TRUE(eventually(
    [&] {
      return scrape(port).value("cmdbus_retention_removed_total",
                                {{"kind", "archived_messages"}})
             == 35;
    },
    10s));
  auto m = scrape(port);
  EXPECT_EQ(m.value("cmdbus_retention_removed_total", {{"kind", "commands"}}),
            35)
    << m.text;
  EXPECT_EQ(m.value("cmdbus_retention_removed_total",
                    {{"kind", "command_audits"}}),
            105);
  EXPECT_EQ(m.value("cmdbus_retention_removed_total", {{"kind", "batches"}}),
            0);
  EXPECT_EQ(m.value("cmdbus_retention_removed_total",
                    {{"kind", "api_requests"}}),
            5);
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM commandbus.cmdbus_api_request WHERE "
                  "domain = $1",
                  domain),
            0);
  // 35 commands in chunks of 10: at least 4 chunks.
  EXPECT_GE(m.value("cmdbus_retention_chunks_total", {}), 4);
  EXPECT_GE(m.value("cmdbus_retention_passes_total", {}), 1);
  EXPECT_GE(m.value("cmdbus_job_runs_total",
                    {{"job", db::retention_job_name}, {"outcome", "ok"}}),
            4);
  EXPECT_EQ(tagged("tsq"), 2);
  EXPECT_EQ(half_removed(), 0);
}

TEST_F(Retention, NoReplicaPrunesWhileTheLockIsHeldAndOneDoesAfterwards) {
  commands(60, "COMPLETED", old_age, "done");
  // Another pruner holds the retention lock (as `cmdbus prune` or another
  // replica does during a chunk).
  auto holder = connect();
  holder.query("SELECT pg_advisory_lock($1::bigint)",
               db::job_lock_key(db::retention_job_name));
  worker a{retention_cfg(10), handlers()};
  worker b{retention_cfg(10), handlers()};
  a.start();
  b.start();
  finally stop{[&] {
    stop_worker(a);
    stop_worker(b);
  }};
  ASSERT_TRUE(eventually(
    [&] {
      return retention_job(a).skipped.load() >= 2
             && retention_job(b).skipped.load() >= 2;
    },
    10s));
  EXPECT_EQ(tagged("done"), 60);
  EXPECT_EQ(retention_job(a).ran.load() + retention_job(b).ran.load(), 0);
  holder.query("SELECT pg_advisory_unlock($1::bigint)",
               db::job_lock_key(db::retention_job_name));
  ASSERT_TRUE(eventually([&] { return tagged("done") == 0; }, 10s));
  EXPECT_EQ(half_removed(), 0);
  // 60 commands in chunks of 10: at least 6 chunks, each a run of the job
  // on the one replica that held the lock.
  EXPECT_GE(retention_job(a).ran.load() + retention_job(b).ran.load(), 6);
  EXPECT_EQ(retention_job(a).failed.load() + retention_job(b).failed.load(), 0);
}

TEST_F(Retention, TheRunnerRecoversFromACutConnection) {
  auto port = conn.exec("SELECT current_setting('port')");
  tcp_proxy proxy{std::stoi(std::string{port.text(0, 0)})};
  auto cfg = retention_cfg(10);
  cfg.dsn = dsn() + " host=127.0.0.1 port=" + std::to_string(proxy.port())
            + " connect_timeout=2";
  commands(30, "COMPLETED", old_age, "first");
  worker w{cfg, handlers()};
  w.start();
  finally stop{[&] { stop_worker(w); }};
  ASSERT_TRUE(eventually([&] { return tagged("first") == 0; }, 15s));
  // Cut: the runner's chunks fail (counted) and nothing is half removed.
  proxy.cut();
  commands(30, "COMPLETED", old_age, "second");
  ASSERT_TRUE(
    eventually([&] { return retention_job(w).failed.load() >= 1; }, 15s));
  proxy.restore();
  // By itself, once the database is reachable again.
  EXPECT_TRUE(eventually([&] { return tagged("second") == 0; }, 20s));
  EXPECT_EQ(half_removed(), 0);
}
