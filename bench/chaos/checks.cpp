#include "bench/chaos/checks.hpp"

#include <fstream>
#include <regex>
#include <unordered_map>
#include <unordered_set>

#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::chaos {

namespace {

constexpr size_t max_examples = 5;

bool is_final(const std::string& status) {
  return status == "COMPLETED" || status == "FAILED" || status == "CANCELED"
         || status == "IN_TROUBLESHOOTING_QUEUE";
}

struct command_row {
  std::string status;
  int64_t attempts = 0;
};

// Messages per command id in a queue; empty when the queue does not exist.
std::unordered_map<std::string, int64_t>
messages_per_command(db::connection& conn, const std::string& queue) {
  std::unordered_map<std::string, int64_t> out;
  // Validated: the table name is put into the SQL text.
  auto table = db::queue_table(queue);
  if (!conn.query("SELECT to_regclass($1) IS NOT NULL", "pgmq." + table)
         .boolean(0, 0))
    return out;
  auto res = conn.exec("SELECT message->>'command_id', count(*) FROM pgmq."
                       + table + " GROUP BY 1");
  for (int i = 0; i < res.rows(); ++i)
    out[std::string{res.text(i, 0)}] = res.int64(i, 1);
  return out;
}

struct examples {
  std::map<std::string, size_t> per_kind;
  std::vector<std::string>& out;
  void add(const std::string& kind, const std::string& line) {
    if (per_kind[kind]++ < max_examples)
      out.push_back(kind + ": " + line);
  }
};

} // namespace

std::vector<std::string> scenario_report::failures() const {
  std::vector<std::string> f;
  auto add = [&](int64_t n, const std::string& what) {
    if (n > 0)
      f.push_back(std::to_string(n) + " " + what);
  };
  add(sending.hung, "sends never returned (the harness abandoned them: a "
                    "client stuck after a fault)");
  add(unsent, "commands could not be sent (the database refused them "
              "until the harness gave up, or their send hung)");
  add(lost, "commands lost (neither final nor in the queue)");
  add(not_final_queued, "commands never reached a final status (their "
                        "message is still in the queue)");
  add(wrongly_final, "commands in the wrong final status");
  add(final_twice, "commands completed or failed more than once");
  add(replies_missing, "replies missing");
  add(batches_missing, "batches missing");
  add(batch_counters_wrong, "batches with counters that differ from their "
                            "commands");
  add(batch_status_wrong, "batches with a status that does not follow from "
                          "their commands");
  add(callbacks_missing, "final batches whose callback was not delivered");
  add(schedule_missing, "schedule slots without a command");
  add(schedule_extra, "schedule commands beyond one per slot");
  add(schedule_not_completed, "schedule commands not COMPLETED");
  if (!schedule_domain.empty() && schedule_slots == 0)
    f.push_back("the schedule never fired");
  add(processes_unstarted, "processes could not be started");
  add(processes_missing, "processes missing");
  add(processes_twice, "processes started twice");
  add(processes_not_final, "processes never reached a final status");
  add(processes_wrong, "processes in the wrong status or with wrong steps");
  if (health_must_degrade && !health_degraded)
    f.push_back("no worker's /healthz said DEGRADED or CRITICAL during the "
                "faults");
  if (!health_recovered) {
    std::string states;
    for (auto& s : health_final)
      states += (states.empty() ? "" : ", ") + s;
    f.push_back("the workers' /healthz did not all return to HEALTHY after "
                "recovery ("
                + states + ")");
  }
  for (auto& p : worker_problems)
    f.push_back(p);
  if (!node_kills.empty() && released_on_node_loss == 0)
    f.push_back("no worker made a lost node's commands visible again (their "
                "logs say none): the kills hit no work in flight");
  for (auto& k : node_kills)
    if (k.last_final_seconds
        && *k.last_final_seconds >= visibility_timeout_seconds)
      f.push_back("commands in flight at a node kill were final only "
                  + std::to_string(*k.last_final_seconds)
                  + " s after it, not before the visibility timeout");
  return f;
}

void check_outcome(db::connection& conn, const load_plan& plan,
                   scenario_report& r) {
  examples ex{{}, r.examples};
  std::unordered_map<std::string, command_row> rows;
  std::unordered_map<std::string, std::string> batch_of;
  {
    auto res = conn.query("SELECT command_id::text, status, attempts, "
                          "batch_id::text FROM commandbus.command WHERE "
                          "domain = $1",
                          plan.domain);
    for (int i = 0; i < res.rows(); ++i) {
      std::string id{res.text(i, 0)};
      rows[id] = {std::string{res.text(i, 1)}, res.int64(i, 2)};
      if (!res.is_null(i, 3))
        batch_of[id] = std::string{res.text(i, 3)};
    }
  }
  auto queued = messages_per_command(conn, db::command_queue(plan.domain));
  auto replies = messages_per_command(conn, plan.reply_queue);
  std::unordered_map<std::string, std::map<std::string, int64_t>> finals;
  {
    auto res = conn.query(
      "SELECT command_id::text, event_type, count(*) FROM commandbus.audit "
      "WHERE domain = $1 AND event_type IN ('COMPLETED', 'MOVED_TO_TSQ', "
      "'BUSINESS_RULE_FAILED') GROUP BY 1, 2",
      plan.domain);
    for (int i = 0; i < res.rows(); ++i)
      finals[std::string{res.text(i, 0)}][std::string{res.text(i, 1)}]
        = res.int64(i, 2);
  }

  r.planned = static_cast<int64_t>(plan.commands.size());
  for (auto& c : plan.commands) {
    auto id = c.id.to_string();
    auto row = rows.find(id);
    // A send the harness gave up on may still have committed.
    if (!c.confirmed && row == rows.end()) {
      ++r.unsent;
      continue;
    }
    ++r.sent;
    r.sent_in_batches += c.batch ? 1 : 0;
    r.sent_with_reply += c.reply ? 1 : 0;
    if (row == rows.end()) {
      ++r.lost;
      ex.add("lost", id + " (" + name_of(c.what) + ", no command row)");
      continue;
    }
    auto& status = row->second.status;
    ++r.statuses[status];
    auto detail = id + " (" + name_of(c.what) + ", " + status + ", attempts "
                  + std::to_string(row->second.attempts) + ")";
    if (!is_final(status)) {
      r.attempts_not_final += row->second.attempts;
      if (queued.count(id) > 0) {
        ++r.not_final_queued;
        ex.add("not final", detail);
      } else {
        ++r.lost;
        ex.add("lost", detail);
      }
      continue;
    }
    ++r.final_count;
    r.attempts += row->second.attempts;
    r.expected_runs += expected_runs(c.what);
    if (status != final_status_of(c.what)) {
      ++r.wrongly_final;
      ex.add("wrongly final", detail);
    }
    auto fin = finals.find(id);
    if (fin != finals.end()) {
      int64_t total = 0;
      for (auto& [event, n] : fin->second) {
        total += n;
        if (n > 1)
          ++r.final_twice_by_event[event];
      }
      if (total > 1) {
        ++r.final_twice;
        ex.add("final twice", detail);
      }
    }
    if (c.reply && (status == "COMPLETED" || status == "FAILED")) {
      ++r.replies_expected;
      auto n = replies.count(id) > 0 ? replies[id] : 0;
      if (n == 0) {
        ++r.replies_missing;
        ex.add("reply missing", detail);
      } else if (n > 1) {
        ++r.replies_duplicated;
        r.duplicate_replies.push_back(id + " x" + std::to_string(n));
      }
    }
  }

  // Batches: recount their commands from the rows.
  struct recount {
    int64_t total = 0, completed = 0, failed = 0, tsq = 0, canceled = 0;
  };
  std::unordered_map<std::string, recount> counts;
  for (auto& [id, b] : batch_of) {
    auto& n = counts[b];
    auto& s = rows[id].status;
    ++n.total;
    n.completed += s == "COMPLETED";
    n.failed += s == "FAILED";
    n.tsq += s == "IN_TROUBLESHOOTING_QUEUE";
    n.canceled += s == "CANCELED";
  }
  auto res = conn.query(
    "SELECT b.batch_id::text, b.status, b.total_count, b.completed_count, "
    "b.failed_count, b.in_troubleshooting_count, b.canceled_count, "
    "d.delivered_at IS NOT NULL, COALESCE(d.attempts, 0) "
    "FROM commandbus.batch b LEFT JOIN commandbus.cmdbus_batch_delivery d "
    "ON d.domain = b.domain AND d.batch_id = b.batch_id WHERE b.domain = $1",
    plan.domain);
  std::unordered_set<std::string> seen;
  for (int i = 0; i < res.rows(); ++i) {
    std::string id{res.text(i, 0)};
    std::string status{res.text(i, 1)};
    seen.insert(id);
    ++r.batches;
    auto n = counts[id];
    bool counters_ok = res.int64(i, 2) == n.total
                       && res.int64(i, 3) == n.completed
                       && res.int64(i, 4) == n.failed
                       && res.int64(i, 5) == n.tsq
                       && res.int64(i, 6) == n.canceled;
    if (!counters_ok) {
      ++r.batch_counters_wrong;
      ex.add("batch counters", id);
    }
    // A batch is done when none of its commands is open or in the TSQ.
    bool done = n.completed + n.failed + n.canceled == n.total && n.tsq == 0;
    bool is_done = status == "COMPLETED" || status == "COMPLETED_WITH_FAILURES";
    auto want = !done                       ? std::string{}
                : n.failed + n.canceled > 0 ? "COMPLETED_WITH_FAILURES"
                                            : "COMPLETED";
    if (done ? status != want : is_done) {
      ++r.batch_status_wrong;
      ex.add("batch status", id + " (" + status + ")");
    }
    if (is_done) {
      ++r.batches_final;
      if (!res.boolean(i, 7)) {
        ++r.callbacks_missing;
        ex.add("callback", id);
      }
    }
    if (res.int64(i, 8) > 1)
      ++r.callbacks_repeated;
  }
  for (auto& b : plan.batches) {
    auto id = b.id.to_string();
    if (b.confirmed && seen.count(id) == 0) {
      ++r.batches_missing;
      ex.add("batch missing", id);
    }
  }
}

namespace {

// A text[] literal of domain names (letters, digits, underscores).
std::string domains_literal(const std::vector<std::string>& domains) {
  std::string out = "{";
  for (auto& d : domains)
    out += (out.size() > 1 ? "," : "") + d;
  return out + "}";
}

} // namespace

node_kill in_flight_now(db::connection& conn,
                        const std::vector<std::string>& domains) {
  auto res = conn.query(
    "SELECT clock_timestamp()::text, coalesce(array_agg(command_id)::text, "
    "'{}'), count(*) FROM commandbus.command WHERE domain = ANY($1::text[]) "
    "AND status = 'IN_PROGRESS'",
    domains_literal(domains));
  node_kill k;
  k.db_time = std::string{res.text(0, 0)};
  k.in_flight_ids = std::string{res.text(0, 1)};
  k.in_flight = res.int64(0, 2);
  return k;
}

void check_node_kills(db::connection& conn,
                      const std::vector<std::string>& domains,
                      const std::vector<std::string>& logs,
                      scenario_report& r) {
  for (auto& k : r.node_kills) {
    auto res = conn.query(
      std::string{"SELECT count(*), count(*) FILTER (WHERE NOT final), "
                  "max(s) FILTER (WHERE final), percentile_cont(0.5) WITHIN "
                  "GROUP (ORDER BY s) FILTER (WHERE final) FROM (SELECT "
                  "c.status IN "}
        + final_statuses
        + " AS final, extract(epoch FROM c.updated_at - $2::timestamptz) "
          "AS s FROM commandbus.command c WHERE c.domain = ANY($3::text[]) "
          "AND c.command_id = ANY($1::uuid[]) AND EXISTS (SELECT 1 FROM "
          "commandbus.audit a WHERE a.command_id = c.command_id AND "
          "a.domain = c.domain AND a.event_type = 'RECEIVED' AND a.ts > "
          "$2::timestamptz) AND (SELECT a.event_type FROM commandbus.audit a "
          "WHERE a.command_id = c.command_id AND a.domain = c.domain AND "
          "a.ts <= $2::timestamptz ORDER BY a.ts DESC, a.audit_id DESC LIMIT "
          "1) = 'RECEIVED') t",
      k.in_flight_ids, k.db_time, domains_literal(domains));
    k.read_again = res.int64(0, 0);
    k.read_again_not_final = res.int64(0, 1);
    if (!res.is_null(0, 2))
      k.last_final_seconds = std::stod(std::string{res.text(0, 2)});
    if (!res.is_null(0, 3))
      k.median_final_seconds = std::stod(std::string{res.text(0, 3)});
  }
  // The supervisor's warning when it drops a pool.
  static const std::regex lost{
    R"(remote pool \S+ lost \(.*\); (\d+) command\(s\) made visible again)"};
  r.released_on_node_loss = 0;
  for (auto& path : logs) {
    std::ifstream in{path};
    std::string line;
    std::smatch m;
    while (std::getline(in, line))
      if (std::regex_search(line, m, lost))
        r.released_on_node_loss += std::stoll(m[1].str());
  }
}

void check_schedule(db::connection& conn, scenario_report& r) {
  auto q = conn.query(
    "WITH s AS (SELECT id, anchor, last_slot, make_interval(secs => "
    "interval_ms / 1000.0) AS step FROM commandbus.cmdbus_schedule WHERE "
    "domain = $1), slots AS (SELECT g.slot, (SELECT command_id FROM "
    "commandbus.cmdbus_schedule_slot_ids($1, s.id, g.slot)) AS cid FROM s, "
    "generate_series(s.anchor + s.step, s.last_slot, s.step) AS g(slot)), "
    "fired AS (SELECT slots.slot, (SELECT count(*) FROM commandbus.command c "
    "WHERE c.domain = $1 AND c.command_id = slots.cid) AS n FROM slots), "
    "w AS (SELECT * FROM fired WHERE slot >= (SELECT min(slot) FROM fired "
    "WHERE n > 0)) "
    "SELECT count(*), count(*) FILTER (WHERE n = 0), (SELECT count(*) FROM "
    "commandbus.command c WHERE c.domain = $1) - count(*) FILTER (WHERE n = "
    "1), (SELECT count(*) FROM commandbus.command c WHERE c.domain = $1 AND "
    "c.status <> 'COMPLETED') FROM w",
    r.schedule_domain);
  r.schedule_slots = q.int64(0, 0);
  r.schedule_missing = q.int64(0, 1);
  r.schedule_extra = q.int64(0, 2);
  r.schedule_not_completed = q.int64(0, 3);
}

int64_t unsettled(db::connection& conn, const std::string& domain) {
  return conn
    .query(std::string{"SELECT (SELECT count(*) FROM commandbus.command "
                       "WHERE domain = $1 AND status NOT IN "}
             + final_statuses
             + ") + (SELECT count(*) FROM commandbus.batch b JOIN "
               "commandbus.cmdbus_batch_delivery d ON d.domain = b.domain "
               "AND d.batch_id = b.batch_id WHERE b.domain = $1 AND "
               "d.delivered_at IS NULL)",
           domain)
    .int64(0, 0);
}

} // namespace cmdbus::chaos
