// Tests of the operator statistics (db/stats.hpp) and `cmdbus stats` on a
// prepared domain: commands in every status, visible and invisible
// messages, and finishes a minute, minutes and hours ago (set in SQL).

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/stats.hpp"
#include "cmdbus/model/types.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

/// Sends a command to `domain` and gives its row `status` and its
/// updated_at `age` ago; `message` says what becomes of its message:
/// "visible", "invisible" (read by a worker and vt an hour ahead: held, or
/// waiting for a retry), "scheduled" (never read and vt an hour ahead: a
/// delayed command), "deleted" or "archived".
void add_command(bus_env& env, const std::string& domain,
                 const std::string& status, const std::string& age,
                 const std::string& message) {
  auto req = make_req(domain, "Test", R"({"n": 1})");
  auto sent = env.bus.send(req);
  auto queue = queue_of(domain);
  env.conn.query("UPDATE commandbus.command SET status = $1,"
                 " updated_at = now() - $2::interval"
                 " WHERE domain = $3 AND command_id = $4",
                 status, age, domain, req.command_id.to_string());
  if (message == "invisible" || message == "scheduled")
    env.conn.exec("UPDATE pgmq.q_" + queue
                    + " SET vt = now() + interval '1 hour', read_ct = $2 "
                      "WHERE msg_id = $1",
                  {std::to_string(sent.msg_id),
                   std::string{message == "invisible" ? "1" : "0"}});
  else if (message == "deleted")
    env.conn.query("SELECT pgmq.delete($1, $2::bigint)", queue, sent.msg_id);
  else if (message == "archived")
    env.conn.query("SELECT pgmq.archive($1, $2::bigint)", queue, sent.msg_id);
}

/// A domain with 2 PENDING (visible; the oldest enqueued 5 minutes ago),
/// 1 PENDING scheduled (a delayed command not due yet),
/// 1 IN_PROGRESS (invisible), 3 COMPLETED (30 s, 10 min and 2 h ago),
/// 2 FAILED (20 s and 3 h ago), 1 CANCELED and 2 in the troubleshooting
/// queue (30 min ago).
std::string prepared_domain(bus_env& env) {
  auto domain = unique_name("stats");
  env.bus.ensure_queue(queue_of(domain));
  add_command(env, domain, "PENDING", "0s", "visible");
  add_command(env, domain, "PENDING", "0s", "visible");
  env.conn.exec("UPDATE pgmq.q_" + queue_of(domain)
                + " SET enqueued_at = now() - interval '5 minutes'"
                  " WHERE msg_id = (SELECT min(msg_id) FROM pgmq.q_"
                + queue_of(domain) + ")");
  add_command(env, domain, "PENDING", "0s", "scheduled");
  add_command(env, domain, "IN_PROGRESS", "0s", "invisible");
  add_command(env, domain, "COMPLETED", "30 seconds", "deleted");
  add_command(env, domain, "COMPLETED", "10 minutes", "deleted");
  add_command(env, domain, "COMPLETED", "2 hours", "deleted");
  add_command(env, domain, "FAILED", "20 seconds", "archived");
  add_command(env, domain, "FAILED", "3 hours", "archived");
  add_command(env, domain, "CANCELED", "5 seconds", "archived");
  add_command(env, domain, "IN_TROUBLESHOOTING_QUEUE", "30 minutes",
              "archived");
  add_command(env, domain, "IN_TROUBLESHOOTING_QUEUE", "30 minutes",
              "archived");
  return domain;
}

void expect_prepared_figures(const db::domain_stats& st) {
  EXPECT_EQ(st.count(command_status::pending), 3);
  EXPECT_EQ(st.count(command_status::in_progress), 1);
  EXPECT_EQ(st.count(command_status::completed), 3);
  EXPECT_EQ(st.count(command_status::failed), 2);
  EXPECT_EQ(st.count(command_status::canceled), 1);
  EXPECT_EQ(st.tsq(), 2);
  EXPECT_TRUE(st.queue_exists);
  EXPECT_EQ(st.queue_depth, 4);
  EXPECT_EQ(st.visible, 2);
  EXPECT_EQ(st.scheduled, 1);
  EXPECT_EQ(st.invisible, 1);
  ASSERT_TRUE(st.oldest_visible_age_sec.has_value());
  EXPECT_GE(*st.oldest_visible_age_sec, 299.0);
  EXPECT_EQ(st.completed_last_minute, 1);
  EXPECT_EQ(st.completed_last_hour, 2);
  EXPECT_EQ(st.failed_last_minute, 1);
  EXPECT_EQ(st.failed_last_hour, 3);
}

const db::domain_stats* find(const std::vector<db::domain_stats>& xs,
                             const std::string& domain) {
  for (auto& x : xs)
    if (x.domain == domain)
      return &x;
  return nullptr;
}

/// The element of a JSON array (text) whose "domain" is `domain`, as text.
opt_str element_of(db::connection& c, const std::string& array,
                   const std::string& domain) {
  return scalar(c,
                "SELECT e::text FROM jsonb_array_elements($1::jsonb) e"
                " WHERE e->>'domain' = $2",
                array, domain);
}

/// The whitespace-separated cells of the `nth` line (0-based) of `text`
/// that starts with `first`.
std::vector<std::string> row_of(const std::string& text,
                                const std::string& first, int nth = 0) {
  std::istringstream lines{text};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream cells{line};
    std::vector<std::string> row;
    for (std::string cell; cells >> cell;)
      row.push_back(cell);
    if (!row.empty() && row[0] == first && nth-- == 0)
      return row;
  }
  return {};
}

process_result cli(std::vector<std::string> args) {
  args.push_back("--dsn");
  args.push_back(dsn());
  return run_cmdbus(args);
}

} // namespace

TEST(Stats, FiguresOfOneDomain) {
  bus_env env;
  auto domain = prepared_domain(env);
  auto xs = db::collect_stats(env.conn, {domain});
  ASSERT_EQ(xs.size(), 1u);
  EXPECT_EQ(xs[0].domain, domain);
  expect_prepared_figures(xs[0]);
}

TEST(Stats, AllDomainsIncludeThoseWithOnlyAQueue) {
  bus_env env;
  auto domain = prepared_domain(env);
  auto queue_only = unique_name("stats_q");
  env.bus.ensure_queue(queue_of(queue_only));
  auto domains = db::stats_domains(env.conn);
  EXPECT_NE(std::find(domains.begin(), domains.end(), domain), domains.end());
  EXPECT_NE(std::find(domains.begin(), domains.end(), queue_only),
            domains.end());
  EXPECT_TRUE(std::is_sorted(domains.begin(), domains.end()));
  auto xs = db::collect_stats(env.conn);
  auto* st = find(xs, domain);
  ASSERT_NE(st, nullptr);
  expect_prepared_figures(*st);
  auto* empty = find(xs, queue_only);
  ASSERT_NE(empty, nullptr);
  for (auto n : empty->commands)
    EXPECT_EQ(n, 0);
  EXPECT_TRUE(empty->queue_exists);
  EXPECT_EQ(empty->queue_depth, 0);
  EXPECT_FALSE(empty->oldest_visible_age_sec.has_value());
}

TEST(Stats, UnknownDomainHasZerosAndNoQueue) {
  bus_env env;
  auto xs = db::collect_stats(env.conn, {unique_name("nothing")});
  ASSERT_EQ(xs.size(), 1u);
  for (auto n : xs[0].commands)
    EXPECT_EQ(n, 0);
  EXPECT_FALSE(xs[0].queue_exists);
  EXPECT_EQ(xs[0].completed_last_hour, 0);
}

TEST(CliStats, TextOfOneDomain) {
  bus_env env;
  auto domain = prepared_domain(env);
  auto r = cli({"stats", domain});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // pending in_progress completed failed canceled tsq
  EXPECT_EQ(row_of(r.out, domain, 0),
            (std::vector<std::string>{domain, "3", "1", "3", "2", "1", "2"}))
    << r.out;
  auto q = row_of(r.out, domain, 1);
  ASSERT_EQ(q.size(), 10u) << r.out;
  // queued visible scheduled invisible oldest done_1m failed_1m done_1h
  // failed_1h
  EXPECT_EQ(q[1], "4");
  EXPECT_EQ(q[2], "2");
  EXPECT_EQ(q[3], "1");
  EXPECT_EQ(q[4], "1");
  EXPECT_EQ(q[6], "1");
  EXPECT_EQ(q[7], "1");
  EXPECT_EQ(q[8], "2");
  EXPECT_EQ(q[9], "3");
}

TEST(CliStats, JsonOfOneDomainAndOfAll) {
  bus_env env;
  auto domain = prepared_domain(env);
  auto check = [&](const std::string& array) {
    auto e = element_of(env.conn, array, domain);
    ASSERT_TRUE(e) << array;
    EXPECT_EQ(jget(env.conn, *e, "{commands,PENDING}"), "3");
    EXPECT_EQ(jget(env.conn, *e, "{commands,IN_PROGRESS}"), "1");
    EXPECT_EQ(jget(env.conn, *e, "{commands,COMPLETED}"), "3");
    EXPECT_EQ(jget(env.conn, *e, "{commands,FAILED}"), "2");
    EXPECT_EQ(jget(env.conn, *e, "{commands,CANCELED}"), "1");
    EXPECT_EQ(jget(env.conn, *e, "{commands,IN_TROUBLESHOOTING_QUEUE}"), "2");
    EXPECT_EQ(jget(env.conn, *e, "{tsq}"), "2");
    EXPECT_EQ(jget(env.conn, *e, "{queue,exists}"), "true");
    EXPECT_EQ(jget(env.conn, *e, "{queue,depth}"), "4");
    EXPECT_EQ(jget(env.conn, *e, "{queue,visible}"), "2");
    EXPECT_EQ(jget(env.conn, *e, "{queue,scheduled}"), "1");
    EXPECT_EQ(jget(env.conn, *e, "{queue,invisible}"), "1");
    EXPECT_TRUE(jget(env.conn, *e, "{queue,oldest_visible_age_sec}"));
    EXPECT_EQ(jget(env.conn, *e, "{completed_last_minute}"), "1");
    EXPECT_EQ(jget(env.conn, *e, "{completed_last_hour}"), "2");
    EXPECT_EQ(jget(env.conn, *e, "{failed_last_minute}"), "1");
    EXPECT_EQ(jget(env.conn, *e, "{failed_last_hour}"), "3");
  };
  auto one = cli({"stats", domain, "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(scalar(env.conn, "SELECT jsonb_array_length($1::jsonb)", one.out),
            "1");
  check(one.out);
  auto all = cli({"stats", "--json"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  check(all.out);
}

TEST(CliStats, UsageErrors) {
  EXPECT_EQ(cli({"stats", "a", "b"}).exit_code, 1);
  EXPECT_EQ(cli({"stats", "--interval", "1s"}).exit_code, 1);
  EXPECT_EQ(cli({"stats", "--watch", "--interval", "soon"}).exit_code, 1);
  EXPECT_EQ(cli({"stats", "bad-domain!"}).exit_code, 1);
  auto r = cli({"stats", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--watch"), std::string::npos);
}

TEST(CliStats, WatchPrintsSnapshotsUntilSigint) {
  bus_env env;
  auto domain = prepared_domain(env);
  // Not a terminal: one JSON document per line and interval; SIGINT (sent by
  // timeout(1) after 2 s) ends it with exit code 0.
  auto r = run_process({"/usr/bin/timeout", "--preserve-status", "-s", "INT",
                        "2", CMDBUS_BINARY, "stats", domain, "--watch",
                        "--interval", "100ms", "--json", "--dsn", dsn()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_GE(line_count(r.out), 1u) << r.out;
  auto first = r.out.substr(0, r.out.find('\n'));
  auto e = element_of(env.conn, first, domain);
  ASSERT_TRUE(e) << first;
  EXPECT_EQ(jget(env.conn, *e, "{commands,COMPLETED}"), "3");
}
