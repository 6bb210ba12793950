// Command identity on every send path: a (domain, command_id) is accepted
// once, also when concurrent sends race for it, and a correlation id given or
// generated is the same in the message and in the command row.

#include "tests/db/command_bus_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test::bus;
using namespace std::chrono_literals;

CMDBUS_BULK_SUITE(BusIdempotency);
CMDBUS_BULK_SUITE(BusCorrelation);

// ============================================================================
// idempotency
// ============================================================================

TEST_P(BusIdempotency, DuplicateIsRejectedWithIdAndDomain) {
  bus_env env;
  auto d = test::unique_name("bi");
  auto req = make_req(d, "First");
  auto first = env.bus.send(req);
  auto again = req;
  again.command_type = "Second";
  again.data = json::parse(R"({"other":true})");
  try {
    env.bus.send(again);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), req.command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  // No second row, message or audit.
  EXPECT_EQ(command_rows(env.conn, d), 1);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);
  EXPECT_EQ(audit_rows(env.conn, d), 1);
  // The existing command is unchanged and still queryable.
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->command_type, "First");
  EXPECT_EQ(meta->msg_id, std::optional<int64_t>{first.msg_id});
  EXPECT_TRUE(env.bus.command_exists(d, req.command_id));
  // The pooled connections are still usable afterwards.
  EXPECT_NO_THROW(env.bus.send(make_req(d)));
  EXPECT_EQ(command_rows(env.conn, d), 2);
}

// The duplicate's lookup must not need a second connection: with a pool of
// one, send_batch still names the duplicate (instead of timing out).
TEST_P(BusIdempotency, DuplicateInBatchIsNamedWithAOneConnectionPool) {
  bus_env env{1, {}, 1500ms};
  auto d = test::unique_name("bi");
  auto existing = make_req(d);
  env.bus.send(existing);
  auto again = existing;
  try {
    env.bus.send_batch({make_req(d), again, make_req(d)});
    ADD_FAILURE() << "the duplicate was not reported";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_EQ(command_rows(env.conn, d), 1);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);
}

TEST_P(BusIdempotency, SameIdInAnotherDomainIsAllowed) {
  bus_env env;
  auto a = test::unique_name("bia");
  auto b = test::unique_name("bib");
  auto req_a = make_req(a);
  auto req_b = make_req(b);
  req_b.command_id = req_a.command_id;
  env.bus.send(req_a);
  EXPECT_NO_THROW(env.bus.send(req_b));
  EXPECT_TRUE(command_row_exists(env.conn, a, req_a.command_id));
  EXPECT_TRUE(command_row_exists(env.conn, b, req_a.command_id));
  EXPECT_EQ(messages_for(env.conn, a, req_a.command_id), 1);
  EXPECT_EQ(messages_for(env.conn, b, req_a.command_id), 1);
}

TEST_P(BusIdempotency, DuplicateOnCallersConnectionIsRejected) {
  bus_env env;
  auto d = test::unique_name("bi");
  auto req = make_req(d);
  env.bus.send(req);
  auto conn = test::connect();
  EXPECT_THROW(env.bus.send(req, conn), duplicate_command_error);
  EXPECT_EQ(command_rows(env.conn, d), 1);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);
}

namespace {

struct race_outcome {
  int ok = 0;
  int duplicates = 0;
  std::vector<std::string> others;
};

/// Runs `send(i)` on `n` threads released at the same moment.
template <class F>
race_outcome race(int n, F send) {
  race_outcome out;
  std::mutex mtx;
  start_gate gate{n};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      gate.arrive_and_wait();
      try {
        send(i);
        std::lock_guard<std::mutex> guard{mtx};
        ++out.ok;
      } catch (const duplicate_command_error&) {
        std::lock_guard<std::mutex> guard{mtx};
        ++out.duplicates;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> guard{mtx};
        out.others.push_back(e.what());
      }
    });
  for (auto& t : threads)
    t.join();
  return out;
}

std::string joined(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += x + "\n";
  return out;
}

} // namespace

TEST_P(BusIdempotency, ConcurrentDuplicatesOneWinsSeparateBuses) {
  constexpr int threads = 8;
  constexpr int rounds = 5;
  auto check = test::connect();
  auto d = test::unique_name("br");
  // One pool and bus per thread: like separate processes. Round 1 also
  // races on creating the queue.
  std::vector<std::unique_ptr<db::pool>> pools;
  std::vector<std::unique_ptr<command_bus>> buses;
  for (int i = 0; i < threads; ++i) {
    pools.push_back(std::make_unique<db::pool>(pool_options(2)));
    buses.push_back(std::make_unique<command_bus>(*pools.back()));
  }
  for (int round = 0; round < rounds; ++round) {
    auto req = make_req(d);
    auto out = race(threads, [&](int i) {
      auto mine = req;
      mine.data = json::parse("{\"thread\":" + std::to_string(i) + "}");
      buses[static_cast<size_t>(i)]->send(mine);
    });
    EXPECT_EQ(out.ok, 1) << "round " << round;
    EXPECT_EQ(out.duplicates, threads - 1) << "round " << round;
    EXPECT_TRUE(out.others.empty()) << joined(out.others);
    EXPECT_TRUE(command_row_exists(check, d, req.command_id));
    EXPECT_EQ(messages_for(check, d, req.command_id), 1) << "round " << round;
    EXPECT_EQ(read_sent(check, d, req.command_id).count, 1);
  }
  EXPECT_EQ(command_rows(check, d), rounds);
  EXPECT_EQ(queue_length(check, queue_of(d)), rounds);
  EXPECT_EQ(audit_rows(check, d), rounds);
}

TEST_P(BusIdempotency, ConcurrentDuplicatesOneWinsSharedBus) {
  constexpr int threads = 8;
  constexpr int rounds = 5;
  bus_env env{threads};
  auto d = test::unique_name("br");
  for (int round = 0; round < rounds; ++round) {
    auto req = make_req(d);
    auto out = race(threads, [&](int) { env.bus.send(req); });
    EXPECT_EQ(out.ok, 1) << "round " << round;
    EXPECT_EQ(out.duplicates, threads - 1) << "round " << round;
    EXPECT_TRUE(out.others.empty()) << joined(out.others);
    EXPECT_EQ(messages_for(env.conn, d, req.command_id), 1);
    EXPECT_EQ(read_sent(env.conn, d, req.command_id).count, 1);
  }
  EXPECT_EQ(command_rows(env.conn, d), rounds);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), rounds);
}

// ============================================================================
// correlation id: a generated one is the same in the message and the row
// ============================================================================

TEST_P(BusCorrelation, ExplicitIdIsStoredAndInMessage) {
  bus_env env;
  auto d = test::unique_name("bc");
  auto req = make_req(d);
  auto corr = uuid::random();
  req.correlation_id = corr;
  auto res = env.bus.send(req);
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta && meta->correlation_id);
  EXPECT_EQ(meta->correlation_id->to_string(), corr.to_string());
  EXPECT_EQ(read_message(env.conn, queue_of(d), res.msg_id)->correlation_id,
            opt_str{corr.to_string()});
  EXPECT_EQ(read_sent(env.conn, d, req.command_id).correlation_id,
            opt_str{corr.to_string()});
}

TEST_P(BusCorrelation, GeneratedIdIsTheSameInMessageAndRow) {
  bus_env env;
  auto d = test::unique_name("bc");
  auto req1 = make_req(d);
  auto req2 = make_req(d);
  auto r1 = env.bus.send(req1);
  auto r2 = env.bus.send(req2);
  auto row1 = read_row(env.conn, d, req1.command_id);
  auto row2 = read_row(env.conn, d, req2.command_id);
  ASSERT_TRUE(row1 && row1->correlation_id);
  ASSERT_TRUE(row2 && row2->correlation_id);
  EXPECT_TRUE(uuid::parse(*row1->correlation_id));
  EXPECT_NE(*row1->correlation_id, *row2->correlation_id);
  EXPECT_EQ(read_message(env.conn, queue_of(d), r1.msg_id)->correlation_id,
            row1->correlation_id);
  EXPECT_EQ(read_message(env.conn, queue_of(d), r2.msg_id)->correlation_id,
            row2->correlation_id);
  EXPECT_EQ(read_sent(env.conn, d, req1.command_id).correlation_id,
            row1->correlation_id);
}

TEST_P(BusCorrelation, SendBatchKeepsGivenAndMatchesGenerated) {
  bus_env env;
  auto d = test::unique_name("bc");
  std::vector<send_request> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(make_req(d));
    if (i % 2 == 0)
      reqs.back().correlation_id = uuid::random();
  }
  auto res = env.bus.send_batch(reqs);
  ASSERT_EQ(res.results.size(), reqs.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto row = read_row(env.conn, d, reqs[i].command_id);
    ASSERT_TRUE(row && row->correlation_id);
    if (reqs[i].correlation_id) {
      EXPECT_EQ(*row->correlation_id, reqs[i].correlation_id->to_string());
    }
    auto msg = read_message(env.conn, queue_of(d), res.results[i].msg_id);
    ASSERT_TRUE(msg);
    EXPECT_EQ(msg->correlation_id, row->correlation_id) << i;
    EXPECT_EQ(read_sent(env.conn, d, reqs[i].command_id).correlation_id,
              row->correlation_id);
    seen.insert(*row->correlation_id);
  }
  EXPECT_EQ(seen.size(), reqs.size());
}

TEST_P(BusCorrelation, CreateBatchKeepsGivenAndMatchesGenerated) {
  bus_env env;
  auto d = test::unique_name("bc");
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  cmds[1].correlation_id = uuid::random();
  auto res = env.bus.create_batch(d, cmds);
  ASSERT_EQ(res.command_results.size(), cmds.size());
  for (size_t i = 0; i < cmds.size(); ++i) {
    auto row = read_row(env.conn, d, cmds[i].command_id);
    ASSERT_TRUE(row && row->correlation_id);
    if (cmds[i].correlation_id) {
      EXPECT_EQ(*row->correlation_id, cmds[i].correlation_id->to_string());
    }
    auto msg = read_message(env.conn, queue_of(d), res.command_results[i].msg_id);
    ASSERT_TRUE(msg);
    EXPECT_EQ(msg->correlation_id, row->correlation_id) << i;
  }
}
