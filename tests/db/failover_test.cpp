// Real failovers: to a synchronous standby (nothing lost; at the end of the
// file) and, first, to an asynchronous one: a primary and its standby
// (tests/support/primary_standby.hpp), two `cmdbus worker` processes on a
// DSN that names both hosts (target_session_attrs=read-write), and a load
// of commands with a reply queue; then, with the standby behind, the
// primary is killed with kill -9 and the standby promoted. The claims the
// old primary acknowledged after the standby fell behind are lost: their
// messages are visible again on the new primary, and the workers claim
// them again AT THE SAME ATTEMPT while the outcomes of the lost claims'
// deliveries still wait in the workers' writers. Every command must still
// be final exactly once: one outcome audit row and one reply per command,
// none lost.
//
// The order of events that makes a lost claim dangerous is made certain
// rather than left to luck:
// - the standby is held back (its replication connection frozen) when only
//   slow commands remain, and the primary is killed once the workers have
//   claimed more since: those claims are lost, and the commands they took
//   are running or waiting in the workers;
// - on the promoted standby, the outcome writes of the workers are held
//   back until the workers have claimed every visible message again and
//   run it, so that the outcomes of both claims of a message meet in one
//   writer. A trigger (created before the load, so the standby has it)
//   refuses the queue DELETE of the outcome writers' sessions
//   (application_name cmdbus-worker) on the standby's port while the gate
//   row names that port, with SQLSTATE 57014, which a writer takes for an
//   unavailable database: it keeps its buffer and tries again.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/uuid.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/primary_standby.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/tcp_proxy.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

constexpr const char* domain = "failover";
/// Commands in all; the last `slow` of them take 20-30 ms each.
constexpr int total = 2000;
constexpr int slow = 120;
/// Claims made on the old primary after the freeze before it is killed.
constexpr int lost_claims = 20;

int64_t count(db::connection& c, const std::string& sql) {
  return c.query(sql, std::string{domain}).int64(0, 0);
}

/// Creates the gate of the outcome writes (see the top of the file): held
/// back on `port` while failover_gate.port names it.
void create_gate(db::connection& c, int port) {
  auto table = db::queue_table(db::command_queue(domain));
  c.exec("CREATE TABLE public.failover_gate (port INT)");
  c.query("INSERT INTO public.failover_gate VALUES ($1::int)",
          std::to_string(port));
  c.exec(R"(CREATE FUNCTION public.hold_outcomes() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
              IF current_setting('application_name') = 'cmdbus-worker'
                 AND inet_server_port() = (SELECT port FROM public.failover_gate)
              THEN
                RAISE EXCEPTION 'outcome writes held back by the failover test'
                  USING ERRCODE = '57014';
              END IF;
              RETURN NULL;
            END $$)");
  c.exec("CREATE TRIGGER hold_outcomes BEFORE DELETE ON pgmq.\"" + table
         + "\" FOR EACH STATEMENT EXECUTE FUNCTION public.hold_outcomes()");
}

/// The load: `n` Test commands with a reply queue, the last `n_slow` of
/// them taking 20-30 ms, sent in order (so that the slow ones come last).
void send_load(const std::string& dsn, int n = total, int n_slow = slow) {
  db::pool_options opts;
  opts.dsn = dsn;
  opts.max_size = 2;
  db::pool pool{opts};
  command_bus bus{pool};
  std::vector<send_request> reqs;
  for (int i = 0; i < n; ++i) {
    send_request req;
    req.domain = domain;
    req.command_type = "Test";
    req.command_id = uuid::random();
    req.reply_to = std::string{domain} + "__replies";
    req.data = json::parse(
      i < n - n_slow
        ? R"({"behavior": {"result": {"ok": true}}})"
        : R"({"behavior": {"result": {"ok": true}, "min_duration_ms": 20,
              "max_duration_ms": 30}})");
    reqs.push_back(std::move(req));
  }
  bus.ensure_queue(std::string{domain} + "__replies");
  bus.send_batch(reqs);
}

/// A worker process on the failover DSN with its HTTP endpoint on `port`,
/// logging from `level` on (in `env`'s format, text unless it says).
std::unique_ptr<background_cmdbus>
start_worker(const std::string& dsn, int port,
             const std::string& level = "warn",
             const std::vector<std::string>& env = {}) {
  return std::make_unique<background_cmdbus>(
    std::vector<std::string>{"worker",
                             "--demo",
                             "--domain",
                             domain,
                             "--dsn",
                             dsn,
                             "--concurrency",
                             "4",
                             "--prefetch",
                             "32",
                             // Claims at the read: the claim the database
                             // forgets is the case these tests make happen
                             // (a deferred read's own fence: the tests of
                             // tests/db/deferred_claim_test.cpp).
                             "--no-deferred-claims",
                             "--visibility-timeout",
                             "10s",
                             "--statement-timeout",
                             "5s",
                             "--poll-interval",
                             "100ms",
                             "--http",
                             "127.0.0.1:" + std::to_string(port),
                             "--json",
                             "--log-level",
                             level},
    env);
}

/// Stops each of `workers` (30 s each at most) and returns their output,
/// for the messages of failed checks and the checks of the logs.
std::string
stop_all(std::initializer_list<std::unique_ptr<background_cmdbus>*> workers) {
  std::string out;
  for (auto* w : workers) {
    auto r = (*w)->stop(30s);
    out += r ? r->out + r->err : "(did not stop)\n";
  }
  return out;
}

/// The domain's COMPLETED commands on `c`.
int64_t completed(db::connection& c) {
  return count(c, "SELECT count(*) FROM commandbus.command WHERE "
                  "domain = $1 AND status = 'COMPLETED'");
}

/// The commands a worker on `port` holds in handlers or waiting for one
/// (-1 when it does not answer).
double in_flight(int port) {
  auto m = scrape(port);
  return m.value("cmdbus_in_flight", {{"domain", domain}});
}

} // namespace

TEST(Failover, EveryCommandIsFinalOnceAfterTheAsynchronousStandbyTakesOver) {
  primary_standby pg;
  auto migrate = run_cmdbus({"migrate", "--dsn", pg.primary_dsn()});
  ASSERT_EQ(migrate.exit_code, 0) << migrate.err;
  auto primary = db::connection::open(pg.primary_dsn());
  primary.query("SELECT pgmq.create($1)", db::command_queue(domain));
  create_gate(primary, pg.standby_port());
  send_load(pg.primary_dsn());
  pg.wait_caught_up();

  auto dsn = pg.failover_dsn();
  int ports[] = {free_port(), free_port()};
  auto a = start_worker(dsn, ports[0]);
  auto b = start_worker(dsn, ports[1]);
  auto stop_both = [&] { return stop_all({&a, &b}); };

  // Only slow commands left: the standby falls behind from here.
  auto fast_done = [&] { return completed(primary) >= total - slow; };
  ASSERT_TRUE(eventually(fast_done, 60s)) << stop_both() << pg.logs();
  pg.freeze_replication();
  auto frozen_at = *scalar(primary, "SELECT clock_timestamp()::text");
  // Claims the standby never receives.
  std::string lost;
  auto claimed_since = [&] {
    auto r = primary.query(
      "SELECT count(*), array_agg(DISTINCT command_id)::text FROM "
      "commandbus.audit WHERE domain = $1 AND event_type = 'RECEIVED' AND "
      "ts > $2::timestamptz",
      std::string{domain}, frozen_at);
    if (r.int64(0, 0) < lost_claims)
      return false;
    lost = r.opt_text(0, 1).value_or("{}");
    return true;
  };
  ASSERT_TRUE(eventually(claimed_since, 30s)) << stop_both() << pg.logs();
  pg.kill_primary();
  pg.promote_standby();

  // The workers claim every visible message again and run it, while their
  // outcome writes are held back; then the gate opens.
  auto standby = db::connection::open(pg.standby_dsn());
  auto queue = db::queue_table(db::command_queue(domain));
  auto reclaimed = [&] {
    return standby
               .exec("SELECT count(*) FROM pgmq.\"" + queue
                     + "\" WHERE vt <= clock_timestamp()")
               .int64(0, 0)
             == 0
           && in_flight(ports[0]) == 0 && in_flight(ports[1]) == 0;
  };
  ASSERT_TRUE(eventually(reclaimed, 30s)) << stop_both() << pg.logs();
  standby.exec("UPDATE public.failover_gate SET port = NULL");

  auto all_final = [&] { return completed(standby) == total; };
  auto settled = eventually(all_final, 60s);
  auto outputs = stop_both();
  ASSERT_TRUE(settled) << outputs << pg.logs();

  // The lost claims were made again, at the same attempt.
  auto again = standby
                 .query("SELECT count(DISTINCT command_id) FROM "
                        "commandbus.audit WHERE domain = $1 AND event_type = "
                        "'RECEIVED' AND details_json ->> 'attempt' = '1' AND "
                        "command_id = ANY($2::uuid[])",
                        std::string{domain}, lost)
                 .int64(0, 0);
  EXPECT_GT(again, 0) << "no lost claim was made again";
  std::cout << "failover: " << lost_claims << "+ claims lost, " << again
            << " of them made again at attempt 1\n";

  // Every command final exactly once: nothing lost, one outcome, one reply.
  EXPECT_EQ(count(standby, "SELECT count(*) FROM commandbus.command WHERE "
                           "domain = $1"),
            total);
  auto twice = count(standby,
                     "SELECT count(*) FROM (SELECT command_id FROM "
                     "commandbus.audit WHERE domain = $1 AND event_type IN "
                     "('COMPLETED', 'MOVED_TO_TSQ', 'BUSINESS_RULE_FAILED') "
                     "GROUP BY command_id HAVING count(*) > 1) d");
  EXPECT_EQ(twice, 0) << twice << " command(s) have more than one outcome";
  EXPECT_EQ(count(standby, "SELECT count(*) FROM commandbus.audit WHERE "
                           "domain = $1 AND event_type = 'COMPLETED'"),
            total);
  auto replies = db::queue_table(std::string{domain} + "__replies");
  auto r = standby.exec("SELECT count(*), count(DISTINCT message ->> "
                        "'command_id') FROM pgmq.\""
                        + replies + "\"");
  EXPECT_EQ(r.int64(0, 0), total) << "replies";
  EXPECT_EQ(r.int64(0, 1), total) << "commands with a reply";

  // The workers never report fewer completions than the database holds
  // (those the old primary acknowledged and lost were run again, so they
  // may report more).
  int64_t completed = 0;
  for (auto at = outputs.find("\"completed\":"); at != std::string::npos;
       at = outputs.find("\"completed\":", at + 1))
    completed += std::stoll(outputs.substr(at + 12));
  EXPECT_GE(completed, total) << outputs;
  std::cout << "failover: the workers report " << completed
            << " completions for " << total << " commands\n";
}

namespace {

/// Commands of the synchronous failover's load, and of its batch.
constexpr int sync_total = 1500;
constexpr int batch_size = 200;
/// DemoOrder processes (every third has its charge declined).
constexpr int processes = 12;

/// Starts `processes` DemoOrder processes on `dsn` with the tool (each
/// sends its first step now, the next ones as replies come).
void start_processes(const std::string& dsn) {
  for (int i = 0; i < processes; ++i) {
    auto r = run_cmdbus({"process", "start", domain, "DemoOrder", "--data",
                         R"({"order_id": "o-)" + std::to_string(i)
                           + R"(", "charge": ")"
                           + (i % 3 == 2 ? "declined" : "ok") + R"("})",
                         "--dsn", dsn});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
}

/// Creates a batch of `batch_size` Test commands with a reply queue (sent
/// after the load: its commands come last); returns its id.
std::string create_load_batch(const std::string& dsn) {
  db::pool_options opts;
  opts.dsn = dsn;
  opts.max_size = 1;
  db::pool pool{opts};
  command_bus bus{pool};
  std::vector<batch_command> cmds;
  for (int i = 0; i < batch_size; ++i) {
    batch_command c;
    c.command_type = "Test";
    c.command_id = uuid::random();
    c.reply_to = std::string{domain} + "__replies";
    c.data = json::parse(R"({"behavior": {"result": {"ok": true}}})");
    cmds.push_back(std::move(c));
  }
  return bus.create_batch(domain, cmds).batch_id.to_string();
}

/// The value of the JSON string field `key` in a log line (escapes are
/// kept as they are; the fields read here hold none).
std::optional<std::string> field(const std::string& line,
                                 const std::string& key) {
  auto tag = "\"" + key + "\":\"";
  auto at = line.find(tag);
  if (at == std::string::npos)
    return std::nullopt;
  at += tag.size();
  auto end = line.find('"', at);
  if (end == std::string::npos)
    return std::nullopt;
  return line.substr(at, end - at);
}

/// A log line's time ("2026-01-02T03:04:05.123456Z").
std::optional<std::chrono::system_clock::time_point>
time_of(const std::string& line) {
  auto text = field(line, "time");
  std::tm tm{};
  double seconds = 0;
  if (!text
      || std::sscanf(text->c_str(), "%d-%d-%dT%d:%d:%lfZ", &tm.tm_year,
                     &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &seconds)
           != 6)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  auto whole = static_cast<int>(seconds);
  tm.tm_sec = whole;
  auto micros = std::llround((seconds - whole) * 1e6);
  return std::chrono::system_clock::from_time_t(timegm(&tm))
         + std::chrono::microseconds{micros};
}

/// A database session's last recovery: seconds from the promotion to its
/// log line, and what the line says of the outage ("after N failed
/// attempt(s) in T ms").
struct recovery {
  double seconds = 0;
  std::string who;
  std::string attempts;
};

/// From the workers' JSON logs: for each database session that reported
/// using the database again ("<who> uses the database again ..."), its last
/// such line after `promoted`, slowest first. A session with nothing to do
/// during the outage reconnects when it next has work: one failed attempt.
std::vector<recovery>
recoveries(const std::string& logs,
           std::chrono::system_clock::time_point promoted) {
  std::map<std::string, recovery> latest;
  std::istringstream in{logs};
  for (std::string line; std::getline(in, line);) {
    auto message = field(line, "message");
    auto at = message ? message->find(" uses the database again")
                      : std::string::npos;
    auto time = time_of(line);
    if (at == std::string::npos || !time)
      continue;
    std::chrono::duration<double> after = *time - promoted;
    auto who = message->substr(0, at);
    auto& x = latest[who];
    if (x.who.empty() || after.count() > x.seconds) {
      auto tail = message->find(" after ", at);
      x = {after.count(), who,
           tail == std::string::npos ? "" : message->substr(tail + 1)};
    }
  }
  std::vector<recovery> out;
  for (auto& [who, x] : latest)
    out.push_back(x);
  std::sort(out.begin(), out.end(), [](const recovery& a, const recovery& b) {
    return a.seconds > b.seconds;
  });
  return out;
}

/// The failed round trips of the completion writer of a worker on `port`
/// (-1 when it does not answer).
double completion_errors(int port) {
  return scrape(port).value("cmdbus_db_errors_total",
                            {{"domain", domain}, {"actor", "completion"}});
}

} // namespace

// A failover to a SYNCHRONOUS standby loses nothing: every commit the
// primary acknowledged is on the standby. Two workers on the failover DSN
// run a load with a reply queue, a batch and DemoOrder processes; the
// primary is killed with kill -9 mid-load and, once the workers have been
// failing for a while (as a failover manager takes a while to decide), the
// standby is promoted. Every command is then final exactly once with one
// reply, the batch is complete with its counters right and its callback
// delivered once, every process reached its end with each step once. The
// seconds each database session of the workers took to use the new primary
// are printed (the figures of docs/operations.md, "Failover").
TEST(Failover, NothingIsLostWhenTheSynchronousStandbyTakesOver) {
  primary_standby pg{replication::synchronous};
  auto migrate = run_cmdbus({"migrate", "--dsn", pg.primary_dsn()});
  ASSERT_EQ(migrate.exit_code, 0) << migrate.err;
  auto primary = db::connection::open(pg.primary_dsn());
  primary.query("SELECT pgmq.create($1)", db::command_queue(domain));
  start_processes(pg.primary_dsn());
  send_load(pg.primary_dsn(), sync_total, 0);
  auto batch = create_load_batch(pg.primary_dsn());
  auto commands = sync_total + batch_size;

  auto dsn = pg.failover_dsn();
  int ports[] = {free_port(), free_port()};
  std::vector<std::string> json_logs{"CMDBUS_LOG_FORMAT=json"};
  auto a = start_worker(dsn, ports[0], "info", json_logs);
  auto b = start_worker(dsn, ports[1], "info", json_logs);
  auto stop_both = [&] { return stop_all({&a, &b}); };

  // Mid-load: a third of the commands done.
  auto a_third_done = [&] { return completed(primary) >= commands / 3; };
  ASSERT_TRUE(eventually(a_third_done, 60s)) << stop_both() << pg.logs();
  pg.kill_primary();
  // The outage lasts until both workers' completion writers failed a few
  // times (about 1.5 to 3 s of their backoff).
  auto failing = [&] {
    return completion_errors(ports[0]) >= 6 && completion_errors(ports[1]) >= 6;
  };
  ASSERT_TRUE(eventually(failing, 30s)) << stop_both() << pg.logs();
  pg.promote_standby();
  auto promoted = std::chrono::system_clock::now();

  auto standby = db::connection::open(pg.standby_dsn());
  auto all_done = [&] {
    return count(standby,
                 "SELECT count(*) FROM commandbus.process WHERE domain = $1 "
                 "AND status IN ('COMPLETED', 'CANCELED')")
             == processes
           && standby
                  .query("SELECT count(*) FROM "
                         "commandbus.cmdbus_batch_delivery WHERE domain = $1 "
                         "AND batch_id = $2::uuid AND delivered_at IS NOT NULL",
                         std::string{domain}, batch)
                  .int64(0, 0)
                == 1
           && count(standby, "SELECT count(*) FROM commandbus.command WHERE "
                             "domain = $1 AND status NOT IN ('COMPLETED', "
                             "'FAILED')")
                == 0;
  };
  auto settled = eventually(all_done, 60s);
  auto outputs = stop_both();
  ASSERT_TRUE(settled) << outputs << pg.logs();

  // Every command final exactly once, with one reply each (the process
  // steps reply to the processes' queue, where the writers delete them).
  auto steps = processes * 3;
  EXPECT_EQ(count(standby, "SELECT count(*) FROM commandbus.command WHERE "
                           "domain = $1"),
            commands + steps);
  EXPECT_EQ(count(standby,
                  "SELECT count(*) FROM (SELECT command_id FROM "
                  "commandbus.audit WHERE domain = $1 AND event_type IN "
                  "('COMPLETED', 'MOVED_TO_TSQ', 'BUSINESS_RULE_FAILED') "
                  "GROUP BY command_id HAVING count(*) > 1) d"),
            0)
    << "commands with more than one outcome";
  EXPECT_EQ(count(standby, "SELECT count(*) FROM commandbus.audit WHERE "
                           "domain = $1 AND event_type IN ('COMPLETED', "
                           "'BUSINESS_RULE_FAILED')"),
            commands + steps);
  auto replies = db::queue_table(std::string{domain} + "__replies");
  auto r = standby.exec("SELECT count(*), count(DISTINCT message ->> "
                        "'command_id') FROM pgmq.\""
                        + replies + "\"");
  EXPECT_EQ(r.int64(0, 0), commands) << "replies";
  EXPECT_EQ(r.int64(0, 1), commands) << "commands with a reply";

  // The batch: complete, its counters right, its callback run once.
  auto counters = standby.query(
    "SELECT status || ' ' || completed_count || '/' || total_count || ' ' || "
    "failed_count || ' ' || canceled_count || ' ' || "
    "in_troubleshooting_count FROM commandbus.batch WHERE domain = $1 AND "
    "batch_id = $2::uuid",
    std::string{domain}, batch);
  EXPECT_EQ(counters.opt_text(0, 0), "COMPLETED " + std::to_string(batch_size)
                                       + "/" + std::to_string(batch_size)
                                       + " 0 0 0");
  size_t callbacks = 0;
  for (auto at = outputs.find("batch " + batch + " of domain");
       at != std::string::npos;
       at = outputs.find("batch " + batch + " of domain", at + 1))
    ++callbacks;
  EXPECT_EQ(callbacks, 1u) << "batch callbacks run";

  // The processes: each at its end, each of its three steps sent once and
  // answered once (the declined ones compensated).
  EXPECT_EQ(count(standby, "SELECT count(*) FROM commandbus.process WHERE "
                           "domain = $1 AND status = 'CANCELED'"),
            processes / 3);
  EXPECT_EQ(count(standby,
                  "SELECT count(*) FROM commandbus.process_audit WHERE "
                  "domain = $1 AND received_at IS NOT NULL"),
            steps);
  EXPECT_EQ(count(standby,
                  "SELECT count(*) FROM (SELECT process_id, step_name FROM "
                  "commandbus.process_audit WHERE domain = $1 GROUP BY "
                  "process_id, step_name HAVING count(*) > 1) d"),
            0)
    << "steps sent more than once";

  // How long each session took to use the new primary.
  auto times = recoveries(outputs, promoted);
  std::cout << "synchronous failover: seconds from the promotion until each "
               "session used the new primary (slowest first):\n";
  for (auto& x : times)
    std::printf("  %-36s %6.2f  (%s)\n", x.who.c_str(), x.seconds,
                x.attempts.c_str());
  std::cout << std::flush;
}
