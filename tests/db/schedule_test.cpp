// Recurring schedules (db/schedules.hpp, docs/scheduling.md "Recurring
// schedules") against the real PostgreSQL: a due slot sends one command
// through the ordinary send path, with ids derived from (schedule, slot);
// pause, resume, remove, trigger; both misfire policies; the upsert is
// idempotent and recomputes the next slot only when the timing changed; a
// slot whose command exists already only advances; concurrent firing never
// sends a slot twice; a firing cut off by a lost connection leaves nothing
// half done.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/schedules.hpp"
#include "cmdbus/model/errors.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

schedules::definition hourly(const std::string& domain,
                             const std::string& name = "report") {
  schedules::definition d;
  d.domain = domain;
  d.name = name;
  d.command_type = "BuildReport";
  d.data = json::parse(R"({"kind": "daily"})");
  d.every = std::chrono::hours{1};
  return d;
}

// Makes the schedule's next slot `ago` old, as if no worker had run since;
// interval schedules keep their slots on anchor + k * interval, so the
// anchor moves with it.
void make_due(db::connection& c, const std::string& domain,
              const std::string& name, const std::string& ago) {
  c.query("UPDATE commandbus.cmdbus_schedule s SET next_slot = t.at, "
          "anchor = CASE WHEN s.anchor IS NULL THEN NULL ELSE t.at END FROM "
          "(SELECT clock_timestamp() - $3::interval AS at) t WHERE "
          "s.domain = $1 AND s.name = $2",
          domain, name, ago);
}

int64_t count(db::connection& c, const std::string& sql,
              const std::string& domain) {
  return c.query(sql, domain).int64(0, 0);
}

int64_t commands_of(db::connection& c, const std::string& domain) {
  return count(c, "SELECT count(*) FROM commandbus.command WHERE domain = $1",
               domain);
}

// The derived command id of `slot` of schedule `id`.
uuid slot_id(db::connection& c, const std::string& domain, const uuid& id,
             timestamp slot) {
  auto r = c.query("SELECT command_id FROM "
                   "commandbus.cmdbus_schedule_slot_ids($1, $2::uuid, "
                   "$3::timestamptz)",
                   domain, id.to_string(), format_timestamp(slot));
  return *uuid::parse(r.text(0, 0));
}

} // namespace

TEST(Schedules, ADueSlotSendsOneCommandLikeAnySend) {
  auto c = connect();
  auto domain = unique_name("sch");
  auto added = schedules::add(c, hourly(domain));
  ASSERT_TRUE(added.created);
  EXPECT_TRUE(db::queue_exists(c, db::command_queue(domain)));
  // Not due yet: nothing claimed.
  EXPECT_EQ(schedules::fire_due(c, domain).claimed, 0);
  make_due(c, domain, "report", "1 second");
  auto before = schedules::get(c, domain, "report").value();
  auto fired = schedules::fire_due(c, domain);
  ASSERT_EQ(fired.slots.size(), 1u);
  auto& f = fired.slots[0];
  EXPECT_TRUE(f.sent());
  EXPECT_EQ(f.missed, 0);
  EXPECT_EQ(f.slot, before.next_slot);
  EXPECT_GE(f.lateness, 1s);
  EXPECT_EQ(f.command_id, slot_id(c, domain, before.id, before.next_slot));
  // The rows of a send: PENDING command, SENT audit, the message.
  auto r = c.query("SELECT c.command_type, c.status, c.max_attempts, "
                   "q.message->>'command_type', q.message->'data'->>'kind', "
                   "(SELECT count(*) FROM commandbus.audit a WHERE a.domain = "
                   "c.domain AND a.command_id = c.command_id AND a.event_type "
                   "= 'SENT') FROM commandbus.command c JOIN pgmq.q_"
                     + domain
                     + "__commands q ON q.msg_id = c.msg_id WHERE c.domain = "
                       "$1 AND c.command_id = $2::uuid",
                   domain, f.command_id.to_string());
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.text(0, 0), "BuildReport");
  EXPECT_EQ(r.text(0, 1), "PENDING");
  EXPECT_EQ(r.int64(0, 2), 3);
  EXPECT_EQ(r.text(0, 3), "BuildReport");
  EXPECT_EQ(r.text(0, 4), "daily");
  EXPECT_EQ(r.int64(0, 5), 1);
  // Advanced by one period; counted.
  auto after = schedules::get(c, domain, "report").value();
  EXPECT_EQ(after.next_slot, before.next_slot + 1h);
  EXPECT_EQ(after.last_slot, before.next_slot);
  EXPECT_EQ(after.last_command_id, f.command_id);
  EXPECT_EQ(after.fired_count, 1);
  // Nothing more is due.
  EXPECT_EQ(schedules::fire_due(c, domain).claimed, 0);
  EXPECT_EQ(commands_of(c, domain), 1);
}

TEST(Schedules, PauseResumeAndRemove) {
  auto c = connect();
  auto domain = unique_name("sch");
  schedules::add(c, hourly(domain));
  make_due(c, domain, "report", "1 second");
  ASSERT_TRUE(schedules::pause(c, domain, "report"));
  EXPECT_TRUE(schedules::get(c, domain, "report")->paused);
  EXPECT_EQ(schedules::fire_due(c, domain).claimed, 0);
  EXPECT_FALSE(schedules::until_next_slot(c, domain).has_value());
  ASSERT_TRUE(schedules::resume(c, domain, "report"));
  EXPECT_LT(*schedules::until_next_slot(c, domain), 0us);
  EXPECT_EQ(schedules::fire_due(c, domain).slots.size(), 1u);
  EXPECT_EQ(commands_of(c, domain), 1);
  make_due(c, domain, "report", "1 second");
  ASSERT_TRUE(schedules::remove(c, domain, "report"));
  EXPECT_FALSE(schedules::get(c, domain, "report").has_value());
  EXPECT_EQ(schedules::fire_due(c, domain).claimed, 0);
  EXPECT_FALSE(schedules::pause(c, domain, "report"));
  EXPECT_FALSE(schedules::resume(c, domain, "report"));
  EXPECT_FALSE(schedules::remove(c, domain, "report"));
  // Its command stays.
  EXPECT_EQ(commands_of(c, domain), 1);
}

TEST(Schedules, TriggerSendsNowWithADistinctIdAndLeavesTheSlots) {
  auto c = connect();
  auto domain = unique_name("sch");
  auto s = schedules::add(c, hourly(domain)).stored;
  auto a = schedules::trigger(c, domain, "report");
  auto b = schedules::trigger(c, domain, "report");
  EXPECT_NE(a.command_id, b.command_id);
  EXPECT_NE(a.command_id, slot_id(c, domain, s.id, s.next_slot));
  EXPECT_EQ(commands_of(c, domain), 2);
  auto after = schedules::get(c, domain, "report").value();
  EXPECT_EQ(after.next_slot, s.next_slot);
  EXPECT_EQ(after.fired_count, 0);
  EXPECT_THROW(schedules::trigger(c, domain, "nope"), command_bus_error);
}

TEST(Schedules, MisfireRunOnceFiresTheNewestMissedSlotOnly) {
  auto c = connect();
  auto domain = unique_name("sch");
  auto d = hourly(domain);
  d.every = std::chrono::minutes{1};
  auto s = schedules::add(c, d).stored;
  // Ten and a half periods missed.
  make_due(c, domain, "report", "630 seconds");
  auto missed_from = schedules::get(c, domain, "report")->next_slot;
  auto fired = schedules::fire_due(c, domain);
  ASSERT_EQ(fired.slots.size(), 1u);
  auto& f = fired.slots[0];
  EXPECT_TRUE(f.sent());
  EXPECT_EQ(f.slot, missed_from + 10min);
  EXPECT_EQ(f.missed, 10);
  EXPECT_EQ(f.command_id, slot_id(c, domain, s.id, missed_from + 10min));
  auto after = schedules::get(c, domain, "report").value();
  EXPECT_EQ(after.next_slot, missed_from + 11min);
  EXPECT_EQ(after.last_slot, missed_from + 10min);
  EXPECT_EQ(commands_of(c, domain), 1);
  // The next slot lies in the future.
  EXPECT_GT(*schedules::until_next_slot(c, domain), 0us);
}

TEST(Schedules, MisfireSkipFiresNothingAndContinuesInTheFuture) {
  auto c = connect();
  auto domain = unique_name("sch");
  auto d = hourly(domain);
  d.every = std::chrono::minutes{1};
  d.misfire = schedules::misfire_policy::skip;
  schedules::add(c, d);
  make_due(c, domain, "report", "630 seconds");
  auto missed_from = schedules::get(c, domain, "report")->next_slot;
  auto fired = schedules::fire_due(c, domain);
  ASSERT_EQ(fired.slots.size(), 1u);
  EXPECT_FALSE(fired.slots[0].sent());
  EXPECT_TRUE(fired.slots[0].command_id.is_nil());
  EXPECT_EQ(fired.slots[0].missed, 11);
  auto after = schedules::get(c, domain, "report").value();
  EXPECT_EQ(after.next_slot, missed_from + 11min);
  EXPECT_FALSE(after.last_slot.has_value());
  EXPECT_EQ(after.fired_count, 0);
  EXPECT_EQ(commands_of(c, domain), 0);
  // A slot late by less than one period is not a misfire: it fires.
  make_due(c, domain, "report", "30 seconds");
  EXPECT_TRUE(schedules::fire_due(c, domain).slots.at(0).sent());
  EXPECT_EQ(commands_of(c, domain), 1);
}

TEST(Schedules, ASlotLateByLessThanTheGraceCatchesUpEverySlotInOrder) {
  auto c = connect();
  auto domain = unique_name("sch");
  auto d = hourly(domain);
  d.every = std::chrono::seconds{1};
  d.misfire = schedules::misfire_policy::skip;
  schedules::add(c, d);
  // Three and a half periods late, but within the 10 s grace: not a
  // misfire, whatever the policy.
  make_due(c, domain, "report", "3.5 seconds");
  auto first = schedules::get(c, domain, "report")->next_slot;
  auto fired = schedules::fire_due(c, domain);
  ASSERT_GE(fired.slots.size(), 4u);
  for (size_t i = 0; i < fired.slots.size(); ++i) {
    EXPECT_TRUE(fired.slots[i].sent()) << i;
    EXPECT_EQ(fired.slots[i].slot, first + std::chrono::seconds{i}) << i;
    EXPECT_EQ(fired.slots[i].missed, 0) << i;
  }
  auto n = static_cast<int64_t>(fired.slots.size());
  EXPECT_EQ(commands_of(c, domain), n);
  auto after = schedules::get(c, domain, "report").value();
  EXPECT_EQ(after.fired_count, n);
  EXPECT_EQ(after.next_slot, first + std::chrono::seconds{n});
  EXPECT_EQ(after.last_slot, first + std::chrono::seconds{n - 1});
  EXPECT_EQ(after.last_command_id, fired.slots.back().command_id);
}

TEST(Schedules, DefiningTheSameScheduleAgainChangesNothing) {
  auto c = connect();
  auto domain = unique_name("sch");
  auto d = hourly(domain);
  d.every.reset();
  d.cron = "30 2 * * *";
  d.time_zone = "Europe/Berlin";
  auto first = schedules::add(c, d);
  ASSERT_TRUE(first.created);
  // Fired once, so that a reset would show.
  make_due(c, domain, "report", "1 second");
  ASSERT_EQ(schedules::fire_due(c, domain).slots.size(), 1u);
  auto fired = schedules::get(c, domain, "report").value();
  auto again = schedules::add(c, d);
  EXPECT_FALSE(again.created);
  EXPECT_FALSE(again.changed);
  EXPECT_FALSE(again.timing_changed);
  EXPECT_EQ(again.stored.id, first.stored.id);
  EXPECT_EQ(again.stored.next_slot, fired.next_slot);
  EXPECT_EQ(again.stored.updated_at, fired.updated_at);
  EXPECT_EQ(again.stored.fired_count, 1);
  EXPECT_EQ(schedules::fire_due(c, domain).claimed, 0);
  // Other data: changed, same slots.
  d.data = json::parse(R"({"kind": "weekly"})");
  auto data = schedules::add(c, d);
  EXPECT_TRUE(data.changed);
  EXPECT_FALSE(data.timing_changed);
  EXPECT_EQ(data.stored.next_slot, fired.next_slot);
  EXPECT_EQ(data.stored.def.data.text(), R"({"kind":"weekly"})");
  // Another expression: the next slot is computed anew (02:45 Berlin).
  d.cron = "45 2 * * *";
  auto timing = schedules::add(c, d);
  EXPECT_TRUE(timing.timing_changed);
  EXPECT_NE(timing.stored.next_slot, fired.next_slot);
  auto expected = schedule_timing::cron("45 2 * * *", "Europe/Berlin")
                    .next_after(timing.stored.updated_at - 1s);
  EXPECT_EQ(timing.stored.next_slot, expected);
  EXPECT_EQ(commands_of(c, domain), 1);
}

TEST(Schedules, InvalidDefinitionsAreRefusedWithTheReason) {
  auto c = connect();
  auto domain = unique_name("sch");
  auto d = hourly(domain);
  d.cron = "* * * *";
  EXPECT_THROW(schedules::add(c, d), db::invalid_argument);
  d.every.reset();
  EXPECT_THROW(schedules::add(c, d), cron_error);
  d.cron = "0 0 * * *";
  d.time_zone = "Nowhere/City";
  EXPECT_THROW(schedules::add(c, d), cron_error);
  d.time_zone = "UTC";
  d.data = json::parse("[1]");
  EXPECT_THROW(schedules::add(c, d), db::invalid_argument);
  d.data = json::object();
  d.domain = "bad-domain";
  EXPECT_THROW(schedules::add(c, d), db::invalid_argument);
  EXPECT_TRUE(schedules::list(c, domain).empty());
}

TEST(Schedules, ASlotWhoseCommandExistsOnlyAdvances) {
  auto c = connect();
  auto domain = unique_name("sch");
  schedules::add(c, hourly(domain));
  make_due(c, domain, "report", "1 second");
  auto slot = schedules::get(c, domain, "report")->next_slot;
  ASSERT_TRUE(schedules::fire_due(c, domain).slots.at(0).sent());
  // The same slot due again (as if its advance had been lost): no second
  // command, no failure, the schedule advances.
  c.query("UPDATE commandbus.cmdbus_schedule SET next_slot = $2::timestamptz "
          "WHERE domain = $1",
          domain, format_timestamp(slot));
  auto again = schedules::fire_due(c, domain);
  ASSERT_EQ(again.slots.size(), 1u);
  EXPECT_TRUE(again.slots[0].already_sent);
  EXPECT_FALSE(again.slots[0].sent());
  EXPECT_EQ(schedules::get(c, domain, "report")->next_slot, slot + 1h);
  EXPECT_EQ(schedules::get(c, domain, "report")->fired_count, 1);
  EXPECT_EQ(commands_of(c, domain), 1);
}

TEST(Schedules, ConcurrentFiringNeverSendsASlotTwice) {
  auto setup = connect();
  auto domain = unique_name("sch");
  constexpr int n = 60;
  for (int i = 0; i < n; ++i)
    schedules::add(setup, hourly(domain, "s" + std::to_string(i)));
  // A schedule held by another transaction is skipped, not waited for.
  make_due(setup, domain, "s0", "1 second");
  auto holder = connect();
  holder.exec("BEGIN");
  holder.query("SELECT 1 FROM commandbus.cmdbus_schedule WHERE domain = $1 "
               "AND name = 's0' FOR UPDATE",
               domain);
  EXPECT_EQ(schedules::fire_due(setup, domain).claimed, 0);
  holder.exec("ROLLBACK");
  // Every schedule due; two connections fire in small batches at once.
  setup.query("UPDATE commandbus.cmdbus_schedule SET next_slot = now() - "
              "interval '1 second', anchor = now() - interval '1 second' "
              "WHERE domain = $1",
              domain);
  std::atomic<int> sent{0};
  std::atomic<int> twice{0};
  std::atomic<bool> failed{false};
  auto fire = [&] {
    try {
      auto c = connect();
      for (;;) {
        auto r = schedules::fire_due(c, domain, 3);
        for (auto& f : r.slots) {
          if (f.sent())
            ++sent;
          if (f.already_sent)
            ++twice;
        }
        if (r.claimed == 0)
          break;
      }
    } catch (const std::exception&) {
      failed = true;
    }
  };
  std::thread a{fire};
  std::thread b{fire};
  a.join();
  b.join();
  ASSERT_FALSE(failed);
  EXPECT_EQ(sent.load(), n);
  EXPECT_EQ(twice.load(), 0);
  EXPECT_EQ(commands_of(setup, domain), n);
  EXPECT_EQ(count(setup,
                  "SELECT count(*) FROM commandbus.cmdbus_schedule WHERE "
                  "domain = $1 AND fired_count = 1 AND next_slot > "
                  "clock_timestamp()",
                  domain),
            n);
}

TEST(Schedules, AFiringCutOffByALostConnectionLeavesNothingHalfDone) {
  auto c = connect();
  auto domain = unique_name("sch");
  auto s = schedules::add(c, hourly(domain)).stored;
  make_due(c, domain, "report", "1 second");
  auto slot = schedules::get(c, domain, "report")->next_slot;
  auto id = slot_id(c, domain, s.id, slot);
  // Another transaction writes a command with the slot's id and holds it:
  // the firing's send waits for it on the unique index, inside the
  // firing's transaction (the schedule claimed, the message written).
  auto holder = connect();
  holder.exec("BEGIN");
  holder.query("INSERT INTO commandbus.command (domain, queue_name, msg_id, "
               "command_id, command_type, status, attempts, max_attempts) "
               "VALUES ($1, $1 || '__commands', 0, $2::uuid, 'X', 'PENDING', "
               "0, 1)",
               domain, id.to_string());
  auto port_row = c.query("SELECT current_setting('port')");
  auto port = std::stoi(std::string{port_row.text(0, 0)});
  auto proxy = std::make_shared<tcp_proxy>(port);
  db::connection_options opts;
  opts.application_name = "schedule-cut-" + domain;
  auto cut_dsn = dsn() + " host=127.0.0.1 port=" + std::to_string(proxy->port())
                 + " connect_timeout=2";
  auto outcome = std::make_shared<std::atomic<int>>(0); // 1 threw, 2 returned
  std::thread firing{[cut_dsn, opts, domain, outcome] {
    try {
      auto through = db::connection::open(cut_dsn, opts);
      schedules::fire_due(through, domain);
      *outcome = 2;
    } catch (const db::error&) {
      *outcome = 1;
    }
  }};
  ASSERT_TRUE(eventually(
    [&] {
      return c.query("SELECT count(*) FROM pg_stat_activity WHERE "
                     "application_name = $1 AND wait_event_type = 'Lock'",
                     opts.application_name)
               .int64(0, 0)
             == 1;
    },
    20s));
  proxy->cut();
  firing.join();
  EXPECT_EQ(outcome->load(), 1);
  holder.exec("ROLLBACK");
  // The cut transaction never committed: no command, the slot still due.
  // (Its server process ends once it notices the lost client; until then
  // it holds the schedule, which the next firing skips.)
  EXPECT_EQ(commands_of(c, domain), 0);
  EXPECT_EQ(schedules::get(c, domain, "report")->next_slot, slot);
  bool sent = false;
  ASSERT_TRUE(eventually(
    [&] {
      auto r = schedules::fire_due(c, domain);
      sent = sent || (!r.slots.empty() && r.slots[0].sent());
      return sent;
    },
    20s));
  EXPECT_EQ(commands_of(c, domain), 1);
  EXPECT_EQ(schedules::get(c, domain, "report")->next_slot, slot + 1h);
  EXPECT_EQ(schedules::get(c, domain, "report")->last_command_id, id);
}
