#include "bench/chaos/processes.hpp"

#include <map>

#include "apps/demo_workflows.hpp"
#include "bench/chaos/checks.hpp"
#include "bench/chaos/process.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/process/manager.hpp"

namespace cmdbus::chaos {

using namespace std::chrono_literals;

namespace {

// The steps (name:reply outcome) process `i` must have, in order.
std::string expected_steps(int i) {
  return i % 2 == 0 ? "Reserve:SUCCESS Charge:SUCCESS Ship:SUCCESS"
                    : "Reserve:SUCCESS Charge:FAILED Release:SUCCESS";
}

const char* expected_status(int i) {
  return i % 2 == 0 ? "COMPLETED" : "CANCELED";
}

bool exists(db::connection& conn, const process_plan& plan,
            const std::string& order_id) {
  return conn
           .query("SELECT count(*) FROM commandbus.process WHERE domain = $1 "
                  "AND state->>'order_id' = $2",
                  plan.domain, order_id)
           .int64(0, 0)
         > 0;
}

} // namespace

std::string order_id_of(const process_plan& plan, int i) {
  return plan.prefix + "-" + std::to_string(i);
}

process_starter::process_starter(process_plan plan, std::string dsn,
                                 std::chrono::milliseconds duration,
                                 std::chrono::milliseconds give_up_after)
  : plan_(std::move(plan)), dsn_(std::move(dsn)), duration_(duration),
    give_up_after_(give_up_after) {
  // nop
}

process_starter::~process_starter() {
  stop_ = true;
  if (thread_.joinable())
    thread_.join();
}

void process_starter::start() {
  thread_ = std::thread([this] { run(); });
}

void process_starter::finish() {
  if (thread_.joinable())
    thread_.join();
}

void process_starter::run() {
  db::pool_options popts;
  popts.dsn = dsn_;
  popts.max_size = 1;
  popts.log_failures = false;
  popts.connection.application_name = "cmdbus-chaos";
  popts.connection.connect_timeout = std::chrono::seconds{5};
  popts.connection.statement_timeout = 10000ms;
  db::pool pool{popts};
  auto registry = std::make_shared<process_registry>();
  demo::register_demo_workflows(*registry, plan_.domain);
  process_manager pm{pool, registry};
  auto begin = clock::now();
  for (int i = 0; i < plan_.count && !stop_; ++i) {
    pause_until(begin + duration_ * i / std::max(plan_.count, 1));
    auto order = order_id_of(plan_, i);
    auto input = json::parse(R"({"order_id":")" + order + R"(","charge":")"
                             + (i % 2 == 0 ? "ok" : "declined") + "\"}");
    auto give_up = clock::now() + give_up_after_;
    bool retrying = false;
    for (;;) {
      try {
        if (retrying) {
          auto lease = pool.acquire();
          if (exists(*lease, plan_, order)) {
            ++started_;
            break;
          }
        }
        pm.start(plan_.domain, demo::demo_order_type, input);
        ++started_;
        break;
      } catch (const std::exception&) {
        ++failed_attempts_;
        retrying = true;
        if (stop_ || clock::now() >= give_up) {
          ++given_up_;
          break;
        }
        pause_for(200ms);
      }
    }
  }
}

int64_t unsettled_processes(db::connection& conn, const std::string& domain) {
  return conn
    .query("SELECT count(*) FROM commandbus.process WHERE domain = $1 AND "
           "status NOT IN ('COMPLETED', 'COMPENSATED', 'FAILED', 'CANCELED')",
           domain)
    .int64(0, 0);
}

void check_processes(db::connection& conn, const process_plan& plan,
                     scenario_report& r) {
  r.processes_planned = plan.count;
  std::map<std::string, std::pair<std::string, std::string>> seen;
  auto rows = conn.query(
    "SELECT p.state->>'order_id', p.status, coalesce(string_agg(a.step_name "
    "|| ':' || coalesce(a.reply_outcome, '-'), ' ' ORDER BY a.sent_at, a.id), "
    "'') FROM commandbus.process p LEFT JOIN commandbus.process_audit a ON "
    "a.domain = p.domain AND a.process_id = p.process_id WHERE p.domain = $1 "
    "GROUP BY p.process_id, p.state, p.status",
    plan.domain);
  for (int i = 0; i < rows.rows(); ++i) {
    std::string order{rows.text(i, 0)};
    if (seen.count(order) > 0)
      ++r.processes_twice;
    seen[order] = {std::string{rows.text(i, 1)}, std::string{rows.text(i, 2)}};
  }
  for (int i = 0; i < plan.count; ++i) {
    auto it = seen.find(order_id_of(plan, i));
    if (it == seen.end()) {
      ++r.processes_missing;
      continue;
    }
    ++r.processes_found;
    auto& [status, steps] = it->second;
    if (status != "COMPLETED" && status != "COMPENSATED" && status != "FAILED"
        && status != "CANCELED") {
      ++r.processes_not_final;
    } else if (status != expected_status(i) || steps != expected_steps(i)) {
      ++r.processes_wrong;
      if (r.examples.size() < 20)
        r.examples.push_back("process " + it->first + ": " + status + " with "
                             + steps + " (expected " + expected_status(i)
                             + " with " + expected_steps(i) + ")");
    }
  }
}

} // namespace cmdbus::chaos
