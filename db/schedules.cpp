// Recurring schedules: definitions, the operator's changes and the firing of
// due slots (see schedules.hpp and docs/scheduling.md, "Recurring
// schedules").

#include "cmdbus/db/schedules.hpp"

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/prepared_command.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/rows.hpp"
#include "cmdbus/db/send_statement.hpp"
#include "cmdbus/db/text_format.hpp"
#include "cmdbus/db/transaction.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::schedules {

namespace {

/// max_attempts of a schedule that sets none (command_bus's default).
constexpr int default_max_attempts = 3;

/// How long a firing transaction may sit idle between its statements.
constexpr std::chrono::milliseconds firing_idle_limit{5000};

/// Most slots of one schedule sent by one firing when it catches up (the
/// rest follows at the next).
constexpr size_t max_catch_up = 1000;

constexpr const char* columns
  = "id, domain, name, command_type, data::text, reply_to, max_attempts, "
    "priority, cron, time_zone, interval_ms, anchor, next_slot, paused, "
    "misfire, created_at, updated_at, last_slot, last_command_id, "
    "fired_count";

schedule to_schedule(const db::result& r, int i) {
  schedule s;
  s.id = db::uuid_at(r, i, 0);
  s.def.domain = std::string{r.text(i, 1)};
  s.def.name = std::string{r.text(i, 2)};
  s.def.command_type = std::string{r.text(i, 3)};
  s.def.data = json::parse(r.text(i, 4));
  s.def.reply_to = r.opt_text(i, 5);
  if (!r.is_null(i, 6))
    s.def.max_attempts = db::int_at(r, i, 6);
  if (!r.is_null(i, 7))
    s.def.priority = db::int_at(r, i, 7);
  s.def.cron = r.opt_text(i, 8);
  if (!r.is_null(i, 9))
    s.def.time_zone = std::string{r.text(i, 9)};
  if (!r.is_null(i, 10))
    s.def.every = std::chrono::milliseconds{r.int64(i, 10)};
  s.anchor = db::opt_time_at(r, i, 11);
  s.next_slot = db::time_at(r, i, 12);
  s.paused = r.boolean(i, 13);
  s.def.misfire
    = parse_misfire_policy(r.text(i, 14)).value_or(misfire_policy::run_once);
  s.created_at = db::time_at(r, i, 15);
  s.updated_at = db::time_at(r, i, 16);
  s.last_slot = db::opt_time_at(r, i, 17);
  s.last_command_id = db::opt_uuid_at(r, i, 18);
  s.fired_count = r.int64(i, 19);
  return s;
}

schedule_timing timing_of(const schedule& s) {
  if (s.def.cron)
    return schedule_timing::cron(*s.def.cron, s.def.time_zone);
  return schedule_timing::interval(*s.def.every,
                                   s.anchor.value_or(s.created_at));
}

send_request request_of(const schedule& s) {
  send_request req;
  req.domain = s.def.domain;
  req.command_type = s.def.command_type;
  req.data = s.def.data;
  req.reply_to = s.def.reply_to;
  req.max_attempts = s.def.max_attempts;
  req.priority = s.def.priority;
  return req;
}

void ensure_queues(db::connection& conn, const definition& d) {
  db::create_queue(conn, db::command_queue(d.domain));
  if (d.reply_to)
    db::create_queue(conn, *d.reply_to);
}

db::param millis(const std::optional<std::chrono::milliseconds>& d) {
  if (!d)
    return std::nullopt;
  return std::to_string(d->count());
}

timestamp server_now(db::connection& conn) {
  return db::time_at(conn.exec("SELECT clock_timestamp()"), 0, 0);
}

} // namespace

std::string_view to_string(misfire_policy x) noexcept {
  return x == misfire_policy::skip ? "skip" : "run_once";
}

std::optional<misfire_policy>
parse_misfire_policy(std::string_view x) noexcept {
  if (x == "run_once")
    return misfire_policy::run_once;
  if (x == "skip")
    return misfire_policy::skip;
  return std::nullopt;
}

schedule_timing validate(const definition& d) {
  db::command_queue(d.domain);
  if (d.reply_to)
    db::validate_queue_name(*d.reply_to);
  if (d.name.empty())
    throw db::invalid_argument("a schedule needs a name");
  if (d.command_type.empty())
    throw db::invalid_argument("a schedule needs a command type");
  if (!d.data.is_object())
    throw db::invalid_argument("a schedule's data must be a JSON object");
  if (d.max_attempts && *d.max_attempts < 0)
    throw db::invalid_argument("max_attempts must not be negative");
  if (d.cron.has_value() == d.every.has_value())
    throw db::invalid_argument(
      "a schedule needs either a cron expression or an interval");
  if (d.cron)
    return schedule_timing::cron(*d.cron, d.time_zone);
  return schedule_timing::interval(*d.every, timestamp{});
}

add_result add(db::connection& conn, const definition& d) {
  auto timing = validate(d);
  if (!conn.in_transaction())
    ensure_queues(conn, d);
  auto now = server_now(conn);
  // Interval schedules count from now; the anchor of an existing schedule
  // whose timing is unchanged stays.
  std::optional<timestamp> anchor;
  if (!d.cron) {
    anchor = now;
    timing = schedule_timing::interval(*d.every, now);
  }
  auto first = timing.next_after(now);
  auto cron_text = d.cron ? std::optional<std::string>{timing.expr().text()}
                          : std::nullopt;
  auto zone = d.cron ? std::optional<std::string>{d.time_zone} : std::nullopt;
  static const std::string sql = std::string{
    "WITH up AS (INSERT INTO commandbus.cmdbus_schedule AS s "
    "(id, domain, name, command_type, data, reply_to, "
    "max_attempts, priority, cron, time_zone, interval_ms, "
    "anchor, next_slot, misfire) VALUES ($1::uuid, $2, $3, $4, "
    "$5::jsonb, $6, $7::int, $8::int, $9, $10, $11::bigint, "
    "$12::timestamptz, $13::timestamptz, $14) "
    "ON CONFLICT (domain, name) DO UPDATE SET "
    "command_type = EXCLUDED.command_type, data = EXCLUDED.data, "
    "reply_to = EXCLUDED.reply_to, "
    "max_attempts = EXCLUDED.max_attempts, "
    "priority = EXCLUDED.priority, misfire = EXCLUDED.misfire, "
    "cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone, "
    "interval_ms = EXCLUDED.interval_ms, "
    "anchor = CASE WHEN (s.cron, s.time_zone, s.interval_ms) IS "
    "NOT DISTINCT FROM (EXCLUDED.cron, EXCLUDED.time_zone, "
    "EXCLUDED.interval_ms) THEN s.anchor ELSE EXCLUDED.anchor "
    "END, "
    "next_slot = CASE WHEN (s.cron, s.time_zone, s.interval_ms) "
    "IS NOT DISTINCT FROM (EXCLUDED.cron, EXCLUDED.time_zone, "
    "EXCLUDED.interval_ms) THEN s.next_slot ELSE "
    "EXCLUDED.next_slot END, "
    "updated_at = now() "
    "WHERE (s.command_type, s.data, s.reply_to, s.max_attempts, "
    "s.priority, s.misfire, s.cron, s.time_zone, s.interval_ms) "
    "IS DISTINCT FROM (EXCLUDED.command_type, EXCLUDED.data, "
    "EXCLUDED.reply_to, EXCLUDED.max_attempts, "
    "EXCLUDED.priority, EXCLUDED.misfire, EXCLUDED.cron, "
    "EXCLUDED.time_zone, EXCLUDED.interval_ms) "
    "RETURNING (xmax = 0) AS created) "
    "SELECT created FROM up"};
  // What the timing was before, to say whether it changed.
  auto before = get(conn, d.domain, d.name);
  auto r = conn.exec(
    sql, {uuid::random().to_string(), d.domain, d.name, d.command_type,
          d.data.text(), d.reply_to, db::to_param(d.max_attempts),
          db::to_param(d.priority), cron_text, zone, millis(d.every),
          anchor ? db::param{format_timestamp(*anchor)} : std::nullopt,
          format_timestamp(first), std::string{to_string(d.misfire)}});
  add_result out;
  out.changed = r.rows() > 0;
  out.created = out.changed && r.boolean(0, 0);
  if (out.created)
    out.timing_changed = true;
  else if (out.changed && before)
    out.timing_changed = before->def.cron != cron_text
                         || (before->def.cron
                             && before->def.time_zone != d.time_zone)
                         || before->def.every != d.every;
  auto stored = get(conn, d.domain, d.name);
  if (!stored)
    throw db::error(db::errc::other, "",
                    "schedule " + d.domain + "/" + d.name
                      + " vanished while it was being defined");
  out.stored = std::move(*stored);
  return out;
}

std::optional<schedule> get(db::connection& conn, const std::string& domain,
                            const std::string& name) {
  auto r = conn.query(std::string{"SELECT "} + columns
                        + " FROM commandbus.cmdbus_schedule WHERE domain = $1 "
                          "AND name = $2",
                      domain, name);
  if (r.rows() == 0)
    return std::nullopt;
  return to_schedule(r, 0);
}

std::vector<schedule> list(db::connection& conn,
                           const std::optional<std::string>& domain) {
  auto r = conn.query(std::string{"SELECT "} + columns
                        + " FROM commandbus.cmdbus_schedule WHERE $1::text "
                          "IS NULL OR domain = $1 ORDER BY domain, name",
                      domain);
  std::vector<schedule> out;
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(to_schedule(r, i));
  return out;
}

bool pause(db::connection& conn, const std::string& domain,
           const std::string& name) {
  return conn
           .query("UPDATE commandbus.cmdbus_schedule SET paused = true, "
                  "updated_at = now() WHERE domain = $1 AND name = $2",
                  domain, name)
           .affected_rows()
         > 0;
}

bool resume(db::connection& conn, const std::string& domain,
            const std::string& name) {
  return conn
           .query("UPDATE commandbus.cmdbus_schedule SET paused = false, "
                  "updated_at = now() WHERE domain = $1 AND name = $2",
                  domain, name)
           .affected_rows()
         > 0;
}

bool remove(db::connection& conn, const std::string& domain,
            const std::string& name) {
  return conn
           .query("DELETE FROM commandbus.cmdbus_schedule WHERE domain = $1 "
                  "AND name = $2",
                  domain, name)
           .affected_rows()
         > 0;
}

send_result trigger(db::connection& conn, const std::string& domain,
                    const std::string& name) {
  auto s = get(conn, domain, name);
  if (!s)
    throw command_bus_error("no schedule " + name + " in domain " + domain);
  auto req = request_of(*s);
  req.command_id = uuid::random();
  auto p = db::prepare(req, default_max_attempts);
  if (!conn.in_transaction())
    ensure_queues(conn, s->def);
  return db::send_one(p, conn);
}

fire_result fire_due(db::connection& conn, const std::string& domain, int limit,
                     std::chrono::milliseconds misfire_grace) {
  db::command_queue(domain);
  if (conn.in_transaction())
    throw db::invalid_argument(
      "fire_due runs its own transaction: none may be open");
  return db::in_transaction(conn, [&](db::connection& c) {
    fire_result out;
    // A firing client that stops between its statements (SIGSTOP, a hung
    // host) holds its schedules' rows: the server ends its transaction
    // after this long, so that other workers fire them.
    c.query("SELECT set_config('idle_in_transaction_session_timeout', $1, "
            "true)",
            std::to_string(firing_idle_limit.count()));
    auto r = c.query(std::string{"SELECT "} + columns
                       + ", clock_timestamp() FROM "
                         "commandbus.cmdbus_schedule WHERE domain = $1 AND NOT "
                         "paused AND next_slot <= clock_timestamp() ORDER BY "
                         "next_slot LIMIT $2 FOR UPDATE SKIP LOCKED",
                     domain, std::max(0, limit));
    out.claimed = r.rows();
    if (r.rows() == 0)
      return out;
    // The queue may have been dropped since the schedule was defined.
    db::create_queue(c, db::command_queue(domain));
    for (int i = 0; i < r.rows(); ++i) {
      auto s = to_schedule(r, i);
      auto now = db::time_at(r, i, 20);
      // The slots to send, the next slot afterwards, and the missed slots
      // passed over without a command.
      std::vector<timestamp> due;
      timestamp next;
      int64_t missed = 0;
      try {
        auto timing = timing_of(s);
        auto slot = s.next_slot;
        auto following = timing.next_after(slot);
        if (following <= now && now - slot >= misfire_grace) {
          // A misfire: the slot after it is due too, and it is more than
          // the grace late. The policy decides over every slot up to now.
          auto newest = timing.newest_until(slot, now);
          for (auto t = slot; t < newest; t = timing.next_after(t))
            ++missed;
          if (s.def.misfire == misfire_policy::run_once)
            due.push_back(newest);
          else
            ++missed;
          next = timing.next_after(newest);
        } else {
          // Late by less than the grace: every due slot, in order.
          due.push_back(slot);
          auto t = following;
          while (t <= now && due.size() < max_catch_up) {
            due.push_back(t);
            t = timing.next_after(t);
          }
          next = t;
        }
      } catch (const cron_error& e) {
        c.query("UPDATE commandbus.cmdbus_schedule SET paused = true, "
                "updated_at = now() WHERE id = $1::uuid",
                s.id.to_string());
        log::logger()->error("schedule {}/{}: its timing cannot be evaluated "
                             "({}); paused",
                             s.def.domain, s.def.name, log::one_line(e.what()));
        out.broken.emplace_back(s.def.name, e.what());
        continue;
      }
      if (due.empty()) {
        // Skip: every missed slot passes without a command.
        fired_slot f;
        f.schedule_id = s.id;
        f.name = s.def.name;
        f.slot = next;
        f.missed = missed;
        out.slots.push_back(std::move(f));
      }
      std::optional<timestamp> last;
      std::optional<uuid> last_id;
      int sent = 0;
      for (auto slot : due) {
        fired_slot f;
        f.schedule_id = s.id;
        f.name = s.def.name;
        f.slot = slot;
        f.lateness = now - slot;
        f.missed = missed;
        missed = 0;
        auto ids = c.query(
          "SELECT command_id, correlation_id, already_sent FROM "
          "commandbus.cmdbus_schedule_slot_ids($1, $2::uuid, "
          "$3::timestamptz)",
          domain, s.id.to_string(), format_timestamp(slot));
        f.command_id = db::uuid_at(ids, 0, 0);
        f.already_sent = ids.boolean(0, 2);
        if (!f.already_sent) {
          auto req = request_of(s);
          req.command_id = f.command_id;
          req.correlation_id = db::uuid_at(ids, 0, 1);
          auto p = db::prepare(req, default_max_attempts);
          if (p.reply_to)
            db::create_queue(c, *p.reply_to);
          db::send_one(p, c);
          ++sent;
        }
        last = slot;
        last_id = f.command_id;
        out.slots.push_back(std::move(f));
      }
      c.query("UPDATE commandbus.cmdbus_schedule SET next_slot = "
              "$2::timestamptz, last_slot = COALESCE($3::timestamptz, "
              "last_slot), last_command_id = COALESCE($4::uuid, "
              "last_command_id), fired_count = fired_count + $5::int "
              "WHERE id = $1::uuid",
              s.id.to_string(), format_timestamp(next),
              last ? db::param{format_timestamp(*last)} : std::nullopt,
              last_id ? db::param{last_id->to_string()} : std::nullopt, sent);
    }
    return out;
  });
}

std::optional<std::chrono::microseconds>
until_next_slot(db::connection& conn, const std::string& domain) {
  auto r = conn.query(
    "SELECT (extract(epoch FROM min(next_slot) - clock_timestamp()) * "
    "1000000)::bigint FROM commandbus.cmdbus_schedule WHERE domain = $1 AND "
    "NOT paused",
    domain);
  if (r.rows() == 0 || r.is_null(0, 0))
    return std::nullopt;
  return std::chrono::microseconds{r.int64(0, 0)};
}

} // namespace cmdbus::schedules
