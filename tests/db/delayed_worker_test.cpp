// Delayed commands with a running `cmdbus worker` and through the CLI
// (docs/scheduling.md, "Delayed commands"): a worker that keeps polling
// leaves a delayed command alone until it is due and runs it then; a retry
// keeps its own backoff; a worker killed with SIGKILL while delayed commands
// wait loses none of them; and the CLI shapes (send --delay/--at,
// send-batch fields, show, list --scheduled, stats, cancel).

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <future>
#include <map>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/http_clients.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

timestamp server_now(db::connection& c) {
  auto r = c.exec("SELECT clock_timestamp()::text");
  return *parse_timestamp(r.text(0, 0));
}

send_request demo_req(const std::string& domain, const std::string& behavior) {
  return make_req(domain, "Test",
                  std::string{R"({"behavior": )"} + behavior + "}");
}

std::vector<std::string> worker_args(const std::string& domain,
                                     const std::string& backoff = "0") {
  return {"worker",    "--demo", "--domain",        domain,  "--dsn",  dsn(),
          "--backoff", backoff,  "--poll-interval", "100ms", "--quiet"};
}

// The worker's /metrics on `port` ("" when it does not answer).
std::string metrics(int port) {
  auto fd = connect_loopback(port);
  if (fd < 0)
    return "";
  std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  if (::send(fd, req.data(), req.size(), 0) < 0) {
    ::close(fd);
    return "";
  }
  auto answer = await_close(fd, 5s);
  ::close(fd);
  return answer.value_or("");
}

process_result cli(std::vector<std::string> args) {
  args.push_back("--dsn");
  args.push_back(dsn());
  return run_cmdbus(args);
}

// Runs the reference-style worker (tests/support/foreign_worker.py) on
// `domain` until no command of it is pending or running.
process_result foreign_worker(const std::string& domain) {
  return run_process({"/usr/bin/python3",
                      CMDBUS_SOURCE_DIR "/tests/support/foreign_worker.py",
                      "--dsn", dsn(), "--domain", domain, "--deadline", "60",
                      "--work", "0.05"});
}

// What the reference-style worker ran: command id -> the server's clock
// right after the read that returned it.
std::map<std::string, timestamp> foreign_runs(db::connection& c,
                                              const std::string& out) {
  std::map<std::string, timestamp> runs;
  auto r = c.query("SELECT e->>'command_id', e->>'started_at' FROM "
                   "jsonb_array_elements($1::jsonb -> 'ran') e",
                   out);
  for (int i = 0; i < r.rows(); ++i)
    runs.emplace(r.text(i, 0), *parse_timestamp(r.text(i, 1)));
  return runs;
}

} // namespace

TEST(DelayedWorker, LeavesItAloneUntilDueAndRunsItThen) {
  bus_env env;
  auto domain = unique_name("dlw");
  env.bus.ensure_queue(db::command_queue(domain));
  auto now = server_now(env.conn);
  auto far = demo_req(domain, R"({"outcome": "success"})");
  far.not_before = now + 1h;
  auto soon = demo_req(domain, R"({"outcome": "success"})");
  soon.not_before = now + 1500ms;
  env.bus.send(far);
  env.bus.send(soon);
  auto port = free_port();
  auto args = worker_args(domain);
  args.insert(args.end(), {"--http", "127.0.0.1:" + std::to_string(port)});
  background_cmdbus worker{args};
  // A command sent after both runs first: the worker is polling.
  auto plain = demo_req(domain, R"({"outcome": "success"})");
  env.bus.send(plain);
  ASSERT_TRUE(eventually(
    [&] {
      return status_of(env.conn, domain, plain.command_id) == "COMPLETED";
    },
    30s));
  ASSERT_TRUE(eventually(
    [&] { return status_of(env.conn, domain, soon.command_id) == "COMPLETED"; },
    30s));
  // The one due in an hour was never read by the polling worker.
  EXPECT_EQ(status_of(env.conn, domain, far.command_id), "PENDING");
  auto r = env.conn.query("SELECT q.read_ct FROM pgmq.q_"
                            + db::command_queue(domain)
                            + " q JOIN commandbus.command c ON c.msg_id = "
                              "q.msg_id WHERE c.domain = $1 AND c.command_id "
                              "= $2::uuid",
                          domain, far.command_id.to_string());
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.int64(0, 0), 0);
  EXPECT_EQ(env.bus.scheduled_due_at(domain, far.command_id), far.not_before);
  // The worker's /metrics counts it apart from the visible backlog.
  auto line = "cmdbus_queue_scheduled{queue=\"" + db::command_queue(domain)
              + "\"} 1\n";
  std::string text;
  EXPECT_TRUE(eventually(
    [&] {
      text = metrics(port);
      return text.find(line) != std::string::npos;
    },
    20s))
    << text;
  EXPECT_NE(text.find("cmdbus_queue_visible{queue=\""
                      + db::command_queue(domain) + "\"} 0\n"),
            std::string::npos)
    << text;
  EXPECT_TRUE(worker.stop());
}

TEST(DelayedWorker, ARetryKeepsItsOwnBackoff) {
  bus_env env;
  auto domain = unique_name("dlw");
  env.bus.ensure_queue(db::command_queue(domain));
  auto req = demo_req(domain, R"({"fail_transient_pct": 100})");
  req.max_attempts = 3;
  req.not_before = server_now(env.conn) + 500ms;
  env.bus.send(req);
  background_cmdbus worker{worker_args(domain, "600")};
  auto attempts = [&] {
    auto r = env.conn.query("SELECT attempts FROM commandbus.command WHERE "
                            "domain = $1 AND command_id = $2::uuid",
                            domain, req.command_id.to_string());
    return r.int64(0, 0);
  };
  ASSERT_TRUE(eventually([&] { return attempts() == 1; }, 30s));
  // Its message waits for the retry's backoff (600 s), not the not-before
  // time; it no longer counts as scheduled.
  ASSERT_TRUE(eventually(
    [&] {
      auto r = env.conn.query(
        "SELECT q.read_ct, q.vt > now() + interval '500 seconds' FROM pgmq.q_"
          + db::command_queue(domain)
          + " q JOIN commandbus.command c ON c.msg_id = q.msg_id WHERE "
            "c.domain = $1 AND c.command_id = $2::uuid",
        domain, req.command_id.to_string());
      return r.rows() == 1 && r.int64(0, 0) == 1 && r.boolean(0, 1);
    },
    30s));
  EXPECT_FALSE(env.bus.scheduled_due_at(domain, req.command_id));
  command_query q;
  q.domain = domain;
  EXPECT_TRUE(env.bus.query_scheduled(q).empty());
  EXPECT_EQ(attempts(), 1);
  EXPECT_TRUE(worker.stop());
}

TEST(DelayedWorker, KillNineWhileDelayedCommandsWaitLosesNothing) {
  bus_env env;
  auto domain = unique_name("dlw");
  env.bus.ensure_queue(db::command_queue(domain));
  std::vector<uuid> ids;
  {
    auto now = server_now(env.conn);
    std::vector<send_request> reqs;
    for (int i = 0; i < 20; ++i) {
      reqs.push_back(demo_req(domain, R"({"outcome": "success"})"));
      if (i % 2 == 0)
        reqs.back().not_before = now + 2s;
      ids.push_back(reqs.back().command_id);
    }
    env.bus.send_batch(reqs);
  }
  {
    background_cmdbus first{worker_args(domain)};
    // The undelayed half runs; then the worker dies while the delayed half
    // waits (or, on a slow machine, while it runs some of them).
    ASSERT_TRUE(eventually(
      [&] {
        for (size_t i = 1; i < ids.size(); i += 2)
          if (status_of(env.conn, domain, ids[i]) != "COMPLETED")
            return false;
        return true;
      },
      30s));
    first.signal(SIGKILL);
    ASSERT_TRUE(first.wait(10s));
  }
  background_cmdbus second{worker_args(domain)};
  EXPECT_TRUE(eventually(
    [&] {
      for (auto& id : ids)
        if (status_of(env.conn, domain, id) != "COMPLETED")
          return false;
      return true;
    },
    60s));
  for (auto& id : ids) {
    auto r = env.conn.query("SELECT count(*) FROM commandbus.audit WHERE "
                            "domain = $1 AND command_id = $2::uuid AND "
                            "event_type = 'COMPLETED'",
                            domain, id.to_string());
    EXPECT_EQ(r.int64(0, 0), 1) << id.to_string();
  }
  EXPECT_EQ(env.conn
              .exec("SELECT count(*) FROM pgmq.q_" + db::command_queue(domain))
              .int64(0, 0),
            0);
  EXPECT_TRUE(second.stop());
}

// A mixed fleet: a worker that cmdbus does not run (it reads as the
// reference worker does: pgmq.read, sp_receive_command, delete +
// sp_finish_command) shares the queue of delayed, prioritised and plain
// commands, alone and then beside a cmdbus worker. It never takes a
// delayed command before its time, ignores the priority member, and every
// command runs exactly once.
TEST(DelayedMixedFleet, AReferenceStyleWorkerNeverTakesADelayedCommandEarly) {
  bus_env env;
  auto domain = unique_name("dlm");
  env.bus.ensure_queue(db::command_queue(domain));
  std::map<std::string, timestamp> due;
  std::vector<uuid> ids;
  auto send_set = [&](int delayed, int plain) {
    auto now = server_now(env.conn);
    std::vector<send_request> reqs;
    for (int i = 0; i < delayed + plain; ++i) {
      reqs.push_back(demo_req(domain, R"({"outcome": "success"})"));
      if (i < delayed) {
        reqs.back().not_before = now + 1s + i * 60ms;
        due.emplace(reqs.back().command_id.to_string(),
                    *reqs.back().not_before);
      } else if (i % 2 == 0) {
        reqs.back().priority = 5;
      }
      ids.push_back(reqs.back().command_id);
    }
    env.bus.send_batch(reqs);
  };
  auto check_foreign = [&](const process_result& r) {
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto runs = foreign_runs(env.conn, last_line(r.out));
    for (auto& [id, started] : runs) {
      auto it = due.find(id);
      if (it != due.end()) {
        EXPECT_GE(started, it->second) << id << " was taken early";
      }
    }
    return runs;
  };
  // The reference-style worker alone: it runs all of them, each delayed
  // one at or after its time.
  send_set(10, 6);
  auto alone = check_foreign(foreign_worker(domain));
  EXPECT_EQ(alone.size(), 16u);
  // Beside a cmdbus worker.
  send_set(30, 10);
  {
    background_cmdbus ours{worker_args(domain)};
    auto theirs = std::async(std::launch::async,
                             [&] { return foreign_worker(domain); });
    ASSERT_EQ(theirs.wait_for(90s), std::future_status::ready);
    check_foreign(theirs.get());
    EXPECT_TRUE(ours.stop());
  }
  for (auto& id : ids) {
    EXPECT_EQ(status_of(env.conn, domain, id), "COMPLETED") << id.to_string();
    for (auto* event : {"RECEIVED", "COMPLETED"}) {
      auto r = env.conn.query("SELECT count(*) FROM commandbus.audit WHERE "
                              "domain = $1 AND command_id = $2::uuid AND "
                              "event_type = $3",
                              domain, id.to_string(), std::string{event});
      EXPECT_EQ(r.int64(0, 0), 1) << id.to_string() << " " << event;
    }
  }
  EXPECT_EQ(env.conn
              .exec("SELECT count(*) FROM pgmq.q_" + db::command_queue(domain))
              .int64(0, 0),
            0);
}

TEST(DelayedCli, SendShowListStatsAndCancel) {
  bus_env env;
  auto domain = unique_name("dlc");
  env.bus.ensure_queue(db::command_queue(domain));
  auto sent = cli({"send", domain, "Later", "--delay", "10min", "--json"});
  ASSERT_EQ(sent.exit_code, 0) << sent.err;
  auto id = jget(env.conn, sent.out, "{command_id}");
  ASSERT_TRUE(id);
  ASSERT_TRUE(jget(env.conn, sent.out, "{not_before}"));
  auto at = cli(
    {"send", domain, "At", "--at", "2099-12-01T03:00:00Z", "--json"});
  ASSERT_EQ(at.exit_code, 0) << at.err;
  EXPECT_EQ(jget(env.conn, at.out, "{not_before}"),
            "2099-12-01T03:00:00.000000Z");
  auto plain = cli({"send", domain, "Now", "--json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(jget(env.conn, plain.out, "{not_before}"), std::nullopt);

  auto both = cli(
    {"send", domain, "X", "--delay", "1s", "--at", "2099-12-01T03:00:00Z"});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_EQ(cli({"send", domain, "X", "--at", "tomorrow"}).exit_code, 1);
  EXPECT_EQ(cli({"send", domain, "X", "--delay", "soon"}).exit_code, 1);

  auto show = cli({"show", domain, *id, "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_TRUE(jget(env.conn, show.out, "{due_at}"));
  EXPECT_EQ(jget(env.conn, show.out, "{next_attempt_at}"), std::nullopt);
  auto show_text = cli({"show", domain, *id});
  EXPECT_NE(show_text.out.find("due_at"), std::string::npos) << show_text.out;

  auto list = cli({"list", domain, "--scheduled", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(jget(env.conn, list.out, "{0,command_id}"), *id);
  EXPECT_EQ(jget(env.conn, list.out, "{1,due_at}"),
            "2099-12-01T03:00:00.000000Z");
  EXPECT_EQ(jget(env.conn, list.out, "{2}"), std::nullopt);

  auto stats = cli({"stats", domain, "--json"});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(jget(env.conn, stats.out, "{0,queue,scheduled}"), "2");
  EXPECT_EQ(jget(env.conn, stats.out, "{0,queue,visible}"), "1");

  auto cancel = cli({"cancel", domain, *id, "--reason", "not needed",
                     "--operator", "bob", "--json"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(jget(env.conn, cancel.out, "{canceled}"), "true");
  EXPECT_EQ(status_of(env.conn, domain, *uuid::parse(*id)), "CANCELED");
  auto again = cli({"cancel", domain, *id});
  EXPECT_EQ(again.exit_code, 2) << again.out << again.err;
  EXPECT_EQ(cli({"cancel", domain, uuid::random().to_string()}).exit_code, 2);
}

TEST(DelayedCli, SendBatchLinesCarryADelayOrATime) {
  bus_env env;
  auto domain = unique_name("dlc");
  env.bus.ensure_queue(db::command_queue(domain));
  auto file = std::filesystem::temp_directory_path()
              / (unique_name("dlc") + ".jsonl");
  {
    std::ofstream out{file};
    out << R"({"command_type": "A", "delay": "1h"})"
        << "\n"
        << R"({"command_type": "B", "delay": 3600})"
        << "\n"
        << R"({"command_type": "C", "not_before": "2099-01-01T00:00:00Z"})"
        << "\n"
        << R"({"command_type": "D", "at": "2099-01-01T00:00:00+01:00"})"
        << "\n"
        << R"({"command_type": "E"})"
        << "\n";
  }
  for (bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "--batch" : "chunks");
    auto d = batch ? unique_name("dlc") : domain;
    env.bus.ensure_queue(db::command_queue(d));
    std::vector<std::string> args{"send-batch", d, "--file", file.string(),
                                  "--json"};
    if (batch)
      args.push_back("--batch");
    auto r = cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto st = cli({"stats", d, "--json"});
    EXPECT_EQ(jget(env.conn, st.out, "{0,queue,scheduled}"), "4") << st.out;
    EXPECT_EQ(jget(env.conn, st.out, "{0,queue,visible}"), "1") << st.out;
  }
  // --delay applies to the lines without a time of their own.
  auto d = unique_name("dlc");
  env.bus.ensure_queue(db::command_queue(d));
  auto r = cli({"send-batch", d, "--file", file.string(), "--delay", "2h"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto st = cli({"stats", d, "--json"});
  EXPECT_EQ(jget(env.conn, st.out, "{0,queue,scheduled}"), "5") << st.out;
  // Invalid fields name the line.
  {
    std::ofstream out{file};
    out
      << R"({"command_type": "A", "delay": "1h", "at": "2099-01-01T00:00:00Z"})"
      << "\n";
  }
  auto bad = cli({"send-batch", domain, "--file", file.string()});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find(":1:"), std::string::npos) << bad.err;
  {
    std::ofstream out{file};
    out << R"({"command_type": "A", "not_before": "next week"})"
        << "\n";
  }
  bad = cli({"send-batch", domain, "--file", file.string()});
  EXPECT_EQ(bad.exit_code, 1);
  std::filesystem::remove(file);
}
