// Lateness of recurring schedules (docs/scheduling.md, "Recurring
// schedules"): 100 schedules firing every second, fired by one worker's
// scheduler actor (its own connection, as in a worker) for the bench's
// seconds; the lateness of each slot is its command row's created_at (the
// firing transaction's start) minus the slot time. Prints p50, p99 and the
// maximum, and how many slots fired of those due.
//
// Usage: cmdbus-schedule-bench [--seconds S] [--schedules N]

#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "bench/bench_util.hpp"
#include "cmdbus/actors/worker/scheduler.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/schedules.hpp"

using namespace cmdbus;

int main(int argc, char** argv) {
  auto seconds = std::max(2, bench::int_option(argc, argv, "--seconds", 3));
  auto count = std::max(1, bench::int_option(argc, argv, "--schedules", 100));
  bench::database db;
  const std::string domain = "schedbench";
  db.conn.query("DELETE FROM commandbus.cmdbus_schedule WHERE domain = $1",
                domain);
  db::create_queue(db.conn, db::command_queue(domain));
  bench::settle(db.conn);
  for (int i = 0; i < count; ++i) {
    schedules::definition d;
    d.domain = domain;
    d.name = "s" + std::to_string(i);
    d.command_type = "Tick";
    d.every = std::chrono::seconds{1};
    schedules::add(db.conn, d);
  }
  auto cfg = std::make_shared<config::worker_config>();
  cfg->dsn = db.dsn;
  cfg->domains = {domain};
  actors::scheduler_settings settings;
  settings.domains = {domain};
  {
    caf::actor_system_config sys_cfg;
    caf::actor_system sys{sys_cfg};
    auto aut = sys.spawn<caf::detached>(actors::scheduler, settings,
                                        actors::make_schedule_store(cfg),
                                        caf::actor_addr{});
    std::this_thread::sleep_for(std::chrono::seconds{seconds});
    caf::anon_send_exit(aut, caf::exit_reason::user_shutdown);
  }
  // Every slot from each schedule's first to the last one that was due at
  // the end, with its command (if fired) and lateness.
  auto r = db.conn.query(
    "WITH s AS (SELECT id, anchor, fired_count, next_slot FROM "
    "commandbus.cmdbus_schedule WHERE domain = $1), slots AS (SELECT s.id, "
    "g.slot FROM s, generate_series(s.anchor + interval '1 second', "
    "s.next_slot - interval '1 second', interval '1 second') AS g(slot)), "
    "l AS (SELECT extract(epoch FROM c.created_at - slots.slot) * 1000 AS ms "
    "FROM slots JOIN commandbus.command c ON c.domain = $1 AND c.command_id "
    "= (SELECT command_id FROM commandbus.cmdbus_schedule_slot_ids($1, "
    "slots.id, slots.slot))) "
    "SELECT (SELECT count(*) FROM slots), count(*), percentile_cont(0.5) "
    "WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER "
    "BY ms), max(ms) FROM l",
    domain);
  auto due = r.int64(0, 0);
  auto fired = r.int64(0, 1);
  if (fired == 0) {
    std::printf("schedules: no slot fired in %d s\n", seconds);
    return 1;
  }
  std::printf("schedule lateness (%d schedules every 1 s, %d s, slot -> "
              "command created_at): p50 %.1f ms, p99 %.1f ms, max %.1f ms; "
              "%lld of %lld slots fired\n",
              count, seconds, std::stod(std::string{r.text(0, 2)}),
              std::stod(std::string{r.text(0, 3)}),
              std::stod(std::string{r.text(0, 4)}),
              static_cast<long long>(fired), static_cast<long long>(due));
  bench::print_peak_rss("the benchmark with its scheduler");
  db.conn.query("DELETE FROM commandbus.cmdbus_schedule WHERE domain = $1",
                domain);
  return 0;
}
