// Batches through the command bus API beyond creation (bus_batches_test.cpp):
// query_commands by batch, refresh_batch (the counter repair path), the
// bus's max_attempts default inside a batch, the error for an existing batch
// id, and a batch's counters under a worker while commands are still
// running. State is checked with SQL on a connection of the test's own.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "cmdbus/model/errors.hpp"
#include "tests/support/rows.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

batch_command make_cmd(const std::string& type = "T") {
  batch_command c;
  c.command_type = type;
  c.command_id = uuid::random();
  return c;
}

std::vector<std::string> ids_of(const std::vector<command_metadata>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.command_id.to_string());
  return out;
}

void set_command_status(db::connection& c, const std::string& domain,
                        const uuid& id, const std::string& status) {
  c.query("UPDATE commandbus.command SET status = $3 WHERE domain = $1 AND "
          "command_id = $2::uuid",
          domain, id.to_string(), status);
}

} // namespace

// -- query_commands
// ------------------------------------------------------------

TEST(BusBatchQuery, QueryCommandsByBatchId) {
  bus_env e;
  auto d = test::unique_name("bbq");
  auto a = e.bus.create_batch(d, {make_cmd("A"), make_cmd("B")});
  auto b = e.bus.create_batch(d, {make_cmd("A")});
  e.bus.send(make_req(d, "A"));
  command_query q;
  q.domain = d;
  q.batch_id = a.batch_id;
  auto got = e.bus.query_commands(q);
  ASSERT_EQ(got.size(), 2u);
  for (auto& m : got)
    EXPECT_EQ(m.batch_id, std::optional<uuid>{a.batch_id});
  std::vector<std::string> want{a.command_results[0].command_id.to_string(),
                                a.command_results[1].command_id.to_string()};
  auto have = ids_of(got);
  std::sort(want.begin(), want.end());
  std::sort(have.begin(), have.end());
  EXPECT_EQ(have, want);
  // Combined with the other filters.
  q.command_type = "A";
  EXPECT_EQ(
    ids_of(e.bus.query_commands(q)),
    std::vector<std::string>{a.command_results[0].command_id.to_string()});
  q.command_type.reset();
  set_command_status(e.conn, d, a.command_results[1].command_id, "FAILED");
  q.status = command_status::failed;
  EXPECT_EQ(
    ids_of(e.bus.query_commands(q)),
    std::vector<std::string>{a.command_results[1].command_id.to_string()});
  q.status.reset();
  q.batch_id = b.batch_id;
  EXPECT_EQ(e.bus.query_commands(q).size(), 1u);
  q.batch_id = uuid::random();
  EXPECT_TRUE(e.bus.query_commands(q).empty());
  // Without the filter: all four, the plain send included.
  q.batch_id.reset();
  EXPECT_EQ(e.bus.query_commands(q).size(), 4u);
}

// -- refresh_batch
// -------------------------------------------------------------

TEST(BusBatchQuery, RefreshRepairsTamperedCounters) {
  bus_env e;
  auto d = test::unique_name("bbq");
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd(),
                                  make_cmd()};
  auto res = e.bus.create_batch(d, cmds);
  auto id = res.batch_id.to_string();
  set_command_status(e.conn, d, cmds[0].command_id, "COMPLETED");
  set_command_status(e.conn, d, cmds[1].command_id, "IN_TROUBLESHOOTING_QUEUE");
  e.conn.query("UPDATE commandbus.batch SET completed_count = 7, "
               "failed_count = 2, canceled_count = 1, "
               "in_troubleshooting_count = 5 WHERE domain = $1 AND "
               "batch_id = $2::uuid",
               d, id);
  auto after = e.bus.refresh_batch(d, res.batch_id);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->completed_count, 1);
  EXPECT_EQ(after->failed_count, 0);
  EXPECT_EQ(after->canceled_count, 0);
  EXPECT_EQ(after->in_troubleshooting_count, 1);
  EXPECT_EQ(after->status, batch_status::in_progress);
  EXPECT_TRUE(after->started_at);
  EXPECT_FALSE(after->completed_at);
  auto row = read_batch(e.conn, d, id);
  EXPECT_EQ(row.completed, 1);
  EXPECT_EQ(row.failed, 0);
  EXPECT_EQ(row.canceled, 0);
  EXPECT_EQ(row.in_tsq, 1);
  EXPECT_EQ(row.status, "IN_PROGRESS");
  EXPECT_EQ(row.total, 4);
  // The rest finished: a TSQ item counts as finished for the recount, so
  // the batch completes, with failures.
  set_command_status(e.conn, d, cmds[2].command_id, "FAILED");
  set_command_status(e.conn, d, cmds[3].command_id, "CANCELED");
  after = e.bus.refresh_batch(d, res.batch_id);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, batch_status::completed_with_failures);
  EXPECT_EQ(after->failed_count, 1);
  EXPECT_EQ(after->canceled_count, 1);
  EXPECT_TRUE(after->completed_at);
  EXPECT_EQ(read_batch(e.conn, d, id).status, "COMPLETED_WITH_FAILURES");
  // No audit event for the repair.
  EXPECT_EQ(scalar(e.conn,
                   "SELECT count(*) FROM commandbus.audit WHERE domain = $1 "
                   "AND command_id = $2::uuid",
                   d, id),
            opt_str{"0"});
  // The completion is recorded for delivery (a worker with batch callbacks
  // runs them), once: a second refresh of the finished batch adds nothing.
  auto deliveries = [&] {
    return scalar(e.conn,
                  "SELECT count(*) FROM commandbus.cmdbus_batch_delivery "
                  "WHERE domain = $1 AND batch_id = $2::uuid AND "
                  "delivered_at IS NULL",
                  d, id);
  };
  EXPECT_EQ(deliveries(), opt_str{"1"});
  e.conn.query("DELETE FROM commandbus.cmdbus_batch_delivery WHERE domain = "
               "$1 AND batch_id = $2::uuid",
               d, id);
  ASSERT_TRUE(e.bus.refresh_batch(d, res.batch_id));
  EXPECT_EQ(deliveries(), opt_str{"0"});
}

TEST(BusBatchQuery, RefreshOfUnknownOrForeignBatchIsNullopt) {
  bus_env e;
  auto d = test::unique_name("bbq");
  auto other = test::unique_name("bbq");
  auto res = e.bus.create_batch(d, {make_cmd()});
  EXPECT_FALSE(e.bus.refresh_batch(d, uuid::random()));
  EXPECT_FALSE(e.bus.refresh_batch(other, res.batch_id));
  EXPECT_EQ(read_batch(e.conn, d, res.batch_id.to_string()).status, "PENDING");
}

// -- create_batch ------------------------------------------------------------

TEST(BusBatchQuery, MaxAttemptsInheritedFromTheBusOrOverridden) {
  bus_env e;
  command_bus_options opts;
  opts.default_max_attempts = 6;
  command_bus bus{e.pool, opts};
  auto d = test::unique_name("bbq");
  std::vector<batch_command> cmds{make_cmd(), make_cmd()};
  cmds[1].max_attempts = 2;
  bus.create_batch(d, cmds);
  EXPECT_EQ(column(e.conn, d, cmds[0].command_id, "max_attempts"),
            opt_str{"6"});
  EXPECT_EQ(column(e.conn, d, cmds[1].command_id, "max_attempts"),
            opt_str{"2"});
}

TEST(BusBatchQuery, ExistingBatchIdIsAnInvalidOperation) {
  bus_env e;
  auto d = test::unique_name("bbq");
  auto first = e.bus.create_batch(d, {make_cmd()});
  create_batch_options opts;
  opts.batch_id = first.batch_id;
  auto again = make_cmd();
  EXPECT_THROW(e.bus.create_batch(d, {again}, opts), invalid_operation_error);
  EXPECT_EQ(status_of(e.conn, d, again.command_id), std::nullopt);
  EXPECT_EQ(read_batch(e.conn, d, first.batch_id.to_string()).total, 1);
  // The same id in another domain is another batch.
  auto other = test::unique_name("bbq");
  EXPECT_EQ(e.bus.create_batch(other, {make_cmd()}, opts).batch_id,
            first.batch_id);
}

// -- under a worker
// ------------------------------------------------------------

// A batch starts when its first command is received, counts each outcome
// as it happens (a command in the troubleshooting queue included) and stays
// IN_PROGRESS while commands run or wait in the troubleshooting queue.
TEST(BusBatchQuery, CountersFollowCommandsUnderAWorker) {
  bus_env e;
  auto d = test::unique_name("bbq");
  auto held = make_cmd("Hold");
  auto ok = make_cmd("Ok");
  auto bad = make_cmd("Bad");
  auto res = e.bus.create_batch(d, {held, ok, bad});
  auto id = res.batch_id.to_string();
  EXPECT_EQ(read_batch(e.conn, d, id).status, "PENDING");
  EXPECT_FALSE(read_batch(e.conn, d, id).started_at);
  gate g;
  std::atomic<bool> entered{false};
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  reg.add(d, "Hold", [&](const command&, handler_context&) -> json {
    entered = true;
    g.wait();
    return json::null();
  });
  reg.add(d, "Bad", [](const command&, handler_context&) -> json {
    throw permanent_command_error("NOPE", "refused");
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] {
    g.open();
    stop_worker(w);
  }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return entered && has_status(e.conn, d, ok.command_id, "COMPLETED")
           && has_status(e.conn, d, bad.command_id, "IN_TROUBLESHOOTING_QUEUE")
           && read_batch(e.conn, d, id).in_tsq == 1;
  }));
  auto b = read_batch(e.conn, d, id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_TRUE(b.started_at);
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.failed, 0);
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_FALSE(b.completed_at);
  g.open();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, held.command_id, "COMPLETED"); }));
  ASSERT_TRUE(
    eventually([&] { return read_batch(e.conn, d, id).completed == 2; }));
  b = read_batch(e.conn, d, id);
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS") << "a TSQ item keeps the batch open";
  EXPECT_FALSE(b.completed_at);
}
