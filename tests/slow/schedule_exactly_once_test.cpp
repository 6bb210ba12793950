// Each slot of a recurring schedule fires exactly once across workers,
// restarts and kill -9 (docs/scheduling.md, "Recurring schedules"): two
// `cmdbus worker` processes run the scheduler of a domain with a schedule
// firing every second, for 60 s, while one of them (in turns) is killed
// with SIGKILL and started again every ~10 s; between the kills the other
// one is frozen with SIGSTOP for 2 s, and the second worker's connections
// (through a TCP proxy) are cut for 2 s. Afterwards every slot from the
// first fired one to the last has exactly one command (its id derived from
// the slot), and the domain has no other command. About 70 s: ctest label
// `slow` (`ctest -L slow`; scripts/test runs it with the rest).

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/schedules.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> worker_args(const std::string& domain,
                                     const std::string& dsn) {
  return {
    "worker", "--demo",          "--domain", domain,    "--dsn",
    dsn,      "--poll-interval", "100ms",    "--quiet", "--statement-timeout",
    "2s"};
}

int64_t scalar(db::connection& c, const std::string& sql,
               const std::string& domain) {
  return c.query(sql, domain).int64(0, 0);
}

} // namespace

TEST(ScheduleExactlyOnce, EverySlotOnceAcrossTwoWorkersAndKillCycles) {
  auto c = connect();
  auto domain = unique_name("sx");
  schedules::definition d;
  d.domain = domain;
  d.name = "every-second";
  d.command_type = "Test";
  d.data = json::parse(R"({"behavior": {"outcome": "success"}})");
  d.every = 1s;
  schedules::add(c, d);

  // The second worker reaches the database through a proxy that is cut.
  auto port_row = c.query("SELECT current_setting('port')");
  auto port = std::stoi(std::string{port_row.text(0, 0)});
  tcp_proxy proxy{port};
  const std::string dsns[2] = {dsn(), dsn() + " host=127.0.0.1 port="
                                        + std::to_string(proxy.port())
                                        + " connect_timeout=2"};
  std::unique_ptr<background_cmdbus> workers[2];
  for (int i = 0; i < 2; ++i)
    workers[i] = std::make_unique<background_cmdbus>(
      worker_args(domain, dsns[i]));
  auto fired = [&] {
    return scalar(c,
                  "SELECT fired_count FROM commandbus.cmdbus_schedule WHERE "
                  "domain = $1",
                  domain);
  };
  ASSERT_TRUE(eventually([&] { return fired() > 0; }, 30s));

  // 60 s; every 10 s one worker (in turns) is killed and started again;
  // in between the other one is frozen for 2 s, and the proxied worker's
  // connections are cut for 2 s.
  auto until = std::chrono::steady_clock::now() + 60s;
  int turn = 0;
  int kills = 0;
  while (std::chrono::steady_clock::now() + 10s <= until) {
    std::this_thread::sleep_for(3s);
    workers[1 - turn]->signal(SIGSTOP);
    std::this_thread::sleep_for(2s);
    workers[1 - turn]->signal(SIGCONT);
    std::this_thread::sleep_for(1s);
    proxy.cut();
    std::this_thread::sleep_for(2s);
    proxy.restore();
    std::this_thread::sleep_for(2s);
    auto& w = workers[turn];
    w->signal(SIGKILL);
    auto gone = w->wait(10s);
    ASSERT_TRUE(gone.has_value());
    EXPECT_EQ(gone->exit_code, 128 + SIGKILL);
    ++kills;
    w = std::make_unique<background_cmdbus>(worker_args(domain, dsns[turn]));
    turn = 1 - turn;
  }
  std::this_thread::sleep_for(until - std::chrono::steady_clock::now());
  for (auto& w : workers) {
    auto r = w->stop(30s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->exit_code, 0) << r->err;
  }
  EXPECT_EQ(kills, 5);

  // The slots from the first one with a command to the last fired one,
  // each with its derived id, and how many of them have their command.
  auto r = c.query(
    "WITH s AS (SELECT id, anchor, last_slot FROM commandbus.cmdbus_schedule "
    "WHERE domain = $1), slots AS (SELECT g.slot, (SELECT command_id FROM "
    "commandbus.cmdbus_schedule_slot_ids($1, s.id, g.slot)) AS cid FROM s, "
    "generate_series(s.anchor + interval '1 second', s.last_slot, interval "
    "'1 second') AS g(slot)), fired AS (SELECT slots.slot, (SELECT count(*) "
    "FROM commandbus.command c WHERE c.domain = $1 AND c.command_id = "
    "slots.cid) AS n FROM slots), w AS (SELECT * FROM fired WHERE slot >= "
    "(SELECT min(slot) FROM fired WHERE n > 0)) "
    "SELECT count(*), count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE "
    "n = 0), COALESCE(extract(epoch FROM max(slot) - min(slot))::bigint + 1, "
    "0), (SELECT count(*) FROM commandbus.command c WHERE c.domain = $1), "
    "COALESCE(string_agg(slot::text, ', ') FILTER (WHERE n = 0), '') FROM w",
    domain);
  auto slots = r.int64(0, 0);
  auto once = r.int64(0, 1);
  auto missing = r.int64(0, 2);
  auto span = r.int64(0, 3);
  auto commands = r.int64(0, 4);
  // About 60 s of slots (the first ones may have fired before the timer
  // started, the last ones until the stop).
  EXPECT_GE(slots, 55) << commands << " commands";
  EXPECT_EQ(span, slots);
  EXPECT_EQ(missing, 0) << "slots without a command: " << r.text(0, 5);
  EXPECT_EQ(once, slots);
  // No command other than the slots' (no slot twice under another id).
  EXPECT_EQ(commands, slots);
  EXPECT_EQ(fired(), slots);
}
