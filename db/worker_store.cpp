#include "cmdbus/db/worker_store.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/text_format.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/wire.hpp"

namespace cmdbus::db {

namespace {

// What decoding alone cannot tell: a message read from a domain's queue
// claimed that domain's command row, so it must name that domain (the
// worker picks the handler by the message's domain and type: another name
// would run another domain's handler on this command); and its reply_to
// must be a queue name, because cmdbus_complete and cmdbus_fail_final
// refuse any other with an error that rolls back every command written in
// the same transaction, again on each retry. Throws decode_error, so that
// such a message moves its command to the TSQ before any handler runs.
void check_envelope(const command& cmd, const std::string& domain) {
  if (cmd.domain != domain)
    throw decode_error("field \"domain\" is not the queue's domain \"" + domain
                       + "\"");
  if (cmd.reply_to) {
    auto problem = queue_name_problem(*cmd.reply_to);
    if (!problem.empty())
      throw decode_error("field \"reply_to\" " + problem);
  }
}

} // namespace

worker_store::worker_store(connection& conn, std::string domain)
  : conn_(conn), domain_(std::move(domain)), queue_(command_queue(domain_)) {
  // nop
}

receive_result worker_store::receive(int vt_seconds, int qty,
                                     const read_options& how) {
  receive_result out;
  if (qty <= 0)
    return out;
  // A new token per read: a claim the database forgets cannot come back
  // with it (docs/design.md, "Claim tokens").
  auto claim = uuid::random();
  bool defer = how.defer_claims && !how.chooses();
  auto r = how.chooses() ? receive_chosen(vt_seconds, qty, claim, how)
           : defer
             ? conn_.exec_prepared(
               "cmdbus_receive_deferred",
               "SELECT msg_id, message, outcome, command_id, command_type, "
               "attempts, max_attempts, batch_id, read_ct, vt_us, "
               "seen_attempts FROM commandbus.cmdbus_receive_deferred($1, "
               "$2, $3::int, $4::int, $5::uuid)",
               {domain_, queue_, to_param(vt_seconds), to_param(qty),
                claim.to_string()})
             : conn_.exec_prepared(
               "cmdbus_receive_claim",
               "SELECT msg_id, message, outcome, command_id, "
               "command_type, attempts, max_attempts, batch_id "
               "FROM commandbus.cmdbus_receive_claim($1, $2, "
               "$3::int, $4::int, $5::uuid)",
               {domain_, queue_, to_param(vt_seconds), to_param(qty),
                claim.to_string()});
  out.read = r.rows();
  for (int i = 0; i < r.rows(); ++i) {
    auto msg_id = r.int64(i, 0);
    std::string status{r.text(i, 2)};
    bool deferred = status == "DEFERRED";
    if (status != "OK" && !deferred) {
      // Never log or keep payloads: the id is what operators need.
      out.rejected.push_back({msg_id, status, {}, {}});
      continue;
    }
    received_command rc;
    rc.msg_id = msg_id;
    rc.attempt = static_cast<int>(r.int64(i, 5));
    rc.max_attempts = static_cast<int>(r.int64(i, 6));
    rc.claim = claim;
    if (deferred) {
      rc.deferred = true;
      rc.read_ct = static_cast<int>(r.int64(i, 8));
      rc.vt_us = r.int64(i, 9);
      rc.seen_attempts = static_cast<int>(r.int64(i, 10));
    }
    if (!r.is_null(i, 7))
      rc.batch_id = uuid::parse(r.text(i, 7));
    try {
      rc.cmd = wire::decode_command(r.text(i, 1));
      check_envelope(rc.cmd, domain_);
    } catch (const decode_error& e) {
      // Claimed but unusable: the caller moves it to the TSQ. Nothing of
      // the message is kept (no reply_to: no reply).
      rc.cmd = command{};
      rc.cmd.domain = domain_;
      rc.cmd.command_type = std::string{r.text(i, 4)};
      rc.cmd.command_id = uuid::parse(r.text(i, 3)).value_or(uuid{});
      out.rejected.push_back({msg_id, "UNDECODABLE", e.what(), rc});
      continue;
    }
    out.commands.push_back(std::move(rc));
  }
  if (defer)
    // The deferred ones come first: run everything in msg_id order.
    std::sort(out.commands.begin(), out.commands.end(),
              [](const received_command& a, const received_command& b) {
                return a.msg_id < b.msg_id;
              });
  if (how.priority)
    std::stable_sort(out.commands.begin(), out.commands.end(),
                     [](const received_command& a, const received_command& b) {
                       return a.cmd.priority.value_or(0)
                              > b.cmd.priority.value_or(0);
                     });
  return out;
}

result worker_store::receive_chosen(int vt_seconds, int qty, const uuid& claim,
                                    const read_options& how) {
  std::vector<std::string> types;
  std::vector<int64_t> limits;
  for (auto& [type, limit] : how.type_limits) {
    types.push_back(type);
    limits.push_back(limit);
  }
  auto shard = [&](int x) -> param {
    if (how.shard_count <= 0)
      return std::nullopt;
    return to_param(x);
  };
  return conn_.exec_prepared(
    "cmdbus_receive_read",
    "SELECT msg_id, message, outcome, command_id, command_type, attempts, "
    "max_attempts, batch_id FROM commandbus.cmdbus_receive_read($1, $2, "
    "$3::int, $4::int, $5::uuid, $6::text[], $7::int[], $8::int, $9::int, "
    "$10::boolean, $11::int)",
    {domain_, queue_, to_param(vt_seconds), to_param(qty), claim.to_string(),
     array_literal(types), array_literal(limits), shard(how.shard_index),
     shard(how.shard_count), std::string{how.priority ? "true" : "false"},
     to_param(how.oldest)});
}

std::optional<std::string> reply_for(const finished_command& x) {
  if (!x.rc.cmd.reply_to || x.rc.cmd.reply_to->empty())
    return std::nullopt;
  reply r;
  r.command_id = x.rc.cmd.command_id;
  r.correlation_id = x.rc.cmd.correlation_id;
  switch (x.out.kind) {
    case outcome_kind::success:
      r.outcome = reply_outcome::success;
      r.result = x.out.result;
      return wire::encode_reply(r);
    case outcome_kind::business_rule:
      r.outcome = reply_outcome::failed;
      r.result = x.out.error_details.is_object() ? x.out.error_details
                                                 : json::object();
      r.error_code = x.out.error_code;
      r.error_message = x.out.error_message;
      return wire::encode_reply(r);
    default:
      // Moves to the TSQ send no reply, as in the reference library.
      return std::nullopt;
  }
}

namespace {

// The statement of one finish step: `call` (a V007 *_claimed function)
// returns (batch_id, batch_complete, states) rows, the first with the
// states; with `record`, the batches that just became complete are also
// recorded for callback delivery (V005) in the same statement, so that the
// record commits with the transition.
std::string finish_sql(const char* call, bool record) {
  std::string sql;
  if (!record)
    return sql.append("SELECT batch_id, batch_complete, states FROM ")
      .append(call);
  return sql.append("WITH f AS (SELECT batch_id, batch_complete, states FROM ")
    .append(call)
    .append("), r AS (INSERT INTO commandbus.cmdbus_batch_delivery (domain, "
            "batch_id) SELECT $1, f.batch_id FROM f WHERE f.batch_complete "
            "ON CONFLICT DO NOTHING) SELECT batch_id, batch_complete, "
            "states FROM f");
}

// Returns the states of a text[] literal of OWNED, WRITTEN and STALE
// ("{OWNED,STALE}"), `n` of them; throws on anything else.
std::vector<write_state> parse_states(std::string_view literal, size_t n) {
  std::vector<write_state> out;
  if (literal.size() < 2 || literal.front() != '{' || literal.back() != '}')
    throw std::runtime_error("unexpected claim states from the database");
  literal = literal.substr(1, literal.size() - 2);
  while (!literal.empty()) {
    auto comma = literal.find(',');
    auto word = literal.substr(0, comma);
    if (word == "OWNED")
      out.push_back(write_state::written);
    else if (word == "WRITTEN")
      out.push_back(write_state::already_written);
    else if (word == "STALE")
      out.push_back(write_state::stale);
    else
      throw std::runtime_error("unexpected claim state from the database");
    literal = comma == std::string_view::npos ? std::string_view{}
                                              : literal.substr(comma + 1);
  }
  if (out.size() != n)
    throw std::runtime_error("the database returned a claim state per "
                             "outcome for a different number of outcomes");
  return out;
}

// The claim tokens of `xs`, as a uuid[] literal.
template <class Items>
std::string claims_of(const Items& xs) {
  std::vector<std::string> claims;
  for (auto& x : xs)
    claims.push_back(x->rc.claim.to_string());
  return array_literal(claims);
}

// The received commands of `xs` (pointers to finished or retry commands,
// or received commands themselves).
const received_command& rc_of(const received_command& x) {
  return x;
}
template <class T>
const received_command& rc_of(const T* x) {
  return x->rc;
}
template <class T>
const received_command& rc_of(const T& x) {
  return x.rc;
}

// The statement claiming the deferred deliveries among `xs`
// (cmdbus_claim_deferred); none when there are none.
template <class Items>
std::optional<connection::statement>
claim_deferred_statement(const std::string& domain, const std::string& queue,
                         const Items& xs) {
  std::vector<int64_t> msg_ids, read_cts, vts, seen, attempts, max_attempts;
  std::vector<std::string> ids, claims;
  for (auto& x : xs) {
    auto& rc = rc_of(x);
    if (!rc.deferred)
      continue;
    msg_ids.push_back(rc.msg_id);
    read_cts.push_back(rc.read_ct);
    vts.push_back(rc.vt_us);
    ids.push_back(rc.cmd.command_id.to_string());
    seen.push_back(rc.seen_attempts);
    attempts.push_back(rc.attempt);
    max_attempts.push_back(rc.max_attempts);
    claims.push_back(rc.claim.to_string());
  }
  if (msg_ids.empty())
    return std::nullopt;
  return connection::statement{
    "SELECT commandbus.cmdbus_claim_deferred($1, $2, $3::bigint[], "
    "$4::int[], $5::bigint[], $6::uuid[], $7::int[], $8::int[], $9::int[], "
    "$10::uuid[])",
    {domain, queue, array_literal(msg_ids), array_literal(read_cts),
     array_literal(vts), array_literal(ids), array_literal(seen),
     array_literal(attempts), array_literal(max_attempts),
     array_literal(claims)},
    "cmdbus_claim_deferred"};
}

// Returns the elements of a boolean[] literal ("{t,f}"), `n` of them.
std::vector<bool> parse_booleans(std::string_view literal, size_t n) {
  std::vector<bool> out;
  if (literal.size() < 2 || literal.front() != '{' || literal.back() != '}')
    throw std::runtime_error("unexpected boolean array from the database");
  for (auto c : literal.substr(1, literal.size() - 2))
    if (c == 't' || c == 'f')
      out.push_back(c == 't');
  if (out.size() != n)
    throw std::runtime_error("the database returned a claim result per "
                             "delivery for a different number of deliveries");
  return out;
}

} // namespace

void worker_store::ensure_reply_queues(
  const std::vector<finished_command>& items) {
  constexpr size_t most_remembered = 4096;
  for (auto& x : items) {
    auto& to = x.rc.cmd.reply_to;
    // A name that is no queue name is left to the write, which refuses it
    // (the envelope check keeps such names from the worker's reads).
    if (!to || to->empty() || reply_queues_.count(*to) > 0
        || !queue_name_problem(*to).empty() || !reply_for(x))
      continue;
    create_queue(conn_, *to);
    if (reply_queues_.size() >= most_remembered)
      reply_queues_.clear();
    reply_queues_.insert(*to);
  }
}

finish_result worker_store::finish(const std::vector<finished_command>& items) {
  finish_result out;
  if (items.empty())
    return out;
  ensure_reply_queues(items);
  // Split by kind: success, and the three final failure kinds; each group
  // keeps the positions of its items in `items`.
  struct group {
    std::vector<const finished_command*> xs;
    std::vector<size_t> at;
    void add(const finished_command& x, size_t i) {
      xs.push_back(&x);
      at.push_back(i);
    }
  };
  group ok, deferred_ok, permanent, exhausted, business;
  for (size_t i = 0; i < items.size(); ++i) {
    auto& x = items[i];
    if (x.out.kind == outcome_kind::success)
      (x.rc.deferred ? deferred_ok : ok).add(x, i);
    else if (x.out.kind == outcome_kind::business_rule)
      business.add(x, i);
    else if (x.exhausted || x.out.kind == outcome_kind::transient)
      exhausted.add(x, i);
    else
      permanent.add(x, i);
  }
  std::vector<connection::statement> sts;
  // The groups with the index of their statement's result.
  std::vector<std::pair<const group*, size_t>> groups;
  sts.push_back({"BEGIN", {}});
  // The failures of deferred deliveries are claimed first: the V007
  // functions below then fence them by their claim.
  std::vector<const finished_command*> failures;
  for (auto* g : {&permanent, &exhausted, &business})
    failures.insert(failures.end(), g->xs.begin(), g->xs.end());
  if (auto st = claim_deferred_statement(domain_, queue_, failures))
    sts.push_back(std::move(*st));
  // The reply columns of a success group.
  struct success_columns {
    std::vector<std::string> has_result;
    std::vector<std::optional<std::string>> reply_tos, replies;
    explicit success_columns(const group& g) {
      for (auto* x : g.xs) {
        has_result.push_back(x->out.result.is_null() ? "f" : "t");
        auto rep = reply_for(*x);
        reply_tos.push_back(rep ? x->rc.cmd.reply_to : std::nullopt);
        replies.push_back(rep);
      }
    }
  };
  if (!ok.xs.empty()) {
    std::vector<int64_t> msg_ids, attempts;
    std::vector<std::string> ids;
    for (auto* x : ok.xs) {
      msg_ids.push_back(x->rc.msg_id);
      attempts.push_back(x->rc.attempt);
      ids.push_back(x->rc.cmd.command_id.to_string());
    }
    success_columns cols{ok};
    sts.push_back(
      {finish_sql("commandbus.cmdbus_complete_claimed($1, $2, $3::bigint[], "
                  "$4::uuid[], $5::int[], $6::uuid[], $7::boolean[], "
                  "$8::text[], $9::jsonb[])",
                  record_batches_),
       {domain_, queue_, array_literal(msg_ids), array_literal(ids),
        array_literal(attempts), claims_of(ok.xs),
        array_literal(cols.has_result), array_literal(cols.reply_tos),
        array_literal(cols.replies)},
       record_batches_ ? "cmdbus_complete_claimed_rec"
                       : "cmdbus_complete_claimed"});
    groups.emplace_back(&ok, sts.size() - 1);
  }
  if (!deferred_ok.xs.empty()) {
    std::vector<int64_t> msg_ids, read_cts, vts, seen, attempts, max_attempts;
    std::vector<std::string> ids;
    for (auto* x : deferred_ok.xs) {
      msg_ids.push_back(x->rc.msg_id);
      read_cts.push_back(x->rc.read_ct);
      vts.push_back(x->rc.vt_us);
      ids.push_back(x->rc.cmd.command_id.to_string());
      seen.push_back(x->rc.seen_attempts);
      attempts.push_back(x->rc.attempt);
      max_attempts.push_back(x->rc.max_attempts);
    }
    success_columns cols{deferred_ok};
    sts.push_back(
      {finish_sql("commandbus.cmdbus_complete_deferred($1, $2, $3::bigint[], "
                  "$4::int[], $5::bigint[], $6::uuid[], $7::int[], $8::int[], "
                  "$9::int[], $10::uuid[], $11::boolean[], $12::text[], "
                  "$13::jsonb[])",
                  record_batches_),
       {domain_, queue_, array_literal(msg_ids), array_literal(read_cts),
        array_literal(vts), array_literal(ids), array_literal(seen),
        array_literal(attempts), array_literal(max_attempts),
        claims_of(deferred_ok.xs), array_literal(cols.has_result),
        array_literal(cols.reply_tos), array_literal(cols.replies)},
       record_batches_ ? "cmdbus_complete_deferred_rec"
                       : "cmdbus_complete_deferred"});
    groups.emplace_back(&deferred_ok, sts.size() - 1);
  }
  auto add_final = [&](const char* kind, const group& g) {
    if (g.xs.empty())
      return;
    std::vector<int64_t> msg_ids, attempts, max_attempts;
    std::vector<std::string> ids, error_types, codes, msgs, details;
    std::vector<std::optional<std::string>> reply_tos, replies;
    for (auto* x : g.xs) {
      msg_ids.push_back(x->rc.msg_id);
      ids.push_back(x->rc.cmd.command_id.to_string());
      attempts.push_back(x->rc.attempt);
      max_attempts.push_back(x->rc.max_attempts);
      error_types.push_back(to_string(x->out.kind));
      codes.push_back(x->out.error_code);
      msgs.push_back(x->out.error_message);
      details.push_back(x->out.error_details.is_object()
                          ? x->out.error_details.text()
                          : std::string{"{}"});
      auto rep = reply_for(*x);
      reply_tos.push_back(rep ? x->rc.cmd.reply_to : std::nullopt);
      replies.push_back(rep);
    }
    sts.push_back(
      {finish_sql("commandbus.cmdbus_fail_final_claimed($1, $2, $3, "
                  "$4::bigint[], $5::uuid[], $6::int[], $7::uuid[], "
                  "$8::int[], $9::text[], $10::text[], $11::text[], "
                  "$12::jsonb[], $13::text[], $14::jsonb[])",
                  record_batches_),
       {domain_, queue_, std::string{kind}, array_literal(msg_ids),
        array_literal(ids), array_literal(attempts), claims_of(g.xs),
        array_literal(max_attempts), array_literal(error_types),
        array_literal(codes), array_literal(msgs), array_literal(details),
        array_literal(reply_tos), array_literal(replies)},
       record_batches_ ? "cmdbus_fail_final_claimed_rec"
                       : "cmdbus_fail_final_claimed"});
    groups.emplace_back(&g, sts.size() - 1);
  };
  add_final("PERMANENT", permanent);
  add_final("EXHAUSTED", exhausted);
  add_final("BUSINESS_RULE", business);
  sts.push_back({"COMMIT", {}});
  std::vector<result> results;
  try {
    results = conn_.pipeline(sts);
  } catch (...) {
    rollback_if_open(conn_);
    throw;
  }
  out.states.assign(items.size(), write_state::stale);
  for (auto& [gp, at] : groups) {
    auto& res = results[at];
    auto& g = *gp;
    bool have_states = false;
    for (int row = 0; row < res.rows(); ++row) {
      if (!res.is_null(row, 2)) {
        auto states = parse_states(res.text(row, 2), g.xs.size());
        for (size_t k = 0; k < states.size(); ++k)
          out.states[g.at[k]] = states[k];
        have_states = true;
      } else if (!res.is_null(row, 0) && res.boolean(row, 1)) {
        if (auto id = uuid::parse(res.text(row, 0)))
          out.completed_batches.push_back(*id);
      }
    }
    if (!have_states)
      throw std::runtime_error("the database returned no claim states");
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (out.states[i] == write_state::stale)
      out.stale.push_back(items[i].rc.msg_id);
  return out;
}

reschedule_result
worker_store::reschedule(const std::vector<retry_command>& items) {
  reschedule_result out;
  if (items.empty())
    return out;
  std::vector<int64_t> msg_ids, attempts, max_attempts, backoffs;
  std::vector<std::string> ids, claims, codes, msgs;
  for (auto& x : items) {
    msg_ids.push_back(x.rc.msg_id);
    ids.push_back(x.rc.cmd.command_id.to_string());
    attempts.push_back(x.rc.attempt);
    claims.push_back(x.rc.claim.to_string());
    max_attempts.push_back(x.rc.max_attempts);
    codes.push_back(x.out.error_code);
    msgs.push_back(x.out.error_message);
    backoffs.push_back(x.backoff_seconds);
  }
  connection::statement write{
    "SELECT commandbus.cmdbus_fail_transient_claimed($1, $2, $3::bigint[], "
    "$4::uuid[], $5::int[], $6::uuid[], $7::int[], $8::text[], $9::text[], "
    "$10::int[])",
    {domain_, queue_, array_literal(msg_ids), array_literal(ids),
     array_literal(attempts), array_literal(claims),
     array_literal(max_attempts), array_literal(codes), array_literal(msgs),
     array_literal(backoffs)},
    "cmdbus_fail_transient_claimed"};
  std::string states;
  if (auto claim = claim_deferred_statement(domain_, queue_, items)) {
    // Deferred deliveries are claimed first, in the same transaction.
    std::vector<result> results;
    try {
      results = conn_.pipeline(
        {{"BEGIN", {}}, std::move(*claim), std::move(write), {"COMMIT", {}}});
    } catch (...) {
      rollback_if_open(conn_);
      throw;
    }
    states = std::string{results[2].text(0, 0)};
  } else {
    auto r = conn_.exec_prepared(write.name, write.sql, write.params);
    states = std::string{r.text(0, 0)};
  }
  out.states = parse_states(states, items.size());
  for (size_t i = 0; i < items.size(); ++i)
    if (out.states[i] == write_state::stale)
      out.stale.push_back(items[i].rc.msg_id);
  return out;
}

std::vector<int64_t>
worker_store::claim_deferred(const std::vector<received_command>& xs) {
  std::vector<int64_t> claimed;
  auto st = claim_deferred_statement(domain_, queue_, xs);
  if (!st)
    return claimed;
  auto r = conn_.exec_prepared(st->name, st->sql, st->params);
  std::vector<const received_command*> deferred;
  for (auto& x : xs)
    if (x.deferred)
      deferred.push_back(&x);
  auto owned = parse_booleans(r.text(0, 0), deferred.size());
  for (size_t i = 0; i < deferred.size(); ++i)
    if (owned[i])
      claimed.push_back(deferred[i]->msg_id);
  return claimed;
}

int worker_store::extend_visibility(const std::vector<int64_t>& msg_ids,
                                    int seconds, bool keep_longer) {
  if (msg_ids.empty())
    return 0;
  if (keep_longer) {
    // The queue table of a validated queue name; the values are parameters.
    auto table = queue_table(queue_);
    auto r = conn_.exec_prepared(
      "cmdbus_keep_lease_" + table,
      "UPDATE pgmq.\"" + table
        + "\" SET vt = GREATEST(vt, clock_timestamp() + make_interval(secs => "
          "$2::int)) WHERE msg_id = ANY($1::bigint[])",
      {array_literal(msg_ids), to_param(seconds)});
    return static_cast<int>(r.affected_rows());
  }
  auto r = conn_.exec_prepared(
    "cmdbus_extend_visibility",
    "SELECT commandbus.cmdbus_extend_visibility($1, $2::bigint[], $3::int)",
    {queue_, array_literal(msg_ids), to_param(seconds)});
  return static_cast<int>(r.int64(0, 0));
}

std::vector<uuid>
worker_store::claim_batch_deliveries(const std::vector<uuid>* batch_ids,
                                     int lease_seconds, int limit,
                                     const std::optional<uuid>& claimer) {
  std::optional<std::string> ids;
  if (batch_ids) {
    std::vector<std::string> texts;
    for (auto& id : *batch_ids)
      texts.push_back(id.to_string());
    ids = array_literal(texts);
  }
  std::optional<std::string> token;
  if (claimer)
    token = claimer->to_string();
  auto r = conn_.query(
    "SELECT batch_id FROM commandbus.cmdbus_claim_batch_deliveries($1, "
    "$2::uuid[], $3::int, $4::int, $5::uuid)",
    domain_, ids, std::to_string(lease_seconds), std::to_string(limit), token);
  std::vector<uuid> claimed;
  for (int row = 0; row < r.rows(); ++row)
    if (auto id = uuid::parse(r.text(row, 0)))
      claimed.push_back(*id);
  return claimed;
}

int worker_store::mark_batches_delivered(const std::vector<uuid>& batch_ids) {
  if (batch_ids.empty())
    return 0;
  std::vector<std::string> texts;
  for (auto& id : batch_ids)
    texts.push_back(id.to_string());
  return static_cast<int>(
    conn_
      .query("SELECT commandbus.cmdbus_mark_batches_delivered($1, $2::uuid[])",
             domain_, array_literal(texts))
      .int64(0, 0));
}

} // namespace cmdbus::db
