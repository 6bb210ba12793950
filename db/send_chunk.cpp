#include "cmdbus/db/send_chunk.hpp"

#include <map>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/rows.hpp"
#include "cmdbus/db/send_statement.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/wire.hpp"

namespace cmdbus::db {

namespace {

// -- chunk -------------------------------------------------------------------

// A chunk's commands grouped by domain (one queue each), with their input
// positions.
struct chunk {
  const std::vector<prepared_command>& items;
  std::map<std::string, std::vector<size_t>> by_domain;
  std::vector<const std::vector<size_t>*> groups;

  explicit chunk(const std::vector<prepared_command>& xs) : items(xs) {
    for (size_t i = 0; i < items.size(); ++i)
      by_domain[items[i].domain].push_back(i);
    for (auto& entry : by_domain)
      groups.push_back(&entry.second);
  }

  const prepared_command& first_of(size_t g) const {
    return items[groups[g]->front()];
  }
};

// -- INSERT path -------------------------------------------------------------

// One cmdbus_send_commands statement per domain, all in one round trip:
// the cheapest for small chunks. A domain's commands of which any has a
// not-before time go through cmdbus_send_commands_at (V009), which takes
// those times as one more array; the others keep the undelayed function.
std::vector<send_result> insert_chunk(const chunk& c, connection& conn,
                                      bool own_transaction) {
  std::vector<connection::statement> statements;
  if (own_transaction)
    statements.push_back({"BEGIN", {}});
  for (auto* idx : c.groups) {
    std::vector<std::string> ids, types, messages, correlations;
    std::vector<std::optional<std::string>> reply_tos, batch_ids, not_before;
    std::vector<int64_t> max_attempts;
    bool delayed = false;
    for (auto i : *idx) {
      auto& p = c.items[i];
      ids.push_back(p.command_id.to_string());
      types.push_back(p.command_type);
      messages.push_back(p.message);
      correlations.push_back(p.correlation_id.to_string());
      reply_tos.push_back(p.reply_to);
      max_attempts.push_back(p.max_attempts);
      batch_ids.push_back(
        p.batch_id ? std::optional<std::string>{p.batch_id->to_string()}
                   : std::nullopt);
      not_before.push_back(
        p.not_before
          ? std::optional<std::string>{format_timestamp(*p.not_before)}
          : std::nullopt);
      delayed = delayed || p.not_before.has_value();
    }
    std::vector<param> params{to_param(c.items[idx->front()].domain),
                              to_param(c.items[idx->front()].queue),
                              array_literal(ids),
                              array_literal(types),
                              array_literal(messages),
                              array_literal(correlations),
                              array_literal(reply_tos),
                              array_literal(max_attempts),
                              array_literal(batch_ids)};
    if (delayed) {
      params.push_back(array_literal(not_before));
      statements.push_back(
        {"SELECT command_id, msg_id FROM commandbus.cmdbus_send_commands_at("
         "$1, $2, $3::uuid[], $4::text[], $5::jsonb[], $6::uuid[], "
         "$7::text[], $8::int[], $9::uuid[], $10::timestamptz[])",
         std::move(params), "cmdbus_send_commands_at"});
    } else {
      statements.push_back(
        {"SELECT command_id, msg_id FROM commandbus.cmdbus_send_commands("
         "$1, $2, $3::uuid[], $4::text[], $5::jsonb[], $6::uuid[], "
         "$7::text[], $8::int[], $9::uuid[])",
         std::move(params), "cmdbus_send_commands"});
    }
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

// -- COPY path ---------------------------------------------------------------

// The same writes with COPY, for large chunks: COPY inserts heap rows in
// multi-row batches (fewer WAL records) and parses no arrays, which took
// about a fifth of the server's time per command. The messages' msg_ids are
// drawn from each queue's identity sequence first, so that command rows and
// audits can name them; COPY writes given identity values as INSERT ...
// OVERRIDING SYSTEM VALUE would. The rows are those of
// pgmq.send_batch(queue, msgs, 0) and cmdbus_send_commands: vt is the
// server's clock_timestamp() at reservation (a delayed command's not-before
// time when that is later, as cmdbus_send_commands_at writes it), headers
// NULL. COPY cannot run
// in a pipeline, so a chunk takes five round trips: about 0.3 ms, which
// pays off from about 60 commands on (copy_threshold).

// Round trip 1: BEGIN, per domain the msg_id reservation and the batch
// check (statement index - BEGIN = group, as for insert_chunk). Returns the
// results; the reservation of group g is at `g + (own_transaction ? 1 : 0)`.
std::vector<result> reserve_msg_ids(const chunk& c, connection& conn,
                                    bool own_transaction) {
  std::vector<connection::statement> first;
  if (own_transaction)
    first.push_back({"BEGIN", {}});
  for (size_t g = 0; g < c.groups.size(); ++g)
    first.push_back(
      {"SELECT nextval(s.seq), s.now FROM (SELECT "
       "pg_get_serial_sequence($1, 'msg_id')::regclass AS seq, "
       "clock_timestamp() AS now OFFSET 0) AS s, generate_series(1, $2::int)",
       {"pgmq.\"" + queue_table(c.first_of(g).queue) + "\"",
        to_param(c.groups[g]->size())},
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
       {c.first_of(g).domain, array_literal(batch_ids)},
       "cmdbus_batch_check"});
  }
  auto reserved = conn.pipeline(first);
  for (auto [g, st] : batch_checks)
    if (reserved[st].rows() > 0)
      throw batch_not_found_error(c.first_of(g).domain,
                                  uuid_at(reserved[st], 0, 0));
  return reserved;
}

// The rows of a chunk in COPY's text format: one message table per group,
// the command rows, the audits.
struct copy_rows {
  std::vector<std::string> messages;
  std::string commands;
  std::string audits;
};

// Encodes the rows of group `g` with the msg_ids in `ids` and records each
// command's result in `out`.
void encode_group(const chunk& c, size_t g, const result& ids, copy_rows& rows,
                  std::vector<send_result>& out) {
  auto& idx = *c.groups[g];
  size_t message_bytes = 0;
  for (auto i : idx)
    message_bytes += c.items[i].message.size() + 64;
  auto& m = rows.messages[g];
  m.reserve(message_bytes);
  if (static_cast<size_t>(ids.rows()) != idx.size())
    throw command_bus_error("send_batch: unexpected msg_id reservation");
  auto vt = ids.text(0, 1);
  // The server's clock at the reservation, to compare not-before times with
  // (only parsed when a command of the group has one).
  std::optional<timestamp> server_now;
  auto& commands = rows.commands;
  auto& audits = rows.audits;
  for (size_t k = 0; k < idx.size(); ++k) {
    auto& p = c.items[idx[k]];
    auto row = static_cast<int>(k);
    auto msg_id = ids.text(row, 0);
    out[idx[k]] = {p.command_id, ids.int64(row, 0)};
    auto command_id = p.command_id.to_string();
    m.append(msg_id).append(1, '\t');
    if (p.not_before) {
      if (!server_now)
        server_now = parse_timestamp(vt);
      if (!server_now)
        throw command_bus_error("send_batch: unexpected server time "
                                + std::string{vt});
      m.append(*p.not_before > *server_now ? format_timestamp(*p.not_before)
                                           : std::string{vt});
    } else {
      m.append(vt);
    }
    m += '\t';
    append_copy_field(m, p.message);
    m += '\n';
    // Queue names, ids and numbers need no escaping.
    append_copy_field(commands, p.domain);
    commands.append(1, '\t').append(p.queue).append(1, '\t');
    commands.append(msg_id).append(1, '\t').append(command_id);
    commands += '\t';
    append_copy_field(commands, p.command_type);
    commands.append("\tPENDING\t0\t").append(std::to_string(p.max_attempts));
    commands.append(1, '\t').append(p.reply_to ? *p.reply_to : "");
    commands.append(1, '\t').append(p.correlation_id.to_string());
    commands.append(1, '\t').append(p.batch_id ? p.batch_id->to_string()
                                               : std::string{"\\N"});
    commands += '\n';
    append_copy_field(audits, p.domain);
    audits.append(1, '\t').append(command_id).append("\tSENT\t");
    append_copy_field(audits, wire::encode_sent_details(
                                p.command_type, p.correlation_id, p.reply_to,
                                out[idx[k]].msg_id, p.batch_id));
    audits += '\n';
  }
}

std::vector<send_result> copy_chunk(const chunk& c, connection& conn,
                                    bool own_transaction) {
  auto reserved = reserve_msg_ids(c, conn, own_transaction);
  std::vector<send_result> out(c.items.size());
  copy_rows rows;
  rows.messages.resize(c.groups.size());
  // Ids, timestamps, fixed fields and the audit's keys: about 200 bytes per
  // command for each kind of row, besides the messages.
  rows.commands.reserve(c.items.size() * 200);
  rows.audits.reserve(c.items.size() * 200);
  size_t base = own_transaction ? 1 : 0;
  for (size_t g = 0; g < c.groups.size(); ++g)
    encode_group(c, g, reserved[base + g], rows, out);
  // Round trips 2-4: the messages, the command rows, the audits.
  for (size_t g = 0; g < c.groups.size(); ++g)
    conn.copy_in("COPY pgmq.\"" + queue_table(c.first_of(g).queue)
                   + "\" (msg_id, vt, message) FROM STDIN",
                 rows.messages[g]);
  conn.copy_in("COPY commandbus.command (domain, queue_name, msg_id, "
               "command_id, command_type, status, attempts, max_attempts, "
               "reply_queue, correlation_id, batch_id) FROM STDIN",
               rows.commands);
  conn.copy_in("COPY commandbus.audit (domain, command_id, event_type, "
               "details_json) FROM STDIN",
               rows.audits);
  // Round trip 5: one NOTIFY per queue (every send notifies its queue in
  // its own transaction; bulk sends once per queue), COMMIT.
  std::vector<connection::statement> last;
  for (size_t g = 0; g < c.groups.size(); ++g)
    last.push_back(notify_statement(c.first_of(g).queue));
  if (own_transaction)
    last.push_back({"COMMIT", {}});
  conn.pipeline(last);
  return out;
}

// -- failures ----------------------------------------------------------------

// Turns a failure of chunk `c` into the error its caller gets, naming the
// domain (and command) it is about; the statement index, when known, tells
// the group. Returns for other failures, which reach the caller as they are.
void throw_named(const error& e, const chunk& c, connection& conn,
                 bool own_transaction, const find_existing_fn& find_existing) {
  auto g = e.statement_index() - (own_transaction ? 1 : 0);
  const auto* idx = g >= 0 && static_cast<size_t>(g) < c.groups.size()
                      ? c.groups[static_cast<size_t>(g)]
                      : nullptr;
  const auto& first = c.items[idx != nullptr ? idx->front() : 0];
  if (e.sqlstate() == sqlstate_batch_not_found) {
    auto id = uuid::parse(e.detail());
    throw batch_not_found_error(first.domain, id ? *id : uuid{});
  }
  if (is_duplicate_command(e)) {
    // A concurrent send won the race for one of these ids: find it, in the
    // failing group first. After our own rollback the connection is free
    // for that (a pool of one has no other); in a caller's failed
    // transaction, a pooled one looks.
    auto* lookup = own_transaction && conn.is_open() ? &conn : nullptr;
    auto groups = c.groups;
    if (idx != nullptr)
      groups.insert(groups.begin(), idx);
    for (auto* group : groups) {
      std::vector<uuid> ids;
      for (auto i : *group)
        ids.push_back(c.items[i].command_id);
      const auto& d = c.items[group->front()].domain;
      if (auto dup = find_existing(d, ids, lookup))
        throw duplicate_command_error(d, *dup);
    }
    throw duplicate_command_error(first.domain, first.command_id);
  }
}

} // namespace

// -- send_chunk --------------------------------------------------------------

std::vector<send_result> send_chunk(const std::vector<prepared_command>& items,
                                    connection& conn, bool own_transaction,
                                    size_t copy_threshold,
                                    const find_existing_fn& find_existing) {
  // Outside a transaction block every statement would commit on its own:
  // a chunk is one transaction whoever opened it.
  own_transaction = own_transaction || !conn.in_transaction();
  chunk c{items};
  try {
    return items.size() >= copy_threshold
             ? copy_chunk(c, conn, own_transaction)
             : insert_chunk(c, conn, own_transaction);
  } catch (const error& e) {
    if (own_transaction)
      rollback_if_open(conn);
    throw_named(e, c, conn, own_transaction, find_existing);
    throw;
  } catch (...) {
    if (own_transaction)
      rollback_if_open(conn);
    throw;
  }
}

} // namespace cmdbus::db
