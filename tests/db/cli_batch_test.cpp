// Batches in the `cmdbus` tool: `send-batch --batch` (one batch created
// atomically), `batch list/show/refresh` and `list --batch`, with their
// exit codes. The binary runs as a child process against the test database
// (CMDBUS_DSN); rows are checked with SQL and JSON output is taken apart by
// the server.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/rows.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

/// Runs `cmdbus <args...>` on the test database.
process_result cli(const std::vector<std::string>& args) {
  return run_cmdbus(args, {"CMDBUS_DSN=" + test::dsn()});
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// A JSON-lines file in the system's temporary folder, removed on
/// destruction.
class lines_file {
public:
  explicit lines_file(const std::string& content)
    : path_((std::filesystem::temp_directory_path()
             / (test::unique_name("cmdbus_batch") + ".jsonl"))
              .string()) {
    std::ofstream{path_, std::ios::binary} << content;
  }
  lines_file(const lines_file&) = delete;
  lines_file& operator=(const lines_file&) = delete;
  ~lines_file() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::string& path() const noexcept {
    return path_;
  }

private:
  std::string path_;
};

/// `n` lines of command type `type`.
std::string commands(int n, const std::string& type = "T") {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += R"({"command_type":")" + type + R"(","data":{"i":)"
           + std::to_string(i) + "}}\n";
  return out;
}

int64_t batch_rows(db::connection& c, const std::string& domain) {
  return c
    .query("SELECT count(*) FROM commandbus.batch WHERE domain = $1", domain)
    .int64(0, 0);
}

int64_t rows_of_batch(db::connection& c, const std::string& domain,
                      const std::string& batch_id) {
  return c
    .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
           "batch_id = $2::uuid",
           domain, batch_id)
    .int64(0, 0);
}

/// The batch id in "created batch ID of ..." (empty when absent).
std::string created_id(const std::string& out) {
  const std::string prefix = "created batch ";
  auto pos = out.find(prefix);
  if (pos == std::string::npos)
    return "";
  return out.substr(pos + prefix.size(), 36);
}

/// Creates a batch of `n` commands through the API; returns its result.
create_batch_result make_batch(command_bus& bus, const std::string& domain,
                               int n, const std::string& name = "") {
  std::vector<batch_command> cmds;
  for (int i = 0; i < n; ++i) {
    batch_command c;
    c.command_type = "T";
    c.command_id = uuid::random();
    cmds.push_back(c);
  }
  create_batch_options opts;
  if (!name.empty())
    opts.name = name;
  return bus.create_batch(domain, cmds, opts);
}

void set_status(db::connection& c, const std::string& domain, const uuid& id,
                const std::string& status) {
  c.query("UPDATE commandbus.command SET status = $3 WHERE domain = $1 AND "
          "command_id = $2::uuid",
          domain, id.to_string(), status);
}

} // namespace

// ============================================================================
// send-batch --batch
// ============================================================================

TEST(CliBatch, SendBatchCreatesOneBatchAndPrintsItsId) {
  auto conn = test::connect();
  auto d = test::unique_name("clb");
  lines_file f{commands(2) + "\n"
               + R"({"command_type":"R","max_attempts":5,"reply_to":")" + d
               + R"(__replies"})" + "\n"};
  auto r = cli({"send-batch", d, "--file", f.path(), "--batch", "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto id = created_id(r.out);
  ASSERT_TRUE(uuid::parse(id)) << r.out;
  EXPECT_TRUE(contains(r.out, "3 command(s)")) << r.out;
  EXPECT_EQ(batch_rows(conn, d), 1);
  auto b = read_batch(conn, d, id);
  EXPECT_EQ(b.status, "PENDING");
  EXPECT_EQ(b.total, 3);
  EXPECT_EQ(rows_of_batch(conn, d, id), 3);
  EXPECT_EQ(command_rows(conn, d), 3);
  EXPECT_EQ(queue_length(conn, queue_of(d)), 3);
  EXPECT_EQ(scalar(conn,
                   "SELECT max_attempts || ' ' || reply_queue FROM "
                   "commandbus.command WHERE domain = $1 AND command_type = "
                   "'R'",
                   d),
            opt_str{"5 " + d + "__replies"});
  EXPECT_EQ(scalar(conn,
                   "SELECT count(*) FROM commandbus.audit WHERE domain = $1 "
                   "AND event_type = 'SENT' AND details_json->>'batch_id' = $2",
                   d, id),
            opt_str{"3"});
}

TEST(CliBatch, SendBatchNameIdCustomDataAndJson) {
  auto conn = test::connect();
  auto d = test::unique_name("clb");
  auto id = test::new_uuid();
  lines_file f{commands(3)};
  // --name implies --batch.
  auto r = cli({"send-batch", d, "--file", f.path(), "--name", "nightly run",
                "--batch-id", id, "--custom-data", R"({"k":[1,2]})", "--json",
                "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(conn, r.out, "{batch_id}"), opt_str{id}) << r.out;
  EXPECT_EQ(jget(conn, r.out, "{total}"), opt_str{"3"});
  EXPECT_EQ(jget(conn, r.out, "{queue}"), opt_str{queue_of(d)});
  EXPECT_EQ(scalar(conn, "SELECT jsonb_array_length($1::jsonb->'results')",
                   r.out),
            opt_str{"3"});
  auto first = jget(conn, r.out, "{results,0,command_id}");
  ASSERT_TRUE(first);
  EXPECT_EQ(column(conn, d, *uuid::parse(*first), "batch_id"), opt_str{id});
  EXPECT_EQ(scalar(conn,
                   "SELECT name || ' ' || (custom_data = '{\"k\":[1,2]}')::text"
                   " FROM commandbus.batch WHERE domain = $1 AND "
                   "batch_id = $2::uuid",
                   d, id),
            opt_str{"nightly run true"});
  EXPECT_EQ(rows_of_batch(conn, d, id), 3);
}

TEST(CliBatch, ExistingBatchIdExitsTwoAndSendsNothing) {
  auto conn = test::connect();
  auto d = test::unique_name("clb");
  auto id = test::new_uuid();
  lines_file one{commands(1)};
  auto r = cli(
    {"send-batch", d, "--file", one.path(), "--batch-id", id, "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  lines_file two{commands(2, "U")};
  r = cli({"send-batch", d, "--file", two.path(), "--batch-id", id});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, id + " already exists")) << r.err;
  EXPECT_TRUE(contains(r.err, "nothing is added")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(batch_rows(conn, d), 1);
  EXPECT_EQ(read_batch(conn, d, id).total, 1);
  EXPECT_EQ(command_rows(conn, d), 1);
  EXPECT_EQ(queue_length(conn, queue_of(d)), 1);
}

TEST(CliBatch, UnknownLineKeyExitsOneNamingFileAndLine) {
  auto conn = test::connect();
  auto d = test::unique_name("clb");
  lines_file f{commands(1) + R"({"command_type":"T","payload":{"a":1}})"
               + "\n"};
  for (auto batch : {false, true}) {
    std::vector<std::string> args{"send-batch", d, "--file", f.path(),
                                  "--create"};
    if (batch)
      args.push_back("--batch");
    auto r = cli(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(
      contains(r.err, f.path()
                        + ":2: unknown field \"payload\" (expected "
                          "command_type, data, command_id, correlation_id, "
                          "reply_to, max_attempts, delay, not_before, at, "
                          "priority)"))
      << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
  }
  EXPECT_EQ(command_rows(conn, d), 0);
  EXPECT_EQ(batch_rows(conn, d), 0);
}

TEST(CliBatch, MissingQueueExitsTwoUnlessCreate) {
  auto conn = test::connect();
  auto d = test::unique_name("clb");
  lines_file f{commands(2)};
  for (auto batch : {false, true}) {
    std::vector<std::string> args{"send-batch", d, "--file", f.path()};
    if (batch)
      args.push_back("--batch");
    auto r = cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, queue_of(d))) << r.err;
    EXPECT_TRUE(contains(r.err, "--create")) << r.err;
  }
  EXPECT_EQ(command_rows(conn, d), 0);
  EXPECT_EQ(batch_rows(conn, d), 0);
  EXPECT_EQ(scalar(conn, "SELECT count(*) FROM pgmq.meta WHERE queue_name = $1",
                   queue_of(d)),
            opt_str{"0"});
  auto r = cli({"send-batch", d, "--file", f.path(), "--batch", "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(batch_rows(conn, d), 1);
  EXPECT_EQ(queue_length(conn, queue_of(d)), 2);
}

TEST(CliBatch, SendBatchUsageErrorsExitOne) {
  auto conn = test::connect();
  auto d = test::unique_name("clb");
  lines_file f{commands(1)};
  auto r = cli({"send-batch", d, "--file", f.path(), "--batch", "--chunk-size",
                "2", "--create"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--chunk-size")) << r.err;
  r = cli(
    {"send-batch", d, "--file", f.path(), "--batch-id", "nope", "--create"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--batch-id")) << r.err;
  r = cli(
    {"send-batch", d, "--file", f.path(), "--custom-data", "[1]", "--create"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--custom-data")) << r.err;
  EXPECT_EQ(command_rows(conn, d), 0);
  EXPECT_EQ(batch_rows(conn, d), 0);
}

// ============================================================================
// batch list / show / refresh
// ============================================================================

TEST(CliBatch, ListTextJsonStatusAndPages) {
  bus_env e;
  auto d = test::unique_name("clb");
  auto done = make_batch(e.bus, d, 1, "first");
  auto open = make_batch(e.bus, d, 2, "second");
  // Distinct creation times: "second" is the newest.
  e.conn.query("UPDATE commandbus.batch SET created_at = created_at - "
               "interval '1 minute' WHERE domain = $1 AND batch_id = $2::uuid",
               d, done.batch_id.to_string());
  set_status(e.conn, d, done.command_results[0].command_id, "COMPLETED");
  ASSERT_TRUE(e.bus.refresh_batch(d, done.batch_id));

  auto r = cli({"batch", "list", d});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, done.batch_id.to_string())) << r.out;
  EXPECT_TRUE(contains(r.out, open.batch_id.to_string())) << r.out;
  EXPECT_TRUE(contains(r.out, "1/1")) << r.out;
  EXPECT_TRUE(contains(r.out, "0/2")) << r.out;
  EXPECT_LT(r.out.find(open.batch_id.to_string()),
            r.out.find(done.batch_id.to_string()))
    << "newest first";

  r = cli({"batch", "list", d, "--status", "completed"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, done.batch_id.to_string())) << r.out;
  EXPECT_FALSE(contains(r.out, open.batch_id.to_string())) << r.out;

  r = cli({"batch", "list", d, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(e.conn, r.out, "{0,batch_id}"),
            opt_str{open.batch_id.to_string()});
  EXPECT_EQ(jget(e.conn, r.out, "{0,name}"), opt_str{"second"});
  EXPECT_EQ(jget(e.conn, r.out, "{0,progress}"), opt_str{"0.0"});
  EXPECT_EQ(jget(e.conn, r.out, "{1,status}"), opt_str{"COMPLETED"});
  EXPECT_EQ(jget(e.conn, r.out, "{1,progress}"), opt_str{"1.0"});

  r = cli({"batch", "list", d, "--limit", "1", "--offset", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(scalar(e.conn, "SELECT jsonb_array_length($1::jsonb)", r.out),
            opt_str{"1"});
  EXPECT_EQ(jget(e.conn, r.out, "{0,batch_id}"),
            opt_str{done.batch_id.to_string()});

  r = cli({"batch", "list", d, "--status", "finished"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // Another domain sees none of them.
  r = cli({"batch", "list", test::unique_name("clb"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[]\n");
}

TEST(CliBatch, ShowTextAndJsonWithTroubleshootingItems) {
  bus_env e;
  auto d = test::unique_name("clb");
  auto b = make_batch(e.bus, d, 4, "show me");
  auto& res = b.command_results;
  set_status(e.conn, d, res[0].command_id, "COMPLETED");
  set_status(e.conn, d, res[1].command_id, "FAILED");
  set_status(e.conn, d, res[2].command_id, "IN_TROUBLESHOOTING_QUEUE");
  ASSERT_TRUE(e.bus.refresh_batch(d, b.batch_id));
  auto id = b.batch_id.to_string();

  auto r = cli({"batch", "show", d, id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "show me")) << r.out;
  EXPECT_TRUE(contains(r.out, "IN_PROGRESS")) << r.out;
  EXPECT_TRUE(contains(r.out, "2/4")) << r.out;
  EXPECT_FALSE(contains(r.out, "[#")) << "no bar when not on a terminal";
  EXPECT_TRUE(contains(r.out, "in the troubleshooting queue: 1")) << r.out;
  EXPECT_TRUE(contains(r.out, res[2].command_id.to_string())) << r.out;
  EXPECT_FALSE(contains(r.out, res[1].command_id.to_string())) << r.out;

  r = cli({"batch", "show", d, id, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(e.conn, r.out, "{batch,batch_id}"), opt_str{id});
  EXPECT_EQ(jget(e.conn, r.out, "{batch,status}"), opt_str{"IN_PROGRESS"});
  EXPECT_EQ(jget(e.conn, r.out, "{batch,total_count}"), opt_str{"4"});
  EXPECT_EQ(jget(e.conn, r.out, "{batch,completed_count}"), opt_str{"1"});
  EXPECT_EQ(jget(e.conn, r.out, "{batch,failed_count}"), opt_str{"1"});
  EXPECT_EQ(jget(e.conn, r.out, "{batch,in_troubleshooting_count}"),
            opt_str{"1"});
  EXPECT_EQ(jget(e.conn, r.out, "{batch,progress}"), opt_str{"0.5"});
  EXPECT_TRUE(jget(e.conn, r.out, "{batch,started_at}"));
  EXPECT_EQ(scalar(e.conn,
                   "SELECT jsonb_array_length($1::jsonb->'troubleshooting')",
                   r.out),
            opt_str{"1"});
  EXPECT_EQ(jget(e.conn, r.out, "{troubleshooting,0,command_id}"),
            opt_str{res[2].command_id.to_string()});
}

TEST(CliBatch, UnknownBatchExitsTwoAndBadIdExitsOne) {
  bus_env e;
  auto d = test::unique_name("clb");
  auto b = make_batch(e.bus, d, 1);
  auto other = test::unique_name("clb");
  for (std::string sub : {"show", "refresh"}) {
    auto r = cli({"batch", sub, d, test::new_uuid()});
    EXPECT_EQ(r.exit_code, 2) << sub << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "not found")) << r.err;
    r = cli({"batch", sub, other, b.batch_id.to_string()});
    EXPECT_EQ(r.exit_code, 2) << sub << ": " << r.err;
    r = cli({"batch", sub, d, test::new_uuid(), "--json"});
    EXPECT_EQ(r.exit_code, 2) << sub;
    EXPECT_EQ(jget(e.conn, r.out, "{exit_code}"), opt_str{"2"}) << r.out;
    r = cli({"batch", sub, d, "not-a-uuid"});
    EXPECT_EQ(r.exit_code, 1) << sub << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "BATCH_ID")) << r.err;
    r = cli({"batch", sub, d});
    EXPECT_EQ(r.exit_code, 1) << sub << ": " << r.err;
  }
}

TEST(CliBatch, RefreshRepairsAndPrintsBeforeAndAfter) {
  bus_env e;
  auto d = test::unique_name("clb");
  auto b = make_batch(e.bus, d, 3);
  auto id = b.batch_id.to_string();
  for (auto& c : b.command_results)
    set_status(e.conn, d, c.command_id, "COMPLETED");
  e.conn.query("UPDATE commandbus.batch SET completed_count = 9, "
               "canceled_count = 2 WHERE domain = $1 AND batch_id = $2::uuid",
               d, id);
  auto r = cli({"batch", "refresh", d, id, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(e.conn, r.out, "{before,completed_count}"), opt_str{"9"});
  EXPECT_EQ(jget(e.conn, r.out, "{before,canceled_count}"), opt_str{"2"});
  EXPECT_EQ(jget(e.conn, r.out, "{before,status}"), opt_str{"PENDING"});
  EXPECT_EQ(jget(e.conn, r.out, "{after,completed_count}"), opt_str{"3"});
  EXPECT_EQ(jget(e.conn, r.out, "{after,canceled_count}"), opt_str{"0"});
  EXPECT_EQ(jget(e.conn, r.out, "{after,status}"), opt_str{"COMPLETED"});
  EXPECT_EQ(jget(e.conn, r.out, "{after,progress}"), opt_str{"1.0"});
  auto row = read_batch(e.conn, d, id);
  EXPECT_EQ(row.completed, 3);
  EXPECT_EQ(row.canceled, 0);
  EXPECT_EQ(row.status, "COMPLETED");
  EXPECT_TRUE(row.completed_at);

  // Text: both columns, the changed rows marked.
  e.conn.query("UPDATE commandbus.batch SET failed_count = 4 WHERE domain = "
               "$1 AND batch_id = $2::uuid",
               d, id);
  r = cli({"batch", "refresh", d, id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "before")) << r.out;
  EXPECT_TRUE(contains(r.out, "after")) << r.out;
  std::istringstream lines{r.out};
  std::string line, failed_line, completed_line;
  while (std::getline(lines, line)) {
    if (line.rfind("failed", 0) == 0)
      failed_line = line;
    if (line.rfind("completed ", 0) == 0)
      completed_line = line;
  }
  EXPECT_TRUE(contains(failed_line, "4")) << r.out;
  EXPECT_TRUE(contains(failed_line, "changed")) << r.out;
  EXPECT_FALSE(contains(completed_line, "changed")) << r.out;
  EXPECT_EQ(read_batch(e.conn, d, id).failed, 0);
}

TEST(CliBatch, HelpAndSubcommandErrors) {
  auto r = cli({"batch", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "cmdbus batch list")) << r.out;
  EXPECT_TRUE(contains(r.out, "send-batch")) << r.out;
  for (std::string sub : {"list", "show", "refresh"}) {
    r = cli({"batch", sub, "--help"});
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_TRUE(contains(r.out, "usage: cmdbus batch " + sub)) << r.out;
    EXPECT_TRUE(contains(r.out, "Exit codes")) << r.out;
  }
  r = cli({"batch"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "list, show or refresh")) << r.err;
  r = cli({"batch", "shwo", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "did you mean show")) << r.err;
  r = cli({"batch", "list", "x", "--frob"});
  EXPECT_EQ(r.exit_code, 1);
  r = cli({"send-batch", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "--batch-id")) << r.out;
  EXPECT_TRUE(contains(r.out, "existing batch id is refused")) << r.out;
}

// ============================================================================
// list --batch
// ============================================================================

TEST(CliBatch, ListFiltersByBatchAndShowsTheColumn) {
  bus_env e;
  auto d = test::unique_name("clb");
  auto b = make_batch(e.bus, d, 2);
  auto id = b.batch_id.to_string();
  auto plain = e.bus.send(make_req(d, "Plain"));
  auto r = cli({"list", d});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out.substr(0, r.out.find('\n')), "batch")) << r.out;
  std::istringstream lines{r.out};
  std::string line;
  int with_id = 0;
  while (std::getline(lines, line)) {
    if (contains(line, plain.command_id.to_string())) {
      EXPECT_FALSE(contains(line, id)) << line;
    }
    if (contains(line, b.command_results[0].command_id.to_string())) {
      EXPECT_TRUE(contains(line, id)) << line;
    }
    with_id += contains(line, id) ? 1 : 0;
  }
  EXPECT_EQ(with_id, 2) << r.out;

  r = cli({"list", d, "--batch", id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, b.command_results[0].command_id.to_string()));
  EXPECT_TRUE(contains(r.out, b.command_results[1].command_id.to_string()));
  EXPECT_FALSE(contains(r.out, plain.command_id.to_string())) << r.out;

  r = cli({"list", d, "--batch", id, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(scalar(e.conn, "SELECT jsonb_array_length($1::jsonb)", r.out),
            opt_str{"2"});
  EXPECT_EQ(jget(e.conn, r.out, "{0,batch_id}"), opt_str{id});
  EXPECT_EQ(jget(e.conn, r.out, "{1,batch_id}"), opt_str{id});

  r = cli({"list", d, "--batch", "nope"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--batch")) << r.err;
}
