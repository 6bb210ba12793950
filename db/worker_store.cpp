#include "cmdbus/db/worker_store.hpp"

#include "cmdbus/db/queue_name.hpp"
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

receive_result worker_store::receive(int vt_seconds, int qty) {
  receive_result out;
  if (qty <= 0)
    return out;
  auto r = conn_.exec_prepared(
    "cmdbus_receive",
    "SELECT msg_id, message, outcome, command_id, command_type, attempts, "
    "max_attempts, batch_id FROM commandbus.cmdbus_receive($1, $2, $3::int, "
    "$4::int)",
    {domain_, queue_, to_param(vt_seconds), to_param(qty)});
  out.read = r.rows();
  for (int i = 0; i < r.rows(); ++i) {
    auto msg_id = r.int64(i, 0);
    std::string status{r.text(i, 2)};
    if (status != "OK") {
      // Never log or keep payloads: the id is what operators need.
      out.rejected.push_back({msg_id, status, {}, {}});
      continue;
    }
    received_command rc;
    rc.msg_id = msg_id;
    rc.attempt = static_cast<int>(r.int64(i, 5));
    rc.max_attempts = static_cast<int>(r.int64(i, 6));
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
  return out;
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

// The statement of one finish step: `call` (a V006 *_owned function)
// returns (batch_id, batch_complete, stale_msg_ids) rows; with `record`,
// the batches that just became complete are also recorded for callback
// delivery (V005) in the same statement, so the record commits with the
// transition.
std::string finish_sql(const char* call, bool record) {
  std::string sql;
  if (!record)
    return sql.append("SELECT batch_id, batch_complete, stale_msg_ids FROM ")
      .append(call);
  return sql
    .append("WITH f AS (SELECT batch_id, batch_complete, stale_msg_ids FROM ")
    .append(call)
    .append("), r AS (INSERT INTO commandbus.cmdbus_batch_delivery (domain, "
            "batch_id) SELECT $1, f.batch_id FROM f WHERE f.batch_complete "
            "ON CONFLICT DO NOTHING) SELECT batch_id, batch_complete, "
            "stale_msg_ids FROM f");
}

// Appends the msg_ids of a PostgreSQL bigint[] literal ("{1,2}") to `out`.
void append_ids(std::string_view literal, std::vector<int64_t>& out) {
  int64_t value = 0;
  bool digits = false;
  for (char c : literal) {
    if (c >= '0' && c <= '9') {
      value = value * 10 + (c - '0');
      digits = true;
    } else if (digits) {
      out.push_back(value);
      value = 0;
      digits = false;
    }
  }
  if (digits)
    out.push_back(value);
}

} // namespace

finish_result worker_store::finish(const std::vector<finished_command>& items) {
  finish_result out;
  if (items.empty())
    return out;
  // Split by kind: success, and the three final failure kinds.
  std::vector<const finished_command*> ok, permanent, exhausted, business;
  for (auto& x : items) {
    if (x.out.kind == outcome_kind::success)
      ok.push_back(&x);
    else if (x.out.kind == outcome_kind::business_rule)
      business.push_back(&x);
    else if (x.exhausted || x.out.kind == outcome_kind::transient)
      exhausted.push_back(&x);
    else
      permanent.push_back(&x);
  }
  std::vector<connection::statement> sts;
  sts.push_back({"BEGIN", {}});
  if (!ok.empty()) {
    std::vector<int64_t> msg_ids, attempts;
    std::vector<std::string> ids, has_result;
    std::vector<std::optional<std::string>> reply_tos, replies;
    for (auto* x : ok) {
      msg_ids.push_back(x->rc.msg_id);
      attempts.push_back(x->rc.attempt);
      ids.push_back(x->rc.cmd.command_id.to_string());
      has_result.push_back(x->out.result.is_null() ? "f" : "t");
      auto rep = reply_for(*x);
      reply_tos.push_back(rep ? x->rc.cmd.reply_to : std::nullopt);
      replies.push_back(rep);
    }
    sts.push_back(
      {finish_sql("commandbus.cmdbus_complete_owned($1, $2, $3::bigint[], "
                  "$4::uuid[], $5::int[], $6::boolean[], $7::text[], "
                  "$8::jsonb[])",
                  record_batches_),
       {domain_, queue_, array_literal(msg_ids), array_literal(ids),
        array_literal(attempts), array_literal(has_result),
        array_literal(reply_tos), array_literal(replies)},
       record_batches_ ? "cmdbus_complete_owned_rec"
                       : "cmdbus_complete_owned"});
  }
  auto add_final = [&](const char* kind,
                       const std::vector<const finished_command*>& xs) {
    if (xs.empty())
      return;
    std::vector<int64_t> msg_ids, attempts, max_attempts;
    std::vector<std::string> ids, error_types, codes, msgs, details;
    std::vector<std::optional<std::string>> reply_tos, replies;
    for (auto* x : xs) {
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
      {finish_sql("commandbus.cmdbus_fail_final_owned($1, $2, $3, "
                  "$4::bigint[], $5::uuid[], $6::int[], $7::int[], "
                  "$8::text[], $9::text[], $10::text[], $11::jsonb[], "
                  "$12::text[], $13::jsonb[])",
                  record_batches_),
       {domain_, queue_, std::string{kind}, array_literal(msg_ids),
        array_literal(ids), array_literal(attempts),
        array_literal(max_attempts), array_literal(error_types),
        array_literal(codes), array_literal(msgs), array_literal(details),
        array_literal(reply_tos), array_literal(replies)},
       record_batches_ ? "cmdbus_fail_final_owned_rec"
                       : "cmdbus_fail_final_owned"});
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
  for (size_t i = 1; i + 1 < results.size(); ++i) {
    for (int row = 0; row < results[i].rows(); ++row) {
      if (!results[i].is_null(row, 2))
        append_ids(results[i].text(row, 2), out.stale);
      else if (!results[i].is_null(row, 0) && results[i].boolean(row, 1))
        if (auto id = uuid::parse(results[i].text(row, 0)))
          out.completed_batches.push_back(*id);
    }
  }
  return out;
}

std::vector<int64_t>
worker_store::reschedule(const std::vector<retry_command>& items) {
  std::vector<int64_t> stale;
  if (items.empty())
    return stale;
  std::vector<int64_t> msg_ids, attempts, max_attempts, backoffs;
  std::vector<std::string> ids, codes, msgs;
  for (auto& x : items) {
    msg_ids.push_back(x.rc.msg_id);
    ids.push_back(x.rc.cmd.command_id.to_string());
    attempts.push_back(x.rc.attempt);
    max_attempts.push_back(x.rc.max_attempts);
    codes.push_back(x.out.error_code);
    msgs.push_back(x.out.error_message);
    backoffs.push_back(x.backoff_seconds);
  }
  auto r = conn_.exec_prepared(
    "cmdbus_fail_transient_owned",
    "SELECT commandbus.cmdbus_fail_transient_owned($1, $2, $3::bigint[], "
    "$4::uuid[], $5::int[], $6::int[], $7::text[], $8::text[], $9::int[])",
    {domain_, queue_, array_literal(msg_ids), array_literal(ids),
     array_literal(attempts), array_literal(max_attempts), array_literal(codes),
     array_literal(msgs), array_literal(backoffs)});
  append_ids(r.text(0, 0), stale);
  return stale;
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
                                     int lease_seconds, int limit) {
  std::optional<std::string> ids;
  if (batch_ids) {
    std::vector<std::string> texts;
    for (auto& id : *batch_ids)
      texts.push_back(id.to_string());
    ids = array_literal(texts);
  }
  auto r = conn_.query(
    "SELECT batch_id FROM commandbus.cmdbus_claim_batch_deliveries($1, "
    "$2::uuid[], $3::int, $4::int)",
    domain_, ids, std::to_string(lease_seconds), std::to_string(limit));
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
