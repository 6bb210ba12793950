#include "cmdbus/db/stats.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/text_format.hpp"

namespace cmdbus::db {

// Cost notes. commandbus.command may hold millions of rows, nearly all of
// them COMPLETED; the statements below touch the live part of the table
// (commands not COMPLETED, rows updated in the last hour) through indexes,
// and the COMPLETED count is the only figure that grows with the table.
// Each statement is one round trip; a snapshot of N domains costs 2 + 2N
// statements, one more to list the domains (the queue figures take two per
// domain because every domain has its own queue table). The statements run
// one after the other, not in one snapshot: figures of different statements
// may be a few milliseconds apart.

namespace {

constexpr size_t index_of(command_status s) {
  return static_cast<size_t>(s);
}

// The statuses counted directly; COMPLETED is derived from the total.
const std::string counted_statuses
  = "{PENDING,IN_PROGRESS,FAILED,CANCELED,IN_TROUBLESHOOTING_QUEUE}";

// Distinct domains of the command table by a loose index scan over
// uq_command_domain_cmdid (domain, command_id): one index descent per
// domain, whatever the number of rows; plus the domains that only have a
// queue (pgmq.meta, one row per queue).
constexpr const char* domains_sql = R"(
WITH RECURSIVE d(domain) AS (
    (SELECT domain FROM commandbus.command ORDER BY domain LIMIT 1)
  UNION ALL
    SELECT (SELECT c.domain FROM commandbus.command c
             WHERE c.domain > d.domain ORDER BY c.domain LIMIT 1)
      FROM d WHERE d.domain IS NOT NULL
)
SELECT domain FROM d WHERE domain IS NOT NULL
UNION
SELECT left(queue_name, length(queue_name) - length('__commands'))
  FROM pgmq.meta
 WHERE queue_name LIKE '%\_\_commands' AND length(queue_name) > 10
ORDER BY 1)";

// Commands per status except COMPLETED: ix_command_status_type / created
// (status first) find the rows of the five statuses, so the cost follows
// the commands that are not COMPLETED (normally the live backlog plus the
// failures), not the table.
constexpr const char* status_sql = R"(
SELECT domain, status, count(*)
  FROM commandbus.command
 WHERE status = ANY($1::text[]) AND domain = ANY($2::text[])
 GROUP BY domain, status)";

// Commands per domain, all statuses: an index-only scan of the domains'
// entries in uq_command_domain_cmdid (domain, command_id), plus heap visits
// for pages changed since the last vacuum; when the domains asked for make
// up most of the table (all domains), the planner takes a parallel
// sequential scan instead. This is the statement that grows with the table:
// on a 2-core machine with a million commands in three domains, about
// 60 ms for one domain and 200 ms for all (the other statements took about
// a millisecond each). COMPLETED is this total minus the
// other statuses (a row with a status string we do not know would count as
// COMPLETED). Both run in one statement so that they share a snapshot
// (hence the domains are $2 here too).
constexpr const char* total_sql = R"(
SELECT domain, count(*)
  FROM commandbus.command
 WHERE domain = ANY($2::text[])
 GROUP BY domain)";

// What finished in the last hour: ix_command_updated (updated_at) limits
// the scan to the rows updated in the last hour (of every domain; the
// domain and status are checked on those rows). A row counts when it is
// COMPLETED / FAILED / IN_TROUBLESHOOTING_QUEUE now and was last updated
// within the window: the finish is the last update of such a row, unless
// an operator touched it later (a command retried out of the troubleshooting
// queue leaves it and no longer counts).
constexpr const char* recent_sql = R"(
SELECT domain,
       count(*) FILTER (WHERE status = 'COMPLETED'
                          AND updated_at >= now() - interval '1 minute'),
       count(*) FILTER (WHERE status = 'COMPLETED'),
       count(*) FILTER (WHERE status <> 'COMPLETED'
                          AND updated_at >= now() - interval '1 minute'),
       count(*) FILTER (WHERE status <> 'COMPLETED')
  FROM commandbus.command
 WHERE updated_at >= now() - interval '1 hour'
   AND status IN ('COMPLETED', 'FAILED', 'IN_TROUBLESHOOTING_QUEUE')
   AND domain = ANY($1::text[])
 GROUP BY domain)";

// The figures of one queue table over one pass: depth, visible, scheduled
// (never read and not due: a delayed command waiting for its not-before
// time; a message read before and invisible is held by a worker or waits
// for its retry) and the age of the oldest visible message since it was
// enqueued.
std::string queue_pass(const std::string& queue) {
  return "count(*), count(*) FILTER (WHERE vt <= now()), "
         "count(*) FILTER (WHERE read_ct = 0 AND vt > now()), "
         "EXTRACT(EPOCH FROM now() - min(enqueued_at) FILTER (WHERE vt <= "
         "now())) FROM pgmq."
         + queue_table(queue);
}

// The queue figures: one sequential pass over the queue table, whose size
// is the backlog (messages are deleted or archived when their command
// finishes), never the history.
void add_queue_figures(connection& conn, domain_stats& st) {
  auto queue = st.domain + std::string{command_queue_suffix};
  if (!queue_name_problem(queue).empty() || !queue_exists(conn, queue))
    return;
  st.queue_exists = true;
  auto r = conn.exec("SELECT " + queue_pass(queue));
  st.queue_depth = r.int64(0, 0);
  st.visible = r.int64(0, 1);
  st.scheduled = r.int64(0, 2);
  st.invisible = st.queue_depth - st.visible - st.scheduled;
  if (!r.is_null(0, 3))
    st.oldest_visible_age_sec = std::max(0.0,
                                         std::stod(std::string{r.text(0, 3)}));
}

} // namespace

std::vector<std::string> stats_domains(connection& conn) {
  auto r = conn.exec(domains_sql);
  std::vector<std::string> out;
  for (int i = 0; i < r.rows(); ++i)
    out.emplace_back(r.text(i, 0));
  return out;
}

std::vector<domain_stats>
collect_stats(connection& conn, const std::vector<std::string>& domains) {
  std::vector<domain_stats> out;
  if (domains.empty())
    return out;
  std::map<std::string, size_t> at;
  for (auto& d : domains) {
    if (!at.emplace(d, out.size()).second)
      continue;
    out.emplace_back();
    out.back().domain = d;
  }
  auto list = array_literal(domains);
  {
    // One statement, one snapshot: the total and the other statuses agree.
    auto r = conn.query(std::string{"WITH s AS ("} + status_sql + "), t AS ("
                          + total_sql
                          + ") SELECT domain, status, count FROM s"
                            " UNION ALL SELECT domain, NULL, count FROM t",
                        counted_statuses, list);
    std::map<std::string, int64_t> totals;
    for (int i = 0; i < r.rows(); ++i) {
      auto& st = out[at.at(std::string{r.text(i, 0)})];
      auto n = r.int64(i, 2);
      if (r.is_null(i, 1)) {
        totals[st.domain] = n;
      } else if (auto s = parse_command_status(r.text(i, 1))) {
        st.commands[index_of(*s)] = n;
      }
    }
    for (auto& st : out) {
      int64_t others = 0;
      for (auto s : all_command_statuses)
        if (s != command_status::completed)
          others += st.count(s);
      st.commands[index_of(command_status::completed)] = std::max<int64_t>(
        0, totals[st.domain] - others);
    }
  }
  {
    auto r = conn.query(recent_sql, list);
    for (int i = 0; i < r.rows(); ++i) {
      auto& st = out[at.at(std::string{r.text(i, 0)})];
      st.completed_last_minute = r.int64(i, 1);
      st.completed_last_hour = r.int64(i, 2);
      st.failed_last_minute = r.int64(i, 3);
      st.failed_last_hour = r.int64(i, 4);
    }
  }
  for (auto& st : out)
    add_queue_figures(conn, st);
  return out;
}

namespace {

// One statement for every queue of `figures` that exists and every TSQ
// count; fills `figures`.
void read_queue_figures(connection& conn, std::vector<queue_figures>& figures,
                        const std::vector<std::string>& domains) {
  std::string sql;
  for (size_t i = 0; i < figures.size(); ++i) {
    if (!figures[i].queue_exists)
      continue;
    sql += "SELECT " + std::to_string(i) + ", " + queue_pass(figures[i].queue)
           + " UNION ALL ";
  }
  sql += "SELECT -1, count(*), array_position($1::text[], domain), NULL, "
         "NULL FROM commandbus.command WHERE status = "
         "'IN_TROUBLESHOOTING_QUEUE' AND domain = ANY($1::text[]) GROUP BY "
         "domain";
  auto r = conn.query(sql, array_literal(domains));
  for (int row = 0; row < r.rows(); ++row) {
    auto i = r.int64(row, 0);
    if (i < 0) {
      figures[static_cast<size_t>(r.int64(row, 2) - 1)].tsq = r.int64(row, 1);
      continue;
    }
    auto& f = figures[static_cast<size_t>(i)];
    f.depth = r.int64(row, 1);
    f.visible = r.int64(row, 2);
    f.scheduled = r.int64(row, 3);
    if (!r.is_null(row, 4))
      f.oldest_visible_age_sec = std::max(
        0.0, std::stod(std::string{r.text(row, 4)}));
  }
}

} // namespace

std::vector<queue_figures>
collect_queue_figures(connection& conn,
                      const std::vector<std::string>& domains) {
  std::vector<queue_figures> out;
  for (auto& d : domains) {
    queue_figures f;
    f.domain = d;
    f.queue = command_queue(d);
    f.queue_exists = true;
    out.push_back(std::move(f));
  }
  if (out.empty())
    return out;
  try {
    read_queue_figures(conn, out, domains);
  } catch (const error& e) {
    // A queue was dropped (42P01, undefined table): find out which, then
    // read the others.
    if (e.sqlstate() != "42P01")
      throw;
    for (auto& f : out) {
      f.queue_exists = queue_exists(conn, f.queue);
      f.depth = f.visible = f.scheduled = f.tsq = 0;
      f.oldest_visible_age_sec.reset();
    }
    read_queue_figures(conn, out, domains);
  }
  return out;
}

std::vector<process_figures>
collect_process_figures(connection& conn,
                        const std::vector<std::string>& domains) {
  std::vector<process_figures> out;
  if (domains.empty())
    return out;
  auto r = conn.query(
    "SELECT domain, process_type, status, count(*) FROM commandbus.process "
    "WHERE domain = ANY($1::text[]) AND status = ANY('{PENDING,IN_PROGRESS,"
    "WAITING,WAITING_FOR_TSQ,COMPENSATING}'::text[]) GROUP BY 1, 2, 3 "
    "ORDER BY 1, 2, 3",
    array_literal(domains));
  for (int i = 0; i < r.rows(); ++i)
    out.push_back({std::string{r.text(i, 0)}, std::string{r.text(i, 1)},
                   std::string{r.text(i, 2)}, r.int64(i, 3)});
  return out;
}

std::vector<domain_stats> collect_stats(connection& conn) {
  return collect_stats(conn, stats_domains(conn));
}

} // namespace cmdbus::db
