// The reads of the command bus: get_command, command_exists,
// query_commands (filters, order, pages) and audit trails.

#include "tests/db/command_bus_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test::bus;
using namespace std::chrono_literals;

// ============================================================================
// reads
// ============================================================================

TEST(BusRead, GetCommandReturnsFullMetadata) {
  bus_env env;
  auto d = test::unique_name("bg");
  auto req = make_req(d, "Transfer");
  req.correlation_id = uuid::random();
  req.reply_to = d + "__replies";
  req.max_attempts = 4;
  auto before = std::chrono::system_clock::now();
  auto res = env.bus.send(req);
  auto after = std::chrono::system_clock::now();
  auto m = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->domain, d);
  EXPECT_EQ(m->command_id.to_string(), req.command_id.to_string());
  EXPECT_EQ(m->command_type, "Transfer");
  EXPECT_EQ(m->status, command_status::pending);
  EXPECT_EQ(m->attempts, 0);
  EXPECT_EQ(m->max_attempts, 4);
  EXPECT_EQ(m->msg_id, std::optional<int64_t>{res.msg_id});
  ASSERT_TRUE(m->correlation_id);
  EXPECT_EQ(m->correlation_id->to_string(), req.correlation_id->to_string());
  EXPECT_EQ(m->reply_to, opt_str{d + "__replies"});
  EXPECT_FALSE(m->last_error_type);
  EXPECT_FALSE(m->last_error_code);
  EXPECT_FALSE(m->last_error_msg);
  EXPECT_FALSE(m->batch_id);
  EXPECT_EQ(m->created_at, m->updated_at);
  EXPECT_GE(m->created_at, before - 60s);
  EXPECT_LE(m->created_at, after + 60s);
  // Stored error fields are mapped.
  env.conn.query("UPDATE commandbus.command SET status = "
                 "'IN_TROUBLESHOOTING_QUEUE', attempts = 4, last_error_type = "
                 "'PERMANENT', last_error_code = 'E42', last_error_msg = 'boom' "
                 "WHERE domain = $1 AND command_id = $2::uuid",
                 d, req.command_id.to_string());
  m = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, command_status::in_troubleshooting_queue);
  EXPECT_EQ(m->attempts, 4);
  EXPECT_EQ(m->last_error_type, opt_str{"PERMANENT"});
  EXPECT_EQ(m->last_error_code, opt_str{"E42"});
  EXPECT_EQ(m->last_error_msg, opt_str{"boom"});
}

TEST(BusRead, GetCommandAndExistsForUnknown) {
  bus_env env;
  auto d = test::unique_name("bg");
  auto req = make_req(d);
  env.bus.send(req);
  EXPECT_TRUE(env.bus.command_exists(d, req.command_id));
  EXPECT_FALSE(env.bus.command_exists(d, uuid::random()));
  EXPECT_FALSE(env.bus.command_exists(test::unique_name("bg"), req.command_id));
  EXPECT_FALSE(env.bus.get_command(d, uuid::random()));
  EXPECT_FALSE(env.bus.get_command(test::unique_name("bg"), req.command_id));
}

namespace {

/// Five commands in a fresh domain with fixed created_at 2001-01-01
/// 00:00:0{1..5} (index 0..4), types A A B B C (unique per test) and
/// statuses PENDING COMPLETED PENDING COMPLETED FAILED.
struct query_fixture {
  explicit query_fixture(bus_env& env)
    : domain(test::unique_name("bqq")),
      type_a(test::unique_name("TA")),
      type_b(test::unique_name("TB")),
      type_c(test::unique_name("TC")) {
    std::vector<std::string> types{type_a, type_a, type_b, type_b, type_c};
    std::vector<std::string> statuses{"PENDING", "COMPLETED", "PENDING",
                                      "COMPLETED", "FAILED"};
    for (size_t i = 0; i < 5; ++i) {
      auto req = make_req(domain, types[i]);
      env.bus.send(req);
      set_status(env.conn, domain, req.command_id, statuses[i]);
      set_created_at(env.conn, domain, req.command_id,
                     "2001-01-01 00:00:0" + std::to_string(i + 1) + "+00");
      ids.push_back(req.command_id.to_string());
      auto m = env.bus.get_command(domain, req.command_id);
      created.push_back(m->created_at);
    }
  }
  std::vector<std::string> pick(std::initializer_list<size_t> idx) const {
    std::vector<std::string> out;
    for (auto i : idx)
      out.push_back(ids[i]);
    return out;
  }
  std::string domain, type_a, type_b, type_c;
  std::vector<std::string> ids;
  std::vector<timestamp> created;
};

} // namespace

TEST(BusQuery, ByDomainNewestFirst) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.domain = f.domain;
  auto got = env.bus.query_commands(q);
  EXPECT_EQ(ids_of(got), f.pick({4, 3, 2, 1, 0}));
  for (size_t i = 1; i < got.size(); ++i)
    EXPECT_GE(got[i - 1].created_at, got[i].created_at);
  EXPECT_EQ(format_timestamp(f.created[0]), "2001-01-01T00:00:01.000000Z");
}

TEST(BusQuery, ByStatus) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.domain = f.domain;
  q.status = command_status::completed;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({3, 1}));
  q.status = command_status::failed;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({4}));
  q.status = command_status::canceled;
  EXPECT_TRUE(env.bus.query_commands(q).empty());
  // Status alone (all domains): every row has it and ours are included.
  command_query only;
  only.status = command_status::failed;
  only.limit = 100000;
  auto all = env.bus.query_commands(only);
  for (auto& m : all)
    EXPECT_EQ(m.status, command_status::failed);
  auto ids = ids_of(all);
  EXPECT_NE(std::find(ids.begin(), ids.end(), f.ids[4]), ids.end());
}

TEST(BusQuery, ByCommandTypeAndCombined) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.command_type = f.type_a; // unique type: no domain needed
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({1, 0}));
  q.command_type = f.type_b;
  q.status = command_status::pending;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({2}));
  q.domain = f.domain;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({2}));
  q.domain = test::unique_name("bqq");
  EXPECT_TRUE(env.bus.query_commands(q).empty());
  command_query c;
  c.domain = f.domain;
  c.command_type = f.type_c;
  c.status = command_status::failed;
  EXPECT_EQ(ids_of(env.bus.query_commands(c)), f.pick({4}));
}

TEST(BusQuery, LimitAndOffsetPage) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.domain = f.domain;
  q.limit = 2;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({4, 3}));
  q.offset = 2;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({2, 1}));
  q.offset = 4;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({0}));
  q.offset = 5;
  EXPECT_TRUE(env.bus.query_commands(q).empty());
  q.offset = 0;
  q.limit = 0;
  EXPECT_TRUE(env.bus.query_commands(q).empty());
}

TEST(BusQuery, CreatedRangeIsInclusive) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.domain = f.domain;
  q.created_after = f.created[1];
  q.created_before = f.created[3];
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({3, 2, 1}));
  q.created_after = f.created[4];
  q.created_before = std::nullopt;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({4}));
  q.created_after = std::nullopt;
  q.created_before = f.created[0];
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({0}));
  q.created_after = f.created[2];
  q.created_before = f.created[2];
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({2}));
  // One microsecond past the newest: nothing.
  q.created_after = f.created[4] + std::chrono::microseconds{1};
  q.created_before = std::nullopt;
  EXPECT_TRUE(env.bus.query_commands(q).empty());
}

TEST(BusQuery, EmptyResult) {
  bus_env env;
  command_query q;
  q.domain = test::unique_name("bqq");
  EXPECT_TRUE(env.bus.query_commands(q).empty());
  q.domain = std::nullopt;
  q.command_type = test::unique_name("Nope");
  EXPECT_TRUE(env.bus.query_commands(q).empty());
}

TEST(BusAudit, SentAfterSend) {
  bus_env env;
  auto d = test::unique_name("ba");
  auto req = make_req(d, "Pay");
  req.correlation_id = uuid::random();
  auto res = env.bus.send(req);
  auto trail = env.bus.get_audit_trail(req.command_id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "SENT");
  EXPECT_EQ(trail[0].domain, d);
  EXPECT_EQ(trail[0].command_id.to_string(), req.command_id.to_string());
  EXPECT_GT(trail[0].audit_id, 0);
  ASSERT_TRUE(trail[0].details);
  auto expected = env.conn.query(
    "SELECT jsonb_build_object('command_type', 'Pay', 'correlation_id', "
    "$1::text, 'reply_to', NULL, 'msg_id', $2::bigint, 'batch_id', NULL)::text",
    req.correlation_id->to_string(), res.msg_id);
  EXPECT_EQ(jsonb_text(env.conn, trail[0].details->text()),
            std::string{expected.text(0, 0)});
}

TEST(BusAudit, OrderedByTsThenAuditIdAndDomainFiltered) {
  bus_env env;
  auto d = test::unique_name("ba");
  auto other = test::unique_name("ba");
  auto req = make_req(d);
  env.bus.send(req);
  auto twin = make_req(other);
  twin.command_id = req.command_id;
  env.bus.send(twin);
  // LATE has the newest ts but the lowest of the new audit ids; TIE1/TIE2
  // share one ts (one transaction) and must follow their audit ids.
  env.conn.exec("BEGIN");
  env.conn.query("INSERT INTO commandbus.audit (domain, command_id, "
                 "event_type, ts) VALUES ($1, $2::uuid, 'LATE', NOW() + "
                 "interval '1 hour')",
                 d, req.command_id.to_string());
  env.conn.query("INSERT INTO commandbus.audit (domain, command_id, "
                 "event_type) VALUES ($1, $2::uuid, 'TIE1')",
                 d, req.command_id.to_string());
  env.conn.query("INSERT INTO commandbus.audit (domain, command_id, "
                 "event_type) VALUES ($1, $2::uuid, 'TIE2')",
                 d, req.command_id.to_string());
  env.conn.exec("COMMIT");
  auto types = [](const std::vector<audit_event>& xs) {
    std::vector<std::string> out;
    for (auto& x : xs)
      out.push_back(x.event_type);
    return out;
  };
  using v = std::vector<std::string>;
  auto trail = env.bus.get_audit_trail(req.command_id, d);
  EXPECT_EQ(types(trail), (v{"SENT", "TIE1", "TIE2", "LATE"}));
  ASSERT_EQ(trail.size(), 4u);
  EXPECT_EQ(trail[1].ts, trail[2].ts);
  EXPECT_LT(trail[1].audit_id, trail[2].audit_id);
  EXPECT_FALSE(trail[1].details);
  for (auto& ev : trail)
    EXPECT_EQ(ev.domain, d);
  auto in_other = env.bus.get_audit_trail(req.command_id, other);
  EXPECT_EQ(types(in_other), (v{"SENT"}));
  EXPECT_EQ(in_other[0].domain, other);
  EXPECT_EQ(env.bus.get_audit_trail(req.command_id).size(), 5u);
  EXPECT_TRUE(env.bus.get_audit_trail(req.command_id, test::unique_name("ba"))
                .empty());
}

TEST(BusAudit, UnknownIdGivesEmptyTrail) {
  bus_env env;
  EXPECT_TRUE(env.bus.get_audit_trail(uuid::random()).empty());
  EXPECT_TRUE(env.bus.get_audit_trail(uuid::random(), std::string{"x"}).empty());
}
