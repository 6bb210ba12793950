// Batches under a worker: the batch counters follow the outcomes of its
// commands, and the completion callback fires once per batch when it
// becomes terminal (COMPLETED or COMPLETED_WITH_FAILURES). Against the real
// database, state checked with SQL.

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/model/errors.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

// -- completion callback ------------------------------------------------------

TEST(WorkerBatch, CallbackFiresOnceWhenBatchCompletes) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto mk = [](const std::string& type) {
    batch_command c;
    c.command_type = type;
    c.command_id = uuid::random();
    return c;
  };
  auto ok_batch = e.bus.create_batch(d, {mk("Ok"), mk("Ok"), mk("Ok")});
  auto mixed_batch = e.bus.create_batch(d, {mk("Ok"), mk("Rule"), mk("Ok")});
  std::mutex mtx;
  std::vector<std::pair<std::string, uuid>> fired;
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  reg.add(d, "Rule", [](const command&, handler_context&) -> json {
    throw business_rule_error("NO", "not allowed");
  });
  worker w{make_cfg({d}), std::move(reg)};
  w.on_batch_complete([&](const std::string& domain, const uuid& id) {
    std::lock_guard<std::mutex> guard{mtx};
    fired.emplace_back(domain, id);
  });
  finally stop{[&] { stop_worker(w); }};
  w.start();
  EXPECT_THROW(w.on_batch_complete([](const std::string&, const uuid&) {}),
               std::logic_error);
  auto batch_col = [&](const uuid& id, const std::string& col) {
    return scalar(e.conn,
                  "SELECT " + col
                    + "::text FROM commandbus.batch WHERE domain = $1 AND "
                      "batch_id = $2::uuid",
                  d, id.to_string());
  };
  auto fired_count = [&] {
    std::lock_guard<std::mutex> guard{mtx};
    return fired.size();
  };
  ASSERT_TRUE(eventually([&] {
    return batch_col(ok_batch.batch_id, "status") == opt_str{"COMPLETED"}
           && batch_col(mixed_batch.batch_id, "status")
                == opt_str{"COMPLETED_WITH_FAILURES"}
           && fired_count() >= 2;
  })) << "batch statuses " << batch_col(ok_batch.batch_id, "status").value_or("?")
      << ", " << batch_col(mixed_batch.batch_id, "status").value_or("?")
      << "; callbacks " << fired_count();
  stop_worker(w);
  EXPECT_EQ(batch_col(ok_batch.batch_id, "completed_count"), opt_str{"3"});
  EXPECT_EQ(batch_col(ok_batch.batch_id, "failed_count"), opt_str{"0"});
  EXPECT_EQ(batch_col(mixed_batch.batch_id, "completed_count"), opt_str{"2"});
  EXPECT_EQ(batch_col(mixed_batch.batch_id, "failed_count"), opt_str{"1"});
  EXPECT_EQ(batch_col(mixed_batch.batch_id, "in_troubleshooting_count"),
            opt_str{"0"});
  std::lock_guard<std::mutex> guard{mtx};
  ASSERT_EQ(fired.size(), 2u);
  auto times = [&](const uuid& id) {
    return std::count_if(fired.begin(), fired.end(),
                         [&](auto& x) { return x.second == id; });
  };
  EXPECT_EQ(times(ok_batch.batch_id), 1);
  EXPECT_EQ(times(mixed_batch.batch_id), 1);
  for (auto& x : fired)
    EXPECT_EQ(x.first, d);
}

// The database goes away after a batch's callbacks ran and before the batch
// counter marked it delivered: the counter marks it once it reconnects,
// instead of leaving it leased (60 s) and running the callback again.
TEST(WorkerBatch, CallbackRunBeforeAnOutageIsMarkedOnceReconnected) {
  bus_env e;
  auto d = test::unique_name("wk");
  batch_command c;
  c.command_type = "Ok";
  c.command_id = uuid::random();
  auto batch = e.bus.create_batch(d, {c});
  std::mutex mtx;
  int fired = 0;
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  worker w{make_cfg({d}), std::move(reg)};
  w.on_batch_complete([&](const std::string&, const uuid&) {
    // Ends the batch counter's session between its claim and its mark.
    auto killer = test::connect();
    killer.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                 " WHERE application_name = 'cmdbus-batches'"
                 " AND datname = current_database()");
    std::lock_guard<std::mutex> guard{mtx};
    ++fired;
  });
  finally stop{[&] { stop_worker(w); }};
  w.start();
  auto delivered = [&] {
    return scalar(e.conn,
                  "SELECT (delivered_at IS NOT NULL)::text"
                  " FROM commandbus.cmdbus_batch_delivery"
                  " WHERE domain = $1 AND batch_id = $2::uuid",
                  d, batch.batch_id.to_string());
  };
  // Well below the 60 s lease after which it would be delivered again.
  EXPECT_TRUE(eventually([&] { return delivered() == opt_str{"true"}; }, 15s))
    << "delivered: " << delivered().value_or("no row");
  stop_worker(w);
  std::lock_guard<std::mutex> guard{mtx};
  EXPECT_EQ(fired, 1);
}
