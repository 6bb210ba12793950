#include "db/command_bus.hpp"

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "db/queue_name.hpp"
#include "model/wire.hpp"

namespace cmdbus {

namespace {

// Raised by cmdbus_send_commands (sql/commandbus/V003__cmdbus_send.sql);
// the bus does not call cmdbus_send_command, the one that raises CB001.
constexpr const char* sqlstate_batch_not_found = "CB002";
constexpr const char* sqlstate_unique_violation = "23505";
// The unique index on (domain, command_id) of the reference schema.
constexpr const char* command_key = "uq_command_domain_cmdid";

constexpr const char* command_columns =
  "domain, command_id, command_type, status, attempts, max_attempts, msg_id, "
  "correlation_id, reply_queue, last_error_type, last_error_code, "
  "last_error_msg, created_at, updated_at, batch_id";

constexpr const char* batch_columns =
  "domain, batch_id, name, custom_data, status, batch_type, total_count, "
  "completed_count, failed_count, canceled_count, in_troubleshooting_count, "
  "created_at, started_at, completed_at";

// -- row decoding ------------------------------------------------------------

uuid uuid_at(const db::result& r, int row, int col) {
  auto x = uuid::parse(r.text(row, col));
  if (!x)
    throw command_bus_error("invalid UUID in column " + r.column_name(col));
  return *x;
}

std::optional<uuid> opt_uuid_at(const db::result& r, int row, int col) {
  if (r.is_null(row, col))
    return std::nullopt;
  return uuid_at(r, row, col);
}

timestamp time_at(const db::result& r, int row, int col) {
  auto t = parse_timestamp(r.text(row, col));
  if (!t)
    throw command_bus_error("invalid timestamp in column "
                            + r.column_name(col));
  return *t;
}

std::optional<timestamp> opt_time_at(const db::result& r, int row, int col) {
  if (r.is_null(row, col))
    return std::nullopt;
  return time_at(r, row, col);
}

std::optional<json> opt_json_at(const db::result& r, int row, int col) {
  if (r.is_null(row, col))
    return std::nullopt;
  return json::parse(r.text(row, col));
}

int int_at(const db::result& r, int row, int col) {
  return static_cast<int>(r.int64(row, col));
}

command_metadata to_command_metadata(const db::result& r, int i) {
  command_metadata m;
  m.domain = std::string{r.text(i, 0)};
  m.command_id = uuid_at(r, i, 1);
  m.command_type = std::string{r.text(i, 2)};
  auto status = parse_command_status(r.text(i, 3));
  if (!status)
    throw command_bus_error("unknown command status "
                            + std::string{r.text(i, 3)});
  m.status = *status;
  m.attempts = int_at(r, i, 4);
  m.max_attempts = int_at(r, i, 5);
  if (!r.is_null(i, 6))
    m.msg_id = r.int64(i, 6);
  m.correlation_id = opt_uuid_at(r, i, 7);
  if (!r.text(i, 8).empty())
    m.reply_to = std::string{r.text(i, 8)};
  m.last_error_type = r.opt_text(i, 9);
  m.last_error_code = r.opt_text(i, 10);
  m.last_error_msg = r.opt_text(i, 11);
  m.created_at = time_at(r, i, 12);
  m.updated_at = time_at(r, i, 13);
  m.batch_id = opt_uuid_at(r, i, 14);
  return m;
}

batch_metadata to_batch_metadata(const db::result& r, int i) {
  batch_metadata b;
  b.domain = std::string{r.text(i, 0)};
  b.batch_id = uuid_at(r, i, 1);
  b.name = r.opt_text(i, 2);
  b.custom_data = opt_json_at(r, i, 3);
  auto status = parse_batch_status(r.text(i, 4));
  if (!status)
    throw command_bus_error("unknown batch status "
                            + std::string{r.text(i, 4)});
  b.status = *status;
  b.batch_type = std::string{r.text(i, 5)};
  b.total_count = int_at(r, i, 6);
  b.completed_count = int_at(r, i, 7);
  b.failed_count = int_at(r, i, 8);
  b.canceled_count = int_at(r, i, 9);
  b.in_troubleshooting_count = int_at(r, i, 10);
  b.created_at = time_at(r, i, 11);
  b.started_at = opt_time_at(r, i, 12);
  b.completed_at = opt_time_at(r, i, 13);
  return b;
}

std::vector<command_metadata> to_commands(const db::result& r) {
  std::vector<command_metadata> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(to_command_metadata(r, i));
  return out;
}

// Rolls back the caller-less transaction of a failed pipeline.
void rollback_if_open(db::connection& conn) noexcept {
  if (!conn.is_open() || !conn.in_transaction())
    return;
  try {
    conn.exec("ROLLBACK");
  } catch (const std::exception& e) {
    spdlog::warn("rollback on {} failed: {}", conn.target(), e.what());
  }
}

} // namespace

// -- preparation -------------------------------------------------------------

struct command_bus::prepared {
  std::string domain;
  std::string queue;
  std::string command_type;
  uuid command_id;
  std::string message;
  uuid correlation_id;
  std::optional<std::string> reply_to;
  int max_attempts = 0;
  std::optional<uuid> batch_id;
};

command_bus::command_bus(db::pool& pool, command_bus_options opts)
  : pool_(pool), opts_(opts) {
  if (opts_.chunk_size == 0)
    opts_.chunk_size = 1;
}

int command_bus::effective_max_attempts(const std::optional<int>& x) const {
  return x && *x > 0 ? *x : opts_.default_max_attempts;
}

namespace {

// Throws for a request that cannot be sent; returns its command queue.
std::string validated_queue(const send_request& req) {
  auto queue = db::command_queue(req.domain);
  if (req.reply_to)
    db::validate_queue_name(*req.reply_to);
  if (req.command_type.empty())
    throw command_bus_error("command_type must not be empty");
  if (!req.data.is_object())
    throw command_bus_error("command data must be a JSON object");
  return queue;
}

} // namespace

command_bus::prepared command_bus::prepare(const send_request& req) {
  prepared p;
  p.queue = validated_queue(req);
  p.domain = req.domain;
  p.command_type = req.command_type;
  p.command_id = req.command_id;
  p.correlation_id = req.correlation_id ? *req.correlation_id : uuid::random();
  p.reply_to = req.reply_to;
  p.max_attempts = effective_max_attempts(req.max_attempts);
  p.batch_id = req.batch_id;
  command msg;
  msg.domain = req.domain;
  msg.command_type = req.command_type;
  msg.command_id = req.command_id;
  msg.data = req.data;
  msg.correlation_id = p.correlation_id;
  msg.reply_to = req.reply_to;
  p.message = wire::encode_command(msg);
  return p;
}

void command_bus::ensure_queue(const std::string& queue) {
  db::validate_queue_name(queue);
  {
    std::lock_guard<std::mutex> guard{queues_mtx_};
    if (queues_.count(queue) > 0)
      return;
  }
  // Created outside any caller transaction, so that a caller's rollback
  // cannot undo a queue this bus believes exists.
  auto conn = pool_.acquire();
  conn->query("SELECT pgmq.create($1)", queue);
  conn->take_notices();
  std::lock_guard<std::mutex> guard{queues_mtx_};
  queues_.insert(queue);
}

void command_bus::ensure_queues(const std::vector<prepared>& items) {
  std::set<std::string> wanted;
  for (auto& p : items) {
    wanted.insert(p.queue);
    if (p.reply_to)
      wanted.insert(*p.reply_to);
  }
  for (auto& q : wanted)
    ensure_queue(q);
}

std::optional<uuid> command_bus::first_existing(const std::string& domain,
                                                const std::vector<uuid>& ids,
                                                db::connection* conn) {
  std::vector<std::string> texts;
  for (auto& id : ids)
    texts.push_back(id.to_string());
  auto sql = "SELECT command_id FROM commandbus.command WHERE domain = $1 AND "
             "command_id = ANY($2::uuid[]) LIMIT 1";
  auto find = [&](db::connection& c) {
    return c.query(sql, domain, db::array_literal(texts));
  };
  auto r = [&] {
    if (conn != nullptr)
      return find(*conn);
    auto lease = pool_.acquire();
    return find(*lease);
  }();
  if (r.rows() == 0)
    return std::nullopt;
  return uuid_at(r, 0, 0);
}

// -- send --------------------------------------------------------------------

// Concurrent `send` calls are combined ("group commit" in the client): each
// call queues its prepared command; whoever finds a free leader slot takes
// everything queued and sends it in one transaction, then wakes the others.
// A failing group (say, one duplicate) is retried command by command, so
// every caller gets exactly the outcome of sending alone.
struct command_bus::pending_send {
  prepared item;
  bool done = false;
  send_result result;
  std::exception_ptr error;
};

void command_bus::run_group(
  const std::vector<std::shared_ptr<pending_send>>& group) noexcept {
  auto send_each = [&] {
    for (auto& slot : group) {
      try {
        auto conn = pool_.acquire();
        slot->result = send_one(slot->item, *conn);
      } catch (...) {
        slot->error = std::current_exception();
      }
    }
  };
  auto fail_all = [&] {
    for (auto& slot : group)
      slot->error = std::current_exception();
  };
  if (group.size() == 1) {
    send_each();
    return;
  }
  try {
    auto conn = pool_.acquire();
    // One transaction of single-command statements in one round trip.
    std::vector<db::connection::statement> sts;
    sts.reserve(group.size() + 2);
    sts.push_back({"BEGIN", {}});
    for (auto& slot : group)
      sts.push_back(send_one_statement(slot->item));
    sts.push_back({"COMMIT", {}});
    std::vector<db::result> results;
    try {
      results = conn->pipeline(sts);
    } catch (...) {
      rollback_if_open(*conn);
      throw;
    }
    // A send with an unknown batch wrote nothing; the others committed.
    for (size_t i = 0; i < group.size(); ++i) {
      try {
        group[i]->result = sent(group[i]->item, results[i + 1]);
      } catch (const batch_not_found_error&) {
        group[i]->error = std::current_exception();
      }
    }
  } catch (const db::error& e) {
    // A broken connection fails everyone (retrying would only repeat it);
    // anything else, e.g. one duplicate, is retried command by command so
    // that each caller gets its own outcome.
    if (e.code() == db::errc::connection)
      fail_all();
    else
      send_each();
  } catch (...) {
    fail_all();
  }
}

send_result command_bus::send(const send_request& req) {
  auto slot = std::make_shared<pending_send>();
  slot->item = prepare(req);
  ensure_queues({slot->item});
  std::unique_lock<std::mutex> lock{combine_mtx_};
  combine_queue_.push_back(slot);
  while (!slot->done) {
    // The first transaction takes whatever is queued; a further one only
    // starts for two or more, so that concurrent callers combine into fewer
    // transactions (each commit with a NOTIFY waits for the previous one)
    // while a lone caller never waits for others.
    if (leaders_ == 0 ? !combine_queue_.empty()
                      : leaders_ < opts_.max_concurrent_sends
                          && combine_queue_.size() >= 2) {
      ++leaders_;
      std::vector<std::shared_ptr<pending_send>> group;
      while (!combine_queue_.empty() && group.size() < opts_.chunk_size) {
        group.push_back(std::move(combine_queue_.front()));
        combine_queue_.pop_front();
      }
      lock.unlock();
      run_group(group);
      lock.lock();
      for (auto& g : group)
        g->done = true;
      --leaders_;
      combine_cv_.notify_all();
    } else {
      combine_cv_.wait(lock);
    }
  }
  lock.unlock();
  if (slot->error)
    std::rethrow_exception(slot->error);
  return slot->result;
}

send_result command_bus::send(const send_request& req, db::connection& conn) {
  auto p = prepare(req);
  ensure_queues({p});
  return send_one(p, conn);
}

// One send as one statement, prepared once per queue and connection (the
// connection keeps its plan): the message, the PENDING row, the SENT audit
// and NOTIFY, the writes of cmdbus_send_command, without its PL/pgSQL call
// and its duplicate pre-check: the unique index rejects a duplicate (23505)
// and the statement rolls back with the message. The
// message is inserted into the queue's table as pgmq.send(queue, msg, 0)
// does (PGMQ 1.5: `vt` = clock_timestamp(), no headers; the table named by
// format_table_name), but with a cached plan instead of pgmq.send's dynamic
// SQL, which is planned anew on every call. With a batch id every write
// depends on the batch existing: for an unknown batch the statement writes
// nothing and returns no row (where cmdbus_send_command raises CB002).
db::connection::statement
command_bus::send_one_statement(const prepared& p) {
  // p.queue was validated ([A-Za-z0-9_], at most 47 characters), so the
  // statement name fits in 63 bytes and the table name needs no escaping.
  auto sql = "WITH s AS (INSERT INTO pgmq.\"" + db::queue_table(p.queue)
             + "\" (vt, message) SELECT clock_timestamp(), $5::jsonb "
               "WHERE $9::uuid IS NULL OR EXISTS (SELECT 1 FROM "
               "commandbus.batch b WHERE b.domain = $1 AND b.batch_id = "
               "$9::uuid) RETURNING msg_id AS id), "
               "c AS (INSERT INTO commandbus.command (domain, queue_name, "
               "msg_id, command_id, command_type, status, attempts, "
               "max_attempts, reply_queue, correlation_id, batch_id) SELECT "
               "$1, $2, s.id, $3::uuid, $4, 'PENDING', 0, $8::int, "
               "COALESCE($7, ''), $6::uuid, $9::uuid FROM s RETURNING msg_id), "
               "a AS (INSERT INTO commandbus.audit (domain, command_id, "
               "event_type, details_json) SELECT $1, $3::uuid, 'SENT', "
               "jsonb_build_object('command_type', $4::text, "
               "'correlation_id', $6::uuid, 'reply_to', $7::text, 'msg_id', "
               "c.msg_id, 'batch_id', $9::uuid) FROM c) "
               "SELECT c.msg_id, pg_notify(lower('pgmq_notify_' || $2), '') "
               "FROM c";
  return {std::move(sql),
          {p.domain, p.queue, p.command_id.to_string(), p.command_type,
           p.message, p.correlation_id.to_string(), p.reply_to,
           db::to_param(p.max_attempts),
           p.batch_id ? db::param{p.batch_id->to_string()} : std::nullopt},
          "cmdbus_send1_" + p.queue};
}

// The outcome of one send statement's result: its msg_id, or the unknown
// batch that made it write nothing.
send_result command_bus::sent(const prepared& p, const db::result& r) {
  if (r.rows() == 0)
    throw batch_not_found_error(p.domain, p.batch_id ? *p.batch_id : uuid{});
  return {p.command_id, r.int64(0, 0)};
}

send_result command_bus::send_one(const prepared& p, db::connection& conn) {
  try {
    auto st = send_one_statement(p);
    return sent(p, conn.exec_prepared(st.name, st.sql, st.params));
  } catch (const db::error& e) {
    if (e.sqlstate() == sqlstate_unique_violation
        && e.constraint() == command_key)
      throw duplicate_command_error(p.domain, p.command_id);
    throw;
  }
}

// -- chunks ------------------------------------------------------------------

// A chunk's commands grouped by domain (one queue each), with their input
// positions.
struct command_bus::chunk {
  const std::vector<prepared>& items;
  std::map<std::string, std::vector<size_t>> by_domain;
  std::vector<const std::vector<size_t>*> groups;

  explicit chunk(const std::vector<prepared>& xs) : items(xs) {
    for (size_t i = 0; i < items.size(); ++i)
      by_domain[items[i].domain].push_back(i);
    for (auto& entry : by_domain)
      groups.push_back(&entry.second);
  }

  const prepared& first_of(size_t g) const {
    return items[groups[g]->front()];
  }
};

std::vector<send_result>
command_bus::send_chunk(const std::vector<prepared>& items,
                        db::connection& conn, bool own_transaction) {
  // Outside a transaction block every statement would commit on its own:
  // a chunk is one transaction whoever opened it.
  own_transaction = own_transaction || !conn.in_transaction();
  chunk c{items};
  try {
    return items.size() >= opts_.copy_threshold
               ? copy_chunk(c, conn, own_transaction)
               : insert_chunk(c, conn, own_transaction);
  } catch (const db::error& e) {
    if (own_transaction)
      rollback_if_open(conn);
    // Name the domain (and command) the failure is about; the statement
    // index, when known, tells the group.
    auto g = e.statement_index() - (own_transaction ? 1 : 0);
    const auto* idx = g >= 0 && static_cast<size_t>(g) < c.groups.size()
                          ? c.groups[static_cast<size_t>(g)]
                          : nullptr;
    const auto& domain = items[idx != nullptr ? idx->front() : 0].domain;
    if (e.sqlstate() == sqlstate_batch_not_found) {
      auto id = uuid::parse(e.detail());
      throw batch_not_found_error(domain, id ? *id : uuid{});
    }
    if (e.sqlstate() == sqlstate_unique_violation
        && e.constraint() == command_key) {
      // A concurrent send won the race for one of these ids: find it, in
      // the failing group first. After our own rollback the connection is
      // free for that (a pool of one has no other); in a caller's failed
      // transaction, a pooled one looks.
      auto* lookup = own_transaction && conn.is_open() ? &conn : nullptr;
      auto groups = c.groups;
      if (idx != nullptr)
        groups.insert(groups.begin(), idx);
      for (auto* group : groups) {
        std::vector<uuid> ids;
        for (auto i : *group)
          ids.push_back(items[i].command_id);
        const auto& d = items[group->front()].domain;
        if (auto dup = first_existing(d, ids, lookup))
          throw duplicate_command_error(d, *dup);
      }
      throw duplicate_command_error(
          domain, items[idx != nullptr ? idx->front() : 0].command_id);
    }
    throw;
  } catch (...) {
    if (own_transaction)
      rollback_if_open(conn);
    throw;
  }
}

// One cmdbus_send_commands statement per domain, all in one round trip:
// the cheapest for small chunks.
std::vector<send_result> command_bus::insert_chunk(const chunk& c,
                                                   db::connection& conn,
                                                   bool own_transaction) {
  std::vector<db::connection::statement> statements;
  if (own_transaction)
    statements.push_back({"BEGIN", {}});
  for (auto* idx : c.groups) {
    std::vector<std::string> ids, types, messages, correlations;
    std::vector<std::optional<std::string>> reply_tos, batch_ids;
    std::vector<int64_t> max_attempts;
    for (auto i : *idx) {
      auto& p = c.items[i];
      ids.push_back(p.command_id.to_string());
      types.push_back(p.command_type);
      messages.push_back(p.message);
      correlations.push_back(p.correlation_id.to_string());
      reply_tos.push_back(p.reply_to);
      max_attempts.push_back(p.max_attempts);
      batch_ids.push_back(p.batch_id ? std::optional<std::string>{
                                         p.batch_id->to_string()}
                                     : std::nullopt);
    }
    statements.push_back(
        {"SELECT command_id, msg_id FROM commandbus.cmdbus_send_commands("
         "$1, $2, $3::uuid[], $4::text[], $5::jsonb[], $6::uuid[], "
         "$7::text[], $8::int[], $9::uuid[])",
         {db::to_param(c.items[idx->front()].domain),
          db::to_param(c.items[idx->front()].queue), db::array_literal(ids),
          db::array_literal(types), db::array_literal(messages),
          db::array_literal(correlations), db::array_literal(reply_tos),
          db::array_literal(max_attempts), db::array_literal(batch_ids)},
         "cmdbus_send_commands"});
  }
  if (own_transaction)
    statements.push_back({"COMMIT", {}});
  auto results = conn.pipeline(statements);
  std::vector<send_result> out(c.items.size());
  size_t first = own_transaction ? 1 : 0;
  for (size_t g = 0; g < c.groups.size(); ++g) {
    auto& idx = *c.groups[g];
    auto& r = results[first + g];
    if (static_cast<size_t>(r.rows()) != idx.size())
      throw command_bus_error("send_batch: unexpected result size");
    for (size_t k = 0; k < idx.size(); ++k)
      out[idx[k]] = {uuid_at(r, static_cast<int>(k), 0),
                     r.int64(static_cast<int>(k), 1)};
  }
  return out;
}

// The same writes with COPY, for large chunks: COPY inserts heap rows in
// multi-row batches (fewer WAL records) and parses no arrays, which took
// about a fifth of the server's time per command. The messages' msg_ids are
// drawn from each queue's identity sequence first, so that command rows and
// audits can name them; COPY writes given identity values as INSERT ...
// OVERRIDING SYSTEM VALUE would. The rows are those of
// pgmq.send_batch(queue, msgs, 0) and cmdbus_send_commands: vt is the
// server's clock_timestamp() at reservation, headers NULL. COPY cannot run
// in a pipeline, so a chunk takes five round trips: about 0.3 ms, which
// pays off from about 60 commands on (copy_threshold).
std::vector<send_result> command_bus::copy_chunk(const chunk& c,
                                                 db::connection& conn,
                                                 bool own_transaction) {
  // Round trip 1: BEGIN, per domain the msg_id reservation and the batch
  // check (statement index - BEGIN = group, as for insert_chunk).
  std::vector<db::connection::statement> first;
  if (own_transaction)
    first.push_back({"BEGIN", {}});
  for (size_t g = 0; g < c.groups.size(); ++g)
    first.push_back(
        {"SELECT nextval(s.seq), s.now FROM (SELECT "
         "pg_get_serial_sequence($1, 'msg_id')::regclass AS seq, "
         "clock_timestamp() AS now OFFSET 0) AS s, generate_series(1, $2::int)",
         {"pgmq.\"" + db::queue_table(c.first_of(g).queue) + "\"",
          db::to_param(c.groups[g]->size())},
         "cmdbus_reserve_msg_ids"});
  std::vector<std::pair<size_t, size_t>> batch_checks; // (group, statement)
  for (size_t g = 0; g < c.groups.size(); ++g) {
    std::vector<std::string> batch_ids;
    for (auto i : *c.groups[g])
      if (c.items[i].batch_id)
        batch_ids.push_back(c.items[i].batch_id->to_string());
    if (batch_ids.empty())
      continue;
    batch_checks.emplace_back(g, first.size());
    first.push_back(
        {"SELECT x.id FROM unnest($2::uuid[]) AS x(id) WHERE NOT EXISTS "
         "(SELECT 1 FROM commandbus.batch b WHERE b.domain = $1 AND "
         "b.batch_id = x.id) LIMIT 1",
         {c.first_of(g).domain, db::array_literal(batch_ids)},
         "cmdbus_batch_check"});
  }
  auto reserved = conn.pipeline(first);
  for (auto [g, st] : batch_checks)
    if (reserved[st].rows() > 0)
      throw batch_not_found_error(c.first_of(g).domain,
                                  uuid_at(reserved[st], 0, 0));

  // The rows, in COPY's text format.
  std::vector<send_result> out(c.items.size());
  std::vector<std::string> messages(c.groups.size());
  std::string commands;
  std::string audits;
  size_t base = own_transaction ? 1 : 0;
  // Ids, timestamps, fixed fields and the audit's keys: about 200 bytes per
  // command for each kind of row, besides the messages.
  commands.reserve(c.items.size() * 200);
  audits.reserve(c.items.size() * 200);
  for (size_t g = 0; g < c.groups.size(); ++g) {
    auto& ids = reserved[base + g];
    auto& idx = *c.groups[g];
    size_t message_bytes = 0;
    for (auto i : idx)
      message_bytes += c.items[i].message.size() + 64;
    messages[g].reserve(message_bytes);
    if (static_cast<size_t>(ids.rows()) != idx.size())
      throw command_bus_error("send_batch: unexpected msg_id reservation");
    auto vt = ids.text(0, 1);
    for (size_t k = 0; k < idx.size(); ++k) {
      auto& p = c.items[idx[k]];
      auto row = static_cast<int>(k);
      auto msg_id = ids.text(row, 0);
      out[idx[k]] = {p.command_id, ids.int64(row, 0)};
      auto command_id = p.command_id.to_string();
      auto& m = messages[g];
      m.append(msg_id).append(1, '\t').append(vt).append(1, '\t');
      db::append_copy_field(m, p.message);
      m += '\n';
      // Queue names, ids and numbers need no escaping.
      db::append_copy_field(commands, p.domain);
      commands.append(1, '\t').append(p.queue).append(1, '\t');
      commands.append(msg_id).append(1, '\t').append(command_id);
      commands += '\t';
      db::append_copy_field(commands, p.command_type);
      commands.append("\tPENDING\t0\t").append(std::to_string(p.max_attempts));
      commands.append(1, '\t').append(p.reply_to ? *p.reply_to : "");
      commands.append(1, '\t').append(p.correlation_id.to_string());
      commands.append(1, '\t').append(p.batch_id ? p.batch_id->to_string()
                                                 : std::string{"\\N"});
      commands += '\n';
      db::append_copy_field(audits, p.domain);
      audits.append(1, '\t').append(command_id).append("\tSENT\t");
      db::append_copy_field(
          audits, wire::encode_sent_details(p.command_type, p.correlation_id,
                                            p.reply_to, out[idx[k]].msg_id,
                                            p.batch_id));
      audits += '\n';
    }
  }

  // Round trips 2-4: the messages, the command rows, the audits.
  for (size_t g = 0; g < c.groups.size(); ++g)
    conn.copy_in("COPY pgmq.\"" + db::queue_table(c.first_of(g).queue)
                     + "\" (msg_id, vt, message) FROM STDIN",
                 messages[g]);
  conn.copy_in("COPY commandbus.command (domain, queue_name, msg_id, "
               "command_id, command_type, status, attempts, max_attempts, "
               "reply_queue, correlation_id, batch_id) FROM STDIN",
               commands);
  conn.copy_in("COPY commandbus.audit (domain, command_id, event_type, "
               "details_json) FROM STDIN",
               audits);
  // Round trip 5: one NOTIFY per queue (D14), COMMIT.
  std::vector<db::connection::statement> last;
  for (size_t g = 0; g < c.groups.size(); ++g)
    last.push_back({"SELECT pg_notify(lower('pgmq_notify_' || $1), '')",
                    {c.first_of(g).queue},
                    "cmdbus_notify_queue"});
  if (own_transaction)
    last.push_back({"COMMIT", {}});
  conn.pipeline(last);
  return out;
}

namespace {

// Throws duplicate_command_error for a (domain, command_id) that appears
// twice among n keys; key_of(i) returns (const std::string& domain, uuid).
template <class F>
void check_unique(size_t n, F&& key_of) {
  std::vector<std::pair<const std::string*, uuid>> keys;
  keys.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto [domain, id] = key_of(i);
    keys.emplace_back(domain, id);
  }
  auto less = [](const auto& a, const auto& b) {
    auto c = a.first->compare(*b.first);
    return c < 0 || (c == 0 && a.second < b.second);
  };
  std::sort(keys.begin(), keys.end(), less);
  for (size_t i = 1; i < keys.size(); ++i)
    if (*keys[i].first == *keys[i - 1].first
        && keys[i].second == keys[i - 1].second)
      throw duplicate_command_error(*keys[i].first, keys[i].second);
}

} // namespace

std::vector<std::pair<size_t, size_t>>
command_bus::plan_chunks(const std::vector<send_request>& reqs) {
  // Everything is validated, and the queues exist, before the first chunk
  // goes out, so that invalid input writes nothing. Encoding happens per
  // chunk (prepare_range), on the thread that sends it.
  check_unique(reqs.size(), [&](size_t i) {
    return std::make_pair(&reqs[i].domain, reqs[i].command_id);
  });
  std::set<std::string> queues;
  for (auto& r : reqs)
    queues.insert(validated_queue(r));
  for (auto& r : reqs)
    if (r.reply_to)
      queues.insert(*r.reply_to);
  for (auto& q : queues)
    ensure_queue(q);
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t start = 0; start < reqs.size(); start += opts_.chunk_size)
    ranges.emplace_back(start, std::min(reqs.size(), start + opts_.chunk_size));
  return ranges;
}

std::vector<command_bus::prepared>
command_bus::prepare_range(const std::vector<send_request>& reqs,
                           std::pair<size_t, size_t> range) {
  std::vector<prepared> items;
  items.reserve(range.second - range.first);
  for (auto i = range.first; i < range.second; ++i)
    items.push_back(prepare(reqs[i]));
  return items;
}

batch_send_result
command_bus::send_batch(const std::vector<send_request>& reqs) {
  auto chunks = plan_chunks(reqs);
  batch_send_result out;
  std::vector<std::vector<send_result>> results(chunks.size());
  // Up to parallel_chunks connections send chunks concurrently; each takes
  // the next chunk as soon as its previous one committed (no waves). After
  // a failure no further chunk starts; those already running finish.
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex failure_mtx;
  std::exception_ptr failure;
  auto lane = [&] {
    for (;;) {
      if (failed)
        return;
      auto c = next++;
      if (c >= chunks.size())
        return;
      try {
        auto items = prepare_range(reqs, chunks[c]);
        auto conn = pool_.acquire();
        results[c] = send_chunk(items, *conn, true);
      } catch (...) {
        std::lock_guard<std::mutex> guard{failure_mtx};
        if (!failure)
          failure = std::current_exception();
        failed = true;
        return;
      }
    }
  };
  auto width = std::min(chunks.size(),
                        std::max<size_t>(1, opts_.parallel_chunks));
  std::vector<std::future<void>> others;
  for (size_t k = 1; k < width; ++k)
    others.push_back(std::async(std::launch::async, lane));
  // The caller's thread is the first lane.
  lane();
  for (auto& f : others)
    f.get();
  if (failure)
    std::rethrow_exception(failure);
  for (auto& r : results) {
    out.results.insert(out.results.end(), r.begin(), r.end());
    ++out.chunks_processed;
  }
  out.total_commands = static_cast<int>(out.results.size());
  return out;
}

batch_send_result command_bus::send_batch(const std::vector<send_request>& reqs,
                                          db::connection& conn) {
  batch_send_result out;
  for (auto& range : plan_chunks(reqs)) {
    auto results = send_chunk(prepare_range(reqs, range), conn, false);
    out.results.insert(out.results.end(), results.begin(), results.end());
    ++out.chunks_processed;
  }
  out.total_commands = static_cast<int>(out.results.size());
  return out;
}

// -- create_batch ------------------------------------------------------------

create_batch_result
command_bus::create_batch(const std::string& domain,
                          const std::vector<batch_command>& commands,
                          const create_batch_options& opts) {
  // Queues first, since creating them takes a pooled connection of its own;
  // but only once every name is known to be valid.
  auto queue = db::command_queue(domain);
  for (auto& c : commands)
    if (c.reply_to)
      db::validate_queue_name(*c.reply_to);
  if (!commands.empty()) {
    ensure_queue(queue);
    for (auto& c : commands)
      if (c.reply_to)
        ensure_queue(*c.reply_to);
  }
  auto conn = pool_.acquire();
  conn->exec("BEGIN");
  try {
    auto out = create_batch(domain, commands, opts, *conn);
    conn->exec("COMMIT");
    return out;
  } catch (...) {
    rollback_if_open(*conn);
    throw;
  }
}

create_batch_result
command_bus::create_batch(const std::string& domain,
                          const std::vector<batch_command>& commands,
                          const create_batch_options& opts,
                          db::connection& conn) {
  if (commands.empty())
    throw command_bus_error("create_batch needs at least one command");
  db::validate_domain(domain);
  check_unique(commands.size(), [&](size_t i) {
    return std::make_pair(&domain, commands[i].command_id);
  });
  create_batch_result out;
  out.batch_id = opts.batch_id ? *opts.batch_id : uuid::random();
  std::vector<prepared> items;
  items.reserve(commands.size());
  for (auto& c : commands) {
    send_request req;
    req.domain = domain;
    req.command_type = c.command_type;
    req.command_id = c.command_id;
    req.data = c.data;
    req.correlation_id = c.correlation_id;
    req.reply_to = c.reply_to;
    req.max_attempts = c.max_attempts;
    items.push_back(prepare(req));
    items.back().batch_id = out.batch_id;
  }
  ensure_queues(items);
  try {
    conn.query("INSERT INTO commandbus.batch (domain, batch_id, name, "
               "custom_data, status, total_count, batch_type) VALUES ($1, "
               "$2::uuid, $3, $4::jsonb, 'PENDING', $5::int, 'COMMAND')",
               domain, out.batch_id.to_string(), opts.name,
               opts.custom_data ? std::optional<std::string>{opts.custom_data->text()}
                                : std::nullopt,
               static_cast<int>(commands.size()));
  } catch (const db::error& e) {
    if (e.sqlstate() == sqlstate_unique_violation)
      throw command_bus_error("batch " + out.batch_id.to_string()
                              + " already exists in domain " + domain);
    throw;
  }
  out.command_results = send_chunk(items, conn, false);
  out.total_commands = static_cast<int>(commands.size());
  return out;
}

// -- reads -------------------------------------------------------------------

std::optional<command_metadata>
command_bus::get_command(const std::string& domain, const uuid& command_id) {
  auto conn = pool_.acquire();
  auto r = conn->query(std::string{"SELECT "} + command_columns
                         + " FROM commandbus.command WHERE domain = $1 AND "
                           "command_id = $2::uuid",
                       domain, command_id.to_string());
  if (r.rows() == 0)
    return std::nullopt;
  return to_command_metadata(r, 0);
}

bool command_bus::command_exists(const std::string& domain,
                                 const uuid& command_id) {
  auto conn = pool_.acquire();
  return conn
           ->query("SELECT 1 FROM commandbus.command WHERE domain = $1 AND "
                   "command_id = $2::uuid",
                   domain, command_id.to_string())
           .rows()
         > 0;
}

std::vector<command_metadata>
command_bus::query_commands(const command_query& q) {
  // The statement's shape depends on which filters are set; every value is
  // a parameter.
  std::string sql = std::string{"SELECT "} + command_columns
                    + " FROM commandbus.command WHERE TRUE";
  std::vector<db::param> params;
  auto add = [&](const std::string& cond, db::param value) {
    params.push_back(std::move(value));
    sql += " AND " + cond + " $" + std::to_string(params.size());
  };
  if (q.status)
    add("status =", std::string{to_string(*q.status)});
  if (q.domain)
    add("domain =", *q.domain);
  if (q.command_type)
    add("command_type =", *q.command_type);
  if (q.created_after)
    add("created_at >=", format_timestamp(*q.created_after));
  if (q.created_before)
    add("created_at <=", format_timestamp(*q.created_before));
  params.push_back(std::to_string(std::max(0, q.limit)));
  sql += " ORDER BY created_at DESC, command_id LIMIT $"
         + std::to_string(params.size());
  params.push_back(std::to_string(std::max(0, q.offset)));
  sql += " OFFSET $" + std::to_string(params.size());
  auto conn = pool_.acquire();
  return to_commands(conn->exec(sql, params));
}

std::vector<audit_event>
command_bus::get_audit_trail(const uuid& command_id,
                             const std::optional<std::string>& domain) {
  auto conn = pool_.acquire();
  std::string sql = "SELECT audit_id, domain, command_id, event_type, ts, "
                    "details_json FROM commandbus.audit WHERE command_id = "
                    "$1::uuid";
  std::vector<db::param> params{command_id.to_string()};
  if (domain) {
    sql += " AND domain = $2";
    params.push_back(*domain);
  }
  sql += " ORDER BY ts, audit_id";
  auto r = conn->exec(sql, params);
  std::vector<audit_event> out;
  for (int i = 0; i < r.rows(); ++i) {
    audit_event ev;
    ev.audit_id = r.int64(i, 0);
    ev.domain = std::string{r.text(i, 1)};
    ev.command_id = uuid_at(r, i, 2);
    ev.event_type = std::string{r.text(i, 3)};
    ev.ts = time_at(r, i, 4);
    ev.details = opt_json_at(r, i, 5);
    out.push_back(std::move(ev));
  }
  return out;
}

std::optional<batch_metadata> command_bus::get_batch(const std::string& domain,
                                                     const uuid& batch_id) {
  auto conn = pool_.acquire();
  auto r = conn->query(std::string{"SELECT "} + batch_columns
                         + " FROM commandbus.batch WHERE domain = $1 AND "
                           "batch_id = $2::uuid",
                       domain, batch_id.to_string());
  if (r.rows() == 0)
    return std::nullopt;
  return to_batch_metadata(r, 0);
}

std::vector<batch_metadata>
command_bus::list_batches(const std::string& domain,
                          std::optional<batch_status> status, int limit,
                          int offset) {
  auto conn = pool_.acquire();
  auto r = conn->query(
    std::string{"SELECT "} + batch_columns
      + " FROM commandbus.batch WHERE domain = $1 AND ($2::text IS NULL OR "
        "status = $2) ORDER BY created_at DESC, batch_id LIMIT $3 OFFSET $4",
    domain,
    status ? std::optional<std::string>{std::string{to_string(*status)}}
           : std::nullopt,
    std::max(0, limit), std::max(0, offset));
  std::vector<batch_metadata> out;
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(to_batch_metadata(r, i));
  return out;
}

std::vector<command_metadata>
command_bus::list_batch_commands(const std::string& domain,
                                 const uuid& batch_id,
                                 std::optional<command_status> status,
                                 int limit, int offset) {
  auto conn = pool_.acquire();
  return to_commands(conn->query(
    std::string{"SELECT "} + command_columns
      + " FROM commandbus.command WHERE domain = $1 AND batch_id = $2::uuid "
        "AND ($3::text IS NULL OR status = $3) ORDER BY created_at, "
        "command_id LIMIT $4 OFFSET $5",
    domain, batch_id.to_string(),
    status ? std::optional<std::string>{std::string{to_string(*status)}}
           : std::nullopt,
    std::max(0, limit), std::max(0, offset)));
}

} // namespace cmdbus
