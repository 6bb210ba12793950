// Process managers in the `cmdbus` tool: `process start` (the demo type
// DemoOrder), `process list` and `process show`, in text and JSON, with
// their exit codes; and the demo's three paths (completed, compensated
// after a declined charge, waiting on the troubleshooting queue until an
// operator cancels) driven by a `cmdbus worker` child process. The binary
// runs against the test database; rows are checked with SQL and JSON output
// is taken apart by the server.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/process/registry.hpp"
#include "cmdbus/process/store.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

process_result cli(const std::vector<std::string>& args) {
  return run_cmdbus(args, {"CMDBUS_DSN=" + test::dsn()});
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string order(const std::string& id, const std::string& charge) {
  return R"({"order_id": ")" + id + R"(", "charge": ")" + charge + R"("})";
}

// Starts a DemoOrder with `cmdbus process start --json`; returns its id.
std::string start(db::connection& c, const std::string& domain,
                  const std::string& input,
                  const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"process", "start", domain,  "DemoOrder",
                                "--data",  input,   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  return jget(c, r.out, "{process_id}").value_or("");
}

opt_str process_column(db::connection& c, const std::string& domain,
                       const std::string& id, const std::string& col) {
  return scalar(c,
                "SELECT " + col
                  + "::text FROM commandbus.process WHERE domain = $1"
                    " AND process_id = $2::uuid",
                domain, id);
}

// The JSON array length of `text`.
int64_t length(db::connection& c, const std::string& text) {
  return c.query("SELECT jsonb_array_length($1::jsonb)", text).int64(0, 0);
}

} // namespace

TEST(cli_process, start_sends_the_first_step_and_list_and_show_find_it) {
  bus_env env;
  auto domain = unique_name("clip");
  auto first = start(env.conn, domain, order("o-1", "ok"), {"--create"});
  auto second = start(env.conn, domain, order("o-2", "declined"));
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());

  // The row and the first command, correlated to the process.
  EXPECT_EQ(process_column(env.conn, domain, first, "status"), "WAITING");
  EXPECT_EQ(process_column(env.conn, domain, first, "current_step"), "Reserve");
  EXPECT_EQ(scalar(env.conn,
                   "SELECT correlation_id::text || ' ' || reply_queue FROM "
                   "commandbus.command WHERE domain = $1 AND command_id = ("
                   "SELECT command_id FROM commandbus.process_audit WHERE "
                   "domain = $1 AND process_id = $2::uuid)",
                   domain, first),
            first + " " + process_reply_queue(domain));

  // Text output.
  auto r = cli({"process", "start", domain, "DemoOrder", "--data",
                order("o-3", "broken")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "started DemoOrder process ")) << r.out;
  EXPECT_TRUE(contains(r.out, "WAITING at step Reserve")) << r.out;
  r = cli({"process", "list", domain});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, first) && contains(r.out, second)) << r.out;
  EXPECT_TRUE(contains(r.out, "DemoOrder") && contains(r.out, "Reserve"));

  // Filters and JSON.
  r = cli({"process", "list", domain, "--json"});
  EXPECT_EQ(length(env.conn, r.out), 3) << r.out;
  EXPECT_EQ(jget(env.conn, r.out, "{0,status}"), "WAITING");
  EXPECT_EQ(jget(env.conn, r.out, "{2,process_id}"), first);
  EXPECT_EQ(jget(env.conn, r.out, "{2,state,order_id}"), "o-1");
  r = cli({"process", "list", domain, "--status", "waiting", "--status", "tsq",
           "--type", "DemoOrder", "--limit", "2", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(length(env.conn, r.out), 2) << r.out;
  r = cli({"process", "list", domain, "--status", "COMPLETED", "--json"});
  EXPECT_EQ(r.out, "[]\n");
  r = cli({"process", "list", domain, "--type", "Other", "--json"});
  EXPECT_EQ(r.out, "[]\n");

  r = cli({"process", "show", domain, first});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "WAITING")) << r.out;
  EXPECT_TRUE(contains(r.out, "steps: 1")) << r.out;
  EXPECT_TRUE(contains(r.out, "PENDING")) << r.out;
  EXPECT_TRUE(contains(r.out, "Reserve command: ")) << r.out;
  r = cli({"process", "show", domain, first, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{process,process_type}"), "DemoOrder");
  EXPECT_EQ(jget(env.conn, r.out, "{process,current_step}"), "Reserve");
  EXPECT_EQ(length(env.conn, jget(env.conn, r.out, "{steps}").value_or("")), 1);
  EXPECT_EQ(jget(env.conn, r.out, "{steps,0,step_name}"), "Reserve");
  EXPECT_EQ(jget(env.conn, r.out, "{steps,0,command_type}"), "Test");
  EXPECT_EQ(jget(env.conn, r.out, "{steps,0,command_status}"), "PENDING");
  EXPECT_EQ(jget(env.conn, r.out, "{steps,0,command_data,behavior,outcome}"),
            "success");
  EXPECT_FALSE(jget(env.conn, r.out, "{steps,0,reply_outcome}"));
}

TEST(cli_process, exit_codes) {
  bus_env env;
  auto domain = unique_name("clip");
  env.bus.ensure_queue(db::command_queue(domain));
  auto missing = new_uuid();

  auto r = cli({"process", "show", domain, missing});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "process " + missing + " not found")) << r.err;
  r = cli({"process", "show", domain, missing, "--json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(jget(env.conn, r.out, "{exit_code}"), "2") << r.out;
  EXPECT_EQ(cli({"process", "show", domain, "not-a-uuid"}).exit_code, 1);

  // Unknown type: the message lists the types.
  r = cli({"process", "start", domain, "Nope", "--data", order("o", "ok")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "unknown process type 'Nope'")) << r.err;
  EXPECT_TRUE(contains(r.err, "DemoOrder")) << r.err;
  r = cli({"process", "start", domain, "DemoOrdr", "--data", order("o", "ok")});
  EXPECT_TRUE(contains(r.err, "did you mean DemoOrder?")) << r.err;

  // Bad input: nothing is started.
  for (auto bad : {R"({"charge": "ok"})", R"({"order_id": "o", "charge": "x"})",
                   R"([1])", R"({not json)"}) {
    r = cli({"process", "start", domain, "DemoOrder", "--data", bad});
    EXPECT_EQ(r.exit_code, 1) << bad << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "--data")) << r.err;
  }
  r = cli({"process", "start", domain, "DemoOrder"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "--data is required")) << r.err;
  EXPECT_EQ(scalar(env.conn,
                   "SELECT count(*) FROM commandbus.process WHERE domain = $1",
                   domain),
            "0");

  // A domain without a queue, an unknown batch.
  r = cli({"process", "start", unique_name("clip"), "DemoOrder", "--data",
           order("o", "ok")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "--create")) << r.err;
  r = cli({"process", "start", domain, "DemoOrder", "--data", order("o", "ok"),
           "--batch-id", missing});
  EXPECT_EQ(r.exit_code, 2) << r.err;

  EXPECT_EQ(cli({"process", "list", domain, "--status", "sleeping"}).exit_code,
            1);
  EXPECT_EQ(cli({"process", "list", domain, "--limit", "-1"}).exit_code, 1);
  EXPECT_EQ(cli({"process", "list"}).exit_code, 1);
  EXPECT_EQ(cli({"process"}).exit_code, 1);
  EXPECT_EQ(cli({"process", "lst", domain}).exit_code, 1);
  for (auto sub : {"list", "show", "start"}) {
    r = cli({"process", sub, "--help"});
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_TRUE(contains(r.out, std::string{"cmdbus process "} + sub)) << sub;
    EXPECT_TRUE(contains(r.out, "Exit codes")) << sub;
  }
  r = cli({"process", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "DemoOrder")) << r.out;
  EXPECT_TRUE(contains(cli({"--help"}).out, "process "));
}

TEST(cli_process, start_joins_a_process_batch) {
  bus_env env;
  auto domain = unique_name("clip");
  env.bus.ensure_queue(db::command_queue(domain));
  auto batch = process_store{}.create_batch(env.conn, domain, 1);
  auto id = start(env.conn, domain, order("o-1", "ok"),
                  {"--batch-id", batch.to_string()});
  EXPECT_EQ(process_column(env.conn, domain, id, "batch_id"),
            batch.to_string());
  auto r = cli({"process", "show", domain, id});
  EXPECT_TRUE(contains(r.out, batch.to_string())) << r.out;

  // A batch of commands takes no processes.
  batch_command cmd;
  cmd.command_type = "Test";
  cmd.command_id = uuid::random();
  auto commands = env.bus.create_batch(domain, {cmd});
  r = cli({"process", "start", domain, "DemoOrder", "--data",
           order("o-2", "ok"), "--batch-id", commands.batch_id.to_string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST(cli_process, the_demo_paths_with_a_worker) {
  bus_env env;
  auto domain = unique_name("clip");
  env.bus.ensure_queue(db::command_queue(domain));
  auto ok = start(env.conn, domain, order("o-1", "ok"));
  auto declined = start(env.conn, domain, order("o-2", "declined"));
  auto broken = start(env.conn, domain, order("o-3", "broken"));
  background_cmdbus worker{{"worker", "--demo", "--domain", domain, "--dsn",
                            test::dsn(), "--backoff", "0", "--poll-interval",
                            "100ms", "--quiet"}};
  auto status_is = [&](const std::string& id, const std::string& status) {
    return process_column(env.conn, domain, id, "status") == status;
  };
  // WAITING_FOR_TSQ comes with the router's sweep (every 5 s).
  EXPECT_TRUE(eventually(
    [&] {
      return status_is(ok, "COMPLETED") && status_is(declined, "CANCELED")
             && status_is(broken, "WAITING_FOR_TSQ");
    },
    30s))
    << cli({"process", "list", domain}).out;

  auto r = cli({"process", "show", domain, declined, "--json"});
  EXPECT_EQ(jget(env.conn, r.out, "{process,error_code}"), "CARD_DECLINED");
  EXPECT_EQ(jget(env.conn, r.out, "{steps,1,reply_outcome}"), "FAILED");
  EXPECT_EQ(jget(env.conn, r.out, "{steps,2,step_name}"), "Release");
  EXPECT_EQ(jget(env.conn, r.out, "{steps,2,reply_outcome}"), "SUCCESS");
  r = cli({"process", "show", domain, broken, "--json"});
  EXPECT_EQ(jget(env.conn, r.out, "{steps,1,step_name}"), "Charge");
  EXPECT_EQ(jget(env.conn, r.out, "{steps,1,command_status}"),
            "IN_TROUBLESHOOTING_QUEUE");
  auto charge = jget(env.conn, r.out, "{steps,1,command_id}").value_or("");
  r = cli({"process", "list", domain, "--status", "tsq", "--json"});
  EXPECT_EQ(length(env.conn, r.out), 1) << r.out;

  // The operator cancels the broken charge: the reservation is released.
  r = cli({"tsq", "cancel", domain, charge, "--reason", "gateway down"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(eventually([&] { return status_is(broken, "COMPENSATED"); }))
    << cli({"process", "show", domain, broken}).out;
  r = cli({"process", "show", domain, broken, "--json"});
  EXPECT_EQ(jget(env.conn, r.out, "{steps,1,reply_outcome}"), "CANCELED");
  EXPECT_EQ(jget(env.conn, r.out, "{steps,2,step_name}"), "Release");
  EXPECT_EQ(length(env.conn, jget(env.conn, r.out, "{steps}").value_or("")), 3);
  auto stopped = worker.stop();
  ASSERT_TRUE(stopped);
  EXPECT_EQ(stopped->exit_code, 0) << stopped->err;
}
