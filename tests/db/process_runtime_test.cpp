// Process managers end to end against the real database: a worker with
// handlers for the example order workflow's commands and the workflow
// registered drives processes started with process_manager through their
// steps (reply router, process actors, process writers): the happy path,
// a FAILED step compensated in reverse order one at a time, a step in the
// troubleshooting queue (WAITING_FOR_TSQ) that an operator cancels
// (compensated) or completes (resumed), replies that are not replies or
// belong to no process (archived, never blocking the router), and a
// thousand concurrent processes.

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/troubleshooting.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/process/manager.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/worker_env.hpp"
#include "tests/unit/process_workflow_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace cmdbus::process_test;
using namespace std::chrono_literals;

namespace {

// What steers the example's handlers: an order id that makes
// SendNotification fail (a business rule), an amount that makes
// DebitAccount fail permanently (to the TSQ).
const std::string notify_fails = "no-address";
constexpr int64_t debit_breaks = 777;

int64_t amount_of(const cmdbus::command& c) {
  auto doc = parse_doc(c.data);
  return doc.HasMember("amount") && doc["amount"].IsInt64()
           ? doc["amount"].GetInt64()
           : 0;
}

std::string order_of(const cmdbus::command& c) {
  auto doc = parse_doc(c.data);
  return doc.HasMember("order_id") && doc["order_id"].IsString()
           ? doc["order_id"].GetString()
           : "";
}

// A worker for the example workflow in its own domain, the commands each
// handler saw (in order), and a process manager.
struct process_fixture {
  bus_env e;
  std::string d = unique_name("pr");
  std::shared_ptr<process_registry> registry
    = std::make_shared<process_registry>();
  std::mutex mtx;
  std::vector<std::string> seen;
  std::unique_ptr<worker> w;
  process_manager pm;

  explicit process_fixture(int concurrency = 4, bool http = false)
    : pm(e.pool, make_registry(registry, d)) {
    e.bus.ensure_queue(db::command_queue(d));
    handler_registry reg;
    auto record = [this](const cmdbus::command& c) {
      std::lock_guard<std::mutex> guard{mtx};
      seen.push_back(c.command_type);
    };
    reg.add(d, "ReserveStock",
            [record](const cmdbus::command& c, handler_context&) {
              record(c);
              return json::parse(R"({"reservation_id":"r-1"})");
            });
    reg.add(
      d, "DebitAccount", [record](const cmdbus::command& c, handler_context&) {
        record(c);
        if (amount_of(c) == debit_breaks)
          throw permanent_command_error("LEDGER_BROKEN", "ledger unavailable");
        return json::null();
      });
    reg.add(d, "SendNotification",
            [record](const cmdbus::command& c, handler_context&) -> json {
              record(c);
              if (order_of(c) == notify_fails)
                throw business_rule_error("NO_ADDRESS", "no address on file");
              return json::null();
            });
    for (auto* t : {"ReleaseStock", "RefundAccount"})
      reg.add(d, t, [record](const cmdbus::command& c, handler_context&) {
        record(c);
        return json::null();
      });
    process_registry procs;
    procs.add(d, std::shared_ptr<const workflow>(std::shared_ptr<void>{},
                                                 &order_workflow()));
    auto cfg = make_cfg({d}, concurrency);
    if (http)
      cfg.http = "127.0.0.1:0";
    w = std::make_unique<worker>(cfg, std::move(reg), std::move(procs));
  }

  static std::shared_ptr<const process_registry>
  make_registry(std::shared_ptr<process_registry> r, const std::string& d) {
    r->add(d, std::shared_ptr<const workflow>(std::shared_ptr<void>{},
                                              &order_workflow()));
    return r;
  }

  ~process_fixture() {
    stop_worker(*w);
  }

  process_status status(const uuid& id) {
    auto p = pm.get(d, id);
    return p ? p->status : process_status::pending;
  }

  bool reaches(const uuid& id, process_status s,
               std::chrono::milliseconds deadline = 30s) {
    return eventually([&] { return status(id) == s; }, deadline);
  }

  std::vector<std::string> steps(const uuid& id) {
    std::vector<std::string> out;
    for (auto& a : pm.audit_trail(d, id))
      out.push_back(
        a.step_name + ":"
        + (a.outcome ? std::string{to_string(*a.outcome)} : std::string{"-"}));
    return out;
  }
};

} // namespace

TEST(ProcessRuntime, AProcessRunsItsStepsToCompletion) {
  process_fixture f;
  f.w->start();
  auto id = f.pm.start(f.d, "OrderFulfilment", order_input("o-1", 250));
  ASSERT_TRUE(f.reaches(id, process_status::completed))
    << to_string(f.status(id));
  auto p = *f.pm.get(f.d, id);
  EXPECT_EQ(p.current_step, "Notify");
  EXPECT_TRUE(p.completed_at);
  auto state = from_json(p.state);
  EXPECT_EQ(state.reservation, "r-1");
  EXPECT_TRUE(state.debited);
  EXPECT_TRUE(state.notified);
  EXPECT_EQ(f.steps(id),
            (strings{"Reserve:SUCCESS", "Debit:SUCCESS", "Notify:SUCCESS"}));
  // Every reply was consumed.
  EXPECT_TRUE(eventually([&] {
    return f.e.conn
             .query("SELECT queue_length FROM pgmq.metrics($1)",
                    process_reply_queue(f.d))
             .int64(0, 0)
           == 0;
  }));
}

TEST(ProcessRuntime, AFailedStepIsCompensatedInReverseOrderOneAtATime) {
  process_fixture f;
  f.w->start();
  auto id = f.pm.start(f.d, "OrderFulfilment", order_input(notify_fails, 20));
  ASSERT_TRUE(f.reaches(id, process_status::canceled))
    << to_string(f.status(id));
  auto p = *f.pm.get(f.d, id);
  EXPECT_EQ(p.error_code, "NO_ADDRESS");
  EXPECT_EQ(p.error_message, "no address on file");
  EXPECT_EQ(f.steps(id),
            (strings{"Reserve:SUCCESS", "Debit:SUCCESS", "Notify:FAILED",
                     "Refund:SUCCESS", "Release:SUCCESS"}));
  // One at a time: the refund ran (and was answered) before the release
  // was sent.
  auto trail = f.pm.audit_trail(f.d, id);
  ASSERT_EQ(trail.size(), 5u);
  ASSERT_TRUE(trail[3].received_at);
  EXPECT_LE(*trail[3].received_at, trail[4].sent_at);
  std::lock_guard<std::mutex> guard{f.mtx};
  EXPECT_EQ(f.seen, (strings{"ReserveStock", "DebitAccount", "SendNotification",
                             "RefundAccount", "ReleaseStock"}));
}

TEST(ProcessRuntime, AStepInTheTsqWaitsForAnOperatorWhoCancels) {
  process_fixture f;
  f.w->start();
  auto id = f.pm.start(f.d, "OrderFulfilment",
                       order_input("o-3", debit_breaks));
  ASSERT_TRUE(f.reaches(id, process_status::waiting_for_tsq))
    << to_string(f.status(id));
  auto debit = f.pm.audit_trail(f.d, id).back();
  EXPECT_EQ(debit.step_name, "Debit");
  troubleshooting_queue tsq{f.e.pool};
  tsq.cancel(f.d, debit.command_id, std::string{"ledger gone"}, "test");
  ASSERT_TRUE(f.reaches(id, process_status::compensated))
    << to_string(f.status(id));
  EXPECT_EQ(f.steps(id),
            (strings{"Reserve:SUCCESS", "Debit:CANCELED", "Release:SUCCESS"}));
}

TEST(ProcessRuntime, AnOperatorsCompleteResumesAProcessWaitingForTheTsq) {
  process_fixture f;
  f.w->start();
  auto id = f.pm.start(f.d, "OrderFulfilment",
                       order_input("o-4", debit_breaks));
  ASSERT_TRUE(f.reaches(id, process_status::waiting_for_tsq));
  auto debit = f.pm.audit_trail(f.d, id).back();
  troubleshooting_queue tsq{f.e.pool};
  tsq.complete(f.d, debit.command_id, json::parse(R"({"settled":"by hand"})"),
               "test");
  ASSERT_TRUE(f.reaches(id, process_status::completed))
    << to_string(f.status(id));
  EXPECT_EQ(f.steps(id),
            (strings{"Reserve:SUCCESS", "Debit:SUCCESS", "Notify:SUCCESS"}));
}

TEST(ProcessRuntime, MessagesThatAreNoRepliesOrForNoProcessAreArchived) {
  process_fixture f;
  auto queue = process_reply_queue(f.d);
  f.e.bus.ensure_queue(queue);
  auto send = [&](const std::string& body) {
    return f.e.conn.query("SELECT pgmq.send($1, $2::jsonb)", queue, body)
      .int64(0, 0);
  };
  auto garbage = send(R"({"hello":"world"})");
  auto orphan = send(R"({"command_id":")" + uuid::random().to_string()
                     + R"(","correlation_id":")" + uuid::random().to_string()
                     + R"(","outcome":"SUCCESS","result":null})");
  f.w->start();
  auto id = f.pm.start(f.d, "OrderFulfilment", order_input("o-5", 10));
  ASSERT_TRUE(f.reaches(id, process_status::completed));
  auto archived = [&](int64_t msg_id) {
    return f.e.conn
             .query("SELECT count(*) FROM pgmq.a_"
                      + db::queue_table(queue).substr(2) + " WHERE msg_id = $1",
                    msg_id)
             .int64(0, 0)
           == 1;
  };
  EXPECT_TRUE(
    eventually([&] { return archived(garbage) && archived(orphan); }));
}

TEST(ProcessRuntime, AThousandConcurrentProcessesAllFinish) {
  process_fixture f{16};
  std::vector<uuid> ids;
  for (int i = 0; i < 1000; ++i)
    ids.push_back(f.pm.start(
      f.d, "OrderFulfilment",
      order_input(i % 10 == 0 ? notify_fails : "o-" + std::to_string(i), 5)));
  f.w->start();
  auto count = [&](const char* status) {
    return f.e.conn
      .query("SELECT count(*) FROM commandbus.process WHERE domain = $1 AND "
             "status = $2",
             f.d, status)
      .int64(0, 0);
  };
  ASSERT_TRUE(eventually(
    [&] { return count("COMPLETED") + count("CANCELED") == 1000; }, 120s))
    << count("COMPLETED") << " completed, " << count("CANCELED") << " canceled";
  EXPECT_EQ(count("COMPLETED"), 900);
  EXPECT_EQ(count("CANCELED"), 100);
}

TEST(ProcessRuntime, ProcessesFinishWhenTheirConnectionsAreCut) {
  // The router's and the writers' connections are ended again and again
  // while processes run: they reconnect with backoff, a transition cut
  // before its commit comes again, and every process finishes once.
  process_fixture f{8};
  std::vector<uuid> ids;
  for (int i = 0; i < 200; ++i)
    ids.push_back(f.pm.start(f.d, "OrderFulfilment",
                             order_input("o-" + std::to_string(i), 5)));
  f.w->start();
  auto completed = [&] {
    return f.e.conn
      .query("SELECT count(*) FROM commandbus.process WHERE domain = $1 AND "
             "status = 'COMPLETED'",
             f.d)
      .int64(0, 0);
  };
  int cuts = 0;
  auto cut = [&] {
    auto n = f.e.conn
               .query("SELECT count(pg_terminate_backend(pid)) FROM "
                      "pg_stat_activity WHERE datname = current_database() "
                      "AND application_name = 'cmdbus-processes'")
               .int64(0, 0);
    cuts += static_cast<int>(n);
  };
  for (int round = 0; round < 5 && completed() < 200; ++round) {
    cut();
    // Let some work through before the next cut.
    auto before = completed();
    eventually([&] { return completed() > before + 10 || completed() == 200; },
               10s);
  }
  EXPECT_GT(cuts, 0);
  ASSERT_TRUE(eventually([&] { return completed() == 200; }, 90s))
    << completed() << " of 200 completed";
  // Each step's command ran once per process (no step sent twice).
  auto steps = f.e.conn
                 .query("SELECT count(*) FROM commandbus.process_audit WHERE "
                        "domain = $1",
                        f.d)
                 .int64(0, 0);
  EXPECT_EQ(steps, 600);
  auto twice = f.e.conn
                 .query("SELECT count(*) FROM (SELECT process_id, step_name "
                        "FROM commandbus.process_audit WHERE domain = $1 "
                        "GROUP BY 1, 2 HAVING count(*) > 1) t",
                        f.d)
                 .int64(0, 0);
  EXPECT_EQ(twice, 0);
}

namespace {

enum class ping_step { ping };

// A second process type: one step, no compensation.
std::shared_ptr<const workflow> ping_workflow() {
  workflow_spec<int, ping_step> spec;
  spec.process_type = "Ping";
  spec.steps = {{ping_step::ping, "Ping"}};
  spec.to_json = [](const int& n) {
    return json::parse("{\"pongs\":" + std::to_string(n) + "}");
  };
  spec.from_json = [](const json& x) { return parse_doc(x)["pongs"].GetInt(); };
  spec.initial_state = [](const json&) { return 0; };
  spec.first_step = [](const int&) { return ping_step::ping; };
  spec.command_for = [](ping_step, const int&) {
    return step_command{"ReleaseStock", json::object()};
  };
  spec.update_state = [](int& n, ping_step, const reply&) { ++n; };
  spec.next_step = [](ping_step, const reply&,
                      const int&) -> std::optional<ping_step> {
    return std::nullopt;
  };
  return std::make_shared<workflow_definition<int, ping_step>>(std::move(spec));
}

} // namespace

TEST(ProcessRuntime, SeveralTypesInSeveralDomainsRunSideBySide) {
  bus_env e;
  auto a = unique_name("pra");
  auto b = unique_name("prb");
  auto order = std::shared_ptr<const workflow>(std::shared_ptr<void>{},
                                               &order_workflow());
  auto ping = ping_workflow();
  auto registry = std::make_shared<process_registry>();
  handler_registry reg;
  for (auto& d : {a, b}) {
    e.bus.ensure_queue(db::command_queue(d));
    registry->add(d, order);
    for (auto* t : {"ReserveStock", "DebitAccount", "SendNotification",
                    "ReleaseStock", "RefundAccount"})
      reg.add(d, t, null_result);
  }
  registry->add(a, ping);
  process_registry copy = *registry;
  worker w{make_cfg({a, b}), std::move(reg), std::move(copy)};
  finally stop{[&] { stop_worker(w); }};
  process_manager pm{e.pool, registry};
  std::vector<std::pair<std::string, uuid>> started;
  for (int i = 0; i < 10; ++i) {
    started.emplace_back(a, pm.start(a, "OrderFulfilment",
                                     order_input("a-" + std::to_string(i))));
    started.emplace_back(b, pm.start(b, "OrderFulfilment",
                                     order_input("b-" + std::to_string(i))));
    started.emplace_back(a, pm.start(a, "Ping", json::object()));
  }
  EXPECT_THROW(pm.start(b, "Ping", json::object()), unknown_process_type_error);
  w.start();
  for (auto& [d, id] : started)
    EXPECT_TRUE(eventually([&, d = d, id = id] {
      auto p = pm.get(d, id);
      return p && p->status == process_status::completed;
    }))
      << d << " " << id.to_string();
  auto p = *pm.get(a, started[2].second);
  EXPECT_EQ(p.process_type, "Ping");
  EXPECT_EQ(p.state, json::parse(R"({"pongs":1})"));
}

TEST(ProcessRuntime, MetricsCountTheProcessesInProgress) {
  // One process waits for an operator, one is done: /metrics (parsed by the
  // exposition-format parser) counts the one in progress by its status.
  process_fixture f{4, true};
  f.w->start();
  auto waiting = f.pm.start(f.d, "OrderFulfilment",
                            order_input("o-m1", debit_breaks));
  auto done = f.pm.start(f.d, "OrderFulfilment", order_input("o-m2", 5));
  ASSERT_TRUE(f.reaches(waiting, process_status::waiting_for_tsq));
  ASSERT_TRUE(f.reaches(done, process_status::completed));
  auto port = f.w->http_port();
  metrics m;
  ASSERT_TRUE(eventually([&] {
    m = scrape(port);
    return m.value("cmdbus_processes", {{"domain", f.d},
                                        {"process_type", "OrderFulfilment"},
                                        {"status", "WAITING_FOR_TSQ"}})
           == 1;
  }))
    << m.text;
  // Finished processes are not counted.
  EXPECT_EQ(m.value("cmdbus_processes", {{"domain", f.d},
                                         {"process_type", "OrderFulfilment"},
                                         {"status", "COMPLETED"}}),
            -1);
  auto page = http_get(port, "/");
  EXPECT_NE(page.body.find("<td>OrderFulfilment</td><td>WAITING_FOR_TSQ</td>"),
            std::string::npos)
    << page.body;
}

namespace {

// The example's handlers (no-ops) in `d`.
handler_registry order_handlers(const std::string& d) {
  handler_registry reg;
  for (auto* t : {"ReserveStock", "DebitAccount", "SendNotification",
                  "ReleaseStock", "RefundAccount"})
    reg.add(d, t, null_result);
  return reg;
}

std::shared_ptr<const workflow> order_type() {
  return {std::shared_ptr<void>{}, &order_workflow()};
}

} // namespace

TEST(ProcessRuntime, AReplyOfATypeNotServedHereWaitsForAWorkerThatServesIt) {
  // A type registered on some workers only (a rolling deploy): a worker
  // without it runs its commands but never reads, delays or archives its
  // replies; a worker with it applies them later.
  bus_env e;
  auto d = unique_name("prn");
  auto queue = process_reply_queue(d);
  e.bus.ensure_queue(db::command_queue(d));
  auto all = std::make_shared<process_registry>();
  all->add(d, order_type());
  all->add(d, ping_workflow());
  process_manager pm{e.pool, all};
  auto ping = pm.start(d, "Ping", json::object());
  auto q_table = "pgmq." + db::queue_table(queue);
  auto ping_reply = [&](const std::string& where) {
    return e.conn
      .query("SELECT count(*) FROM " + q_table
               + " WHERE message->>'correlation_id' = $1 AND " + where,
             ping.to_string())
      .int64(0, 0);
  };
  {
    process_registry orders_only;
    orders_only.add(d, order_type());
    worker w{make_cfg({d}), order_handlers(d), std::move(orders_only)};
    finally stop{[&] { stop_worker(w); }};
    w.start();
    // The Ping step's command runs here (ReleaseStock): its reply waits.
    ASSERT_TRUE(eventually([&] { return ping_reply("TRUE") == 1; }));
    // Processes of the type served here pass through the same queue.
    for (int i = 0; i < 3; ++i) {
      auto id = pm.start(d, "OrderFulfilment",
                         order_input("o-" + std::to_string(i)));
      ASSERT_TRUE(eventually([&] {
        auto p = pm.get(d, id);
        return p && p->status == process_status::completed;
      }));
    }
    EXPECT_EQ(ping_reply("read_ct = 0 AND vt <= clock_timestamp()"), 1);
    EXPECT_EQ(archive_rows(e.conn, queue), 0);
    EXPECT_EQ(pm.get(d, ping)->status, process_status::waiting);
  }
  process_registry with_ping;
  with_ping.add(d, ping_workflow());
  worker w{make_cfg({d}), order_handlers(d), std::move(with_ping)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  EXPECT_TRUE(eventually([&] {
    auto p = pm.get(d, ping);
    return p && p->status == process_status::completed;
  }));
  EXPECT_EQ(archive_rows(e.conn, queue), 0);
}

TEST(ProcessRuntime, ATypeOnAReplyQueueOfItsOwnRunsOnIt) {
  // The type's commands name its own queue; the worker reads it, and the
  // shared queue too, where processes started before the type moved still
  // answer.
  bus_env e;
  auto d = unique_name("prq");
  auto own = d + "__fulfilment";
  e.bus.ensure_queue(db::command_queue(d));
  auto before = std::make_shared<process_registry>();
  before->add(d, order_type());
  auto moved = std::make_shared<process_registry>();
  moved->add(d, order_type(), {own});
  process_manager old_pm{e.pool, before};
  process_manager pm{e.pool, moved};
  auto old_id = old_pm.start(d, "OrderFulfilment", order_input("o-old"));
  std::vector<uuid> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(
      pm.start(d, "OrderFulfilment", order_input("o-" + std::to_string(i))));
  EXPECT_EQ(e.conn
              .query("SELECT count(*) FROM commandbus.command WHERE domain = "
                     "$1 AND reply_queue = $2",
                     d, own)
              .int64(0, 0),
            5);
  process_registry copy = *moved;
  worker w{make_cfg({d}), order_handlers(d), std::move(copy)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ids.push_back(old_id);
  for (auto& id : ids)
    EXPECT_TRUE(eventually([&] {
      auto p = pm.get(d, id);
      return p && p->status == process_status::completed;
    }))
      << id.to_string();
  // Each process kept its queue: the old one's three replies came through
  // the shared queue, the others' through their own.
  auto replies_to = [&](const std::string& queue) {
    return e.conn
      .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
             "reply_queue = $2",
             d, queue)
      .int64(0, 0);
  };
  EXPECT_EQ(replies_to(own), 15);
  EXPECT_EQ(replies_to(process_reply_queue(d)), 3);
  EXPECT_EQ(archive_rows(e.conn, own), 0);
  EXPECT_EQ(archive_rows(e.conn, process_reply_queue(d)), 0);
}
