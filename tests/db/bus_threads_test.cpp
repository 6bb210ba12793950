// command_bus from many threads at once: a small pool shared by many
// callers, and concurrent sends combined into one transaction (the group
// commit of db/send_combiner.hpp) keeping each caller's own outcome.

#include "tests/db/command_bus_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test::bus;
using namespace std::chrono_literals;

// ============================================================================
// thread safety
// ============================================================================

namespace {

void send_from_threads(bus_env& env, const std::string& d, int threads,
                       int per_thread) {
  start_gate gate{threads};
  std::mutex mtx;
  std::vector<std::string> errors;
  std::set<int64_t> msg_ids;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      gate.arrive_and_wait();
      for (int i = 0; i < per_thread; ++i) {
        try {
          auto res = env.bus.send(make_req(d));
          std::lock_guard<std::mutex> guard{mtx};
          msg_ids.insert(res.msg_id);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> guard{mtx};
          errors.push_back(e.what());
        }
      }
    });
  for (auto& t : ts)
    t.join();
  EXPECT_TRUE(errors.empty()) << errors.size() << " failed sends, first: "
                              << (errors.empty() ? "" : errors.front());
  auto total = static_cast<int64_t>(threads) * per_thread;
  EXPECT_EQ(static_cast<int64_t>(msg_ids.size()), total);
  EXPECT_EQ(command_rows(env.conn, d), total);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), total);
  EXPECT_EQ(audit_rows(env.conn, d), total);
}

} // namespace

TEST(BusThreads, ManyThreadsOneBusSmallPool) {
  // Pool smaller than the thread count; the first sends also create the
  // queue on demand.
  bus_env env{3, {}, 3s};
  send_from_threads(env, test::unique_name("bt"), 8, 15);
  EXPECT_LE(env.pool.size(), 3u);
}

TEST(BusThreads, ManyThreadsOneBusQueueExists) {
  bus_env env{3, {}, 3s};
  auto d = test::unique_name("bt");
  env.bus.ensure_queue(queue_of(d));
  send_from_threads(env, d, 8, 15);
  EXPECT_LE(env.pool.size(), 3u);
}

// Concurrent sends through one bus may be combined into one transaction:
// each caller must still get exactly its own outcome (a duplicate or an
// unknown batch fails only that caller, with its own ids).
TEST(BusThreads, CombinedSendsKeepEachCallersOutcome) {
  constexpr int threads = 8;
  constexpr int per_thread = 12;
  bus_env env{4, {}, 5s};
  auto d = test::unique_name("bt");
  std::vector<uuid> existing;
  for (int i = 0; i < 3; ++i) {
    auto req = make_req(d);
    env.bus.send(req);
    existing.push_back(req.command_id);
  }
  struct outcome {
    send_request req;
    std::optional<send_result> result;
    std::optional<uuid> duplicate_id;
    std::string duplicate_domain;
    std::optional<uuid> missing_batch;
    std::string other_error;
  };
  std::vector<std::vector<outcome>> outcomes(threads);
  start_gate gate{threads};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      auto& mine = outcomes[static_cast<size_t>(t)];
      for (int i = 0; i < per_thread; ++i) {
        outcome o;
        o.req = make_req(d, "T", "{\"t\":" + std::to_string(t) + "}");
        if (i % 4 == 1)
          o.req.command_id = existing[static_cast<size_t>((t + i) % 3)];
        if (i % 4 == 2)
          o.req.batch_id = uuid::random();
        mine.push_back(o);
      }
      gate.arrive_and_wait();
      for (auto& o : mine) {
        try {
          o.result = env.bus.send(o.req);
        } catch (const duplicate_command_error& e) {
          o.duplicate_id = e.command_id();
          o.duplicate_domain = e.domain();
        } catch (const batch_not_found_error& e) {
          o.missing_batch = e.batch_id();
        } catch (const std::exception& e) {
          o.other_error = e.what();
        }
      }
    });
  for (auto& t : ts)
    t.join();
  int64_t sent = 0;
  std::set<int64_t> msg_ids;
  for (auto& mine : outcomes)
    for (size_t i = 0; i < mine.size(); ++i) {
      auto& o = mine[i];
      EXPECT_EQ(o.other_error, "");
      if (i % 4 == 1) {
        ASSERT_TRUE(o.duplicate_id) << i;
        EXPECT_EQ(o.duplicate_id->to_string(), o.req.command_id.to_string());
        EXPECT_EQ(o.duplicate_domain, d);
      } else if (i % 4 == 2) {
        ASSERT_TRUE(o.missing_batch) << i;
        EXPECT_EQ(o.missing_batch->to_string(), o.req.batch_id->to_string());
        EXPECT_FALSE(command_row_exists(env.conn, d, o.req.command_id));
      } else {
        ASSERT_TRUE(o.result) << i;
        ++sent;
        msg_ids.insert(o.result->msg_id);
        EXPECT_EQ(o.result->command_id.to_string(),
                  o.req.command_id.to_string());
        auto row = read_row(env.conn, d, o.req.command_id);
        ASSERT_TRUE(row);
        EXPECT_EQ(row->msg_id, std::optional<int64_t>{o.result->msg_id});
        auto msg = read_message(env.conn, queue_of(d), o.result->msg_id);
        ASSERT_TRUE(msg);
        EXPECT_EQ(msg->command_id, opt_str{o.req.command_id.to_string()});
      }
    }
  EXPECT_EQ(static_cast<int64_t>(msg_ids.size()), sent);
  EXPECT_EQ(command_rows(env.conn, d), sent + 3);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), sent + 3);
  EXPECT_EQ(audit_rows(env.conn, d), sent + 3);
}

// The SENT audit of a plain send has the reference's details keys, batch_id
// (null) included, as the reference library writes it, also when concurrent
// sends through one bus are combined into one transaction.
TEST(BusThreads, CombinedSendsKeepReferenceAuditDetails) {
  constexpr int threads = 8;
  bus_env env{4};
  auto d = test::unique_name("bta");
  env.bus.ensure_queue(queue_of(d));
  std::vector<std::vector<send_request>> reqs(threads);
  for (auto& mine : reqs)
    for (int i = 0; i < 10; ++i)
      mine.push_back(make_req(d));
  start_gate gate{threads};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      gate.arrive_and_wait();
      for (auto& req : reqs[static_cast<size_t>(t)])
        env.bus.send(req);
    });
  for (auto& t : ts)
    t.join();
  EXPECT_EQ(audit_rows(env.conn, d), threads * 10);
  auto r = env.conn.query(
    "SELECT count(*) FILTER (WHERE NOT details_json ? 'batch_id'), "
    "count(*) FILTER (WHERE (SELECT string_agg(k, ',' ORDER BY k) FROM "
    "jsonb_object_keys(details_json) AS k) = "
    "'batch_id,command_type,correlation_id,msg_id,reply_to') "
    "FROM commandbus.audit WHERE domain = $1 AND event_type = 'SENT'",
    d);
  EXPECT_EQ(r.int64(0, 0), 0) << "SENT audits without a batch_id key";
  EXPECT_EQ(r.int64(0, 1), threads * 10);
}
