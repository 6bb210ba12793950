// `cmdbus schedule` (apps/cmd_schedule.cpp) against the real PostgreSQL:
// add (created, then unchanged, then updated), list, show, pause, resume,
// trigger and remove, with --json; an invalid cron expression or zone is a
// usage error (exit 1), an unknown schedule exit 2.

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/schedules.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

process_result cli(std::vector<std::string> args) {
  args.push_back("--dsn");
  args.push_back(dsn());
  return run_cmdbus(args);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST(CliSchedule, AddListShowPauseResumeTriggerRemove) {
  auto c = connect();
  auto domain = unique_name("clis");
  auto add = cli({"schedule", "add", domain, "nightly", "BuildReport", "--cron",
                  "30 2 * * *", "--tz", "Europe/Berlin", "--data",
                  R"({"kind": "daily"})", "--json"});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  EXPECT_EQ(jget(c, add.out, "{created}"), "true") << add.out;
  EXPECT_EQ(jget(c, add.out, "{schedule,cron}"), "30 2 * * *");
  EXPECT_EQ(jget(c, add.out, "{schedule,time_zone}"), "Europe/Berlin");
  EXPECT_EQ(jget(c, add.out, "{schedule,misfire}"), "run_once");
  auto next = jget(c, add.out, "{schedule,next_slot}");
  // The same definition again: unchanged, same next slot.
  auto again = cli({"schedule", "add", domain, "nightly", "BuildReport",
                    "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--data",
                    R"({"kind": "daily"})"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out, "unchanged schedule nightly")) << again.out;
  auto every = cli({"schedule", "add", domain, "beat", "Ping", "--every", "30s",
                    "--misfire", "skip"});
  ASSERT_EQ(every.exit_code, 0) << every.err;
  EXPECT_TRUE(contains(every.out, "created schedule beat")) << every.out;

  auto list = cli({"schedule", "list", domain, "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(jget(c, list.out, "{0,name}"), "beat") << list.out;
  EXPECT_EQ(jget(c, list.out, "{0,every_ms}"), "30000");
  EXPECT_EQ(jget(c, list.out, "{0,misfire}"), "skip");
  EXPECT_EQ(jget(c, list.out, "{1,name}"), "nightly");
  EXPECT_EQ(jget(c, list.out, "{1,next_slot}"), next);
  auto table = cli({"schedule", "list", domain});
  EXPECT_TRUE(contains(table.out, "every 30s")) << table.out;
  EXPECT_TRUE(contains(table.out, "cron \"30 2 * * *\" Europe/Berlin"));

  auto show = cli({"schedule", "show", domain, "nightly"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_TRUE(contains(show.out, "misfire          run_once")) << show.out;
  EXPECT_TRUE(contains(show.out, "paused           no")) << show.out;

  ASSERT_EQ(cli({"schedule", "pause", domain, "nightly"}).exit_code, 0);
  auto paused = cli({"schedule", "show", domain, "nightly", "--json"});
  EXPECT_EQ(jget(c, paused.out, "{paused}"), "true") << paused.out;
  ASSERT_EQ(cli({"schedule", "resume", domain, "nightly"}).exit_code, 0);
  EXPECT_FALSE(schedules::get(c, domain, "nightly")->paused);

  auto trigger = cli({"schedule", "trigger", domain, "nightly", "--json"});
  ASSERT_EQ(trigger.exit_code, 0) << trigger.err;
  auto id = jget(c, trigger.out, "{command_id}").value_or("");
  auto r = c.query("SELECT command_type FROM commandbus.command WHERE "
                   "domain = $1 AND command_id = $2::uuid",
                   domain, id);
  ASSERT_EQ(r.rows(), 1) << trigger.out;
  EXPECT_EQ(r.text(0, 0), "BuildReport");

  ASSERT_EQ(cli({"schedule", "remove", domain, "nightly"}).exit_code, 0);
  EXPECT_EQ(cli({"schedule", "show", domain, "nightly"}).exit_code, 2);
  EXPECT_EQ(cli({"schedule", "pause", domain, "nightly"}).exit_code, 2);
  EXPECT_EQ(cli({"schedule", "trigger", domain, "nightly"}).exit_code, 2);
}

TEST(CliSchedule, InvalidDefinitionsAreUsageErrors) {
  auto domain = unique_name("clis");
  auto bad_cron = cli(
    {"schedule", "add", domain, "x", "T", "--cron", "0 24 * * *"});
  EXPECT_EQ(bad_cron.exit_code, 1);
  EXPECT_TRUE(
    contains(bad_cron.err, "cron field hour '24': 24 is out of range 0-23"))
    << bad_cron.err;
  auto bad_zone = cli({"schedule", "add", domain, "x", "T", "--cron",
                       "0 2 * * *", "--tz", "Mars/Olympus"});
  EXPECT_EQ(bad_zone.exit_code, 1);
  EXPECT_TRUE(contains(bad_zone.err, "unknown time zone 'Mars/Olympus'"))
    << bad_zone.err;
  auto both = cli({"schedule", "add", domain, "x", "T", "--cron", "0 2 * * *",
                   "--every", "1h"});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_TRUE(contains(both.err, "either --cron EXPR or --every DURATION"))
    << both.err;
  auto misfire = cli({"schedule", "add", domain, "x", "T", "--every", "1h",
                      "--misfire", "later"});
  EXPECT_EQ(misfire.exit_code, 1);
  auto c = connect();
  EXPECT_TRUE(schedules::list(c, domain).empty());
}
