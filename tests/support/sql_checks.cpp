#include "tests/support/sql_checks.hpp"

#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::test {

namespace {

/// Rows of pgmq.q_<queue> ("q") or pgmq.a_<queue> ("a").
int64_t table_rows(db::connection& c, const std::string& prefix,
                   const std::string& queue) {
  db::validate_queue_name(queue); // interpolated below
  return c.exec("SELECT count(*) FROM pgmq." + prefix + "_" + queue)
    .int64(0, 0);
}

} // namespace

// -- commands ----------------------------------------------------------------

std::string queue_of(const std::string& domain) {
  return db::command_queue(domain);
}

opt_str column(db::connection& c, const std::string& domain, const uuid& id,
               const std::string& col) {
  return scalar(c,
                "SELECT " + col
                  + "::text FROM commandbus.command WHERE domain = $1 AND "
                    "command_id = $2::uuid",
                domain, id.to_string());
}

opt_str status_of(db::connection& c, const std::string& domain,
                  const uuid& id) {
  return column(c, domain, id, "status");
}

int attempts_of(db::connection& c, const std::string& domain, const uuid& id) {
  auto x = column(c, domain, id, "attempts");
  return x ? std::stoi(*x) : -1;
}

bool has_status(db::connection& c, const std::string& domain, const uuid& id,
                const std::string& status) {
  return status_of(c, domain, id) == opt_str{status};
}

bool all_have_status(db::connection& c, const std::string& domain,
                     const std::vector<uuid>& ids, const std::string& status) {
  for (auto& id : ids)
    if (!has_status(c, domain, id, status))
      return false;
  return true;
}

int64_t count_status(db::connection& c, const std::string& domain,
                     const std::string& status) {
  return c
    .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
           "status = $2",
           domain, status)
    .int64(0, 0);
}

int64_t command_rows(db::connection& c, const std::string& domain) {
  return c
    .query("SELECT count(*) FROM commandbus.command WHERE domain = $1", domain)
    .int64(0, 0);
}

// -- audit -------------------------------------------------------------------

strings events(db::connection& c, const std::string& domain, const uuid& id) {
  auto r = c.query("SELECT event_type FROM commandbus.audit WHERE domain = $1 "
                   "AND command_id = $2::uuid ORDER BY ts, audit_id",
                   domain, id.to_string());
  strings out;
  for (int i = 0; i < r.rows(); ++i)
    out.emplace_back(r.text(i, 0));
  return out;
}

opt_str audit_detail(db::connection& c, const std::string& domain,
                     const uuid& id, const std::string& event,
                     const std::string& path, int nth) {
  return scalar(c,
                "SELECT details_json #>> $4::text[] FROM commandbus.audit "
                "WHERE domain = $1 AND command_id = $2::uuid AND event_type = "
                "$3 ORDER BY ts, audit_id LIMIT 1 OFFSET $5",
                domain, id.to_string(), event, path, nth);
}

int64_t count_events(db::connection& c, const std::string& domain,
                     const uuid& id, const std::string& event) {
  return c
    .query("SELECT count(*) FROM commandbus.audit WHERE domain = $1 AND "
           "command_id = $2::uuid AND event_type = $3",
           domain, id.to_string(), event)
    .int64(0, 0);
}

// -- queues ------------------------------------------------------------------

int64_t queue_rows(db::connection& c, const std::string& queue) {
  return table_rows(c, "q", queue);
}

int64_t archive_rows(db::connection& c, const std::string& queue) {
  return table_rows(c, "a", queue);
}

int64_t queue_length(db::connection& c, const std::string& queue) {
  if (c.query("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1", queue)
        .int64(0, 0)
      == 0)
    return 0;
  return queue_rows(c, queue);
}

bool archived(db::connection& c, const std::string& queue, int64_t msg_id) {
  db::validate_queue_name(queue);
  return c
           .query("SELECT count(*) FROM pgmq.a_" + queue + " WHERE msg_id = $1",
                  static_cast<long long>(msg_id))
           .int64(0, 0)
         == 1;
}

strings messages(db::connection& c, const std::string& queue) {
  db::validate_queue_name(queue);
  auto r = c.exec("SELECT message::text FROM pgmq.q_" + queue
                  + " ORDER BY msg_id");
  strings out;
  for (int i = 0; i < r.rows(); ++i)
    out.emplace_back(r.text(i, 0));
  return out;
}

bool vt_beyond(db::connection& c, const std::string& queue, int64_t msg_id,
               const std::string& interval) {
  db::validate_queue_name(queue);
  return scalar(c,
                "SELECT (vt > now() + $2::interval)::text FROM pgmq.q_" + queue
                  + " WHERE msg_id = $1",
                static_cast<long long>(msg_id), interval)
         == opt_str{"true"};
}

// -- JSON --------------------------------------------------------------------

opt_str jget(db::connection& c, const std::string& text,
             const std::string& path) {
  return scalar(c, "SELECT $1::jsonb #>> $2::text[]", text, path);
}

bool jeq(db::connection& c, const std::string& text, const std::string& path,
         const std::string& expected) {
  return scalar(c, "SELECT (($1::jsonb #> $2::text[]) = $3::jsonb)::text",
                text, path, expected)
         == opt_str{"true"};
}

bool jhas(db::connection& c, const std::string& text, const std::string& key) {
  return scalar(c, "SELECT ($1::jsonb ? $2)::text", text, key)
         == opt_str{"true"};
}

} // namespace cmdbus::test
