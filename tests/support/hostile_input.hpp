#pragma once

// The fixture of the hostile-input tests (hostile_message_test.cpp,
// hostile_payload_test.cpp): messages put on `{domain}__commands` directly
// with pgmq.send (not through command_bus::send), read by a real worker,
// with good commands sent with the bus before, between and after them.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/db/queue_name.hpp"
#include "tests/support/worker_env.hpp"

namespace cmdbus::test {

/// The status of a command in the troubleshooting queue.
inline const opt_str tsq{"IN_TROUBLESHOOTING_QUEUE"};

/// Text that would do harm if it ever reached SQL unquoted: quotes,
/// comments, placeholders, dollar quoting, backslashes, control characters.
inline const std::string nasty
  = "'; DROP TABLE commandbus.command; -- $1 \\ \\\\' \""
    " ' OR '1'='1 $$; DROP SCHEMA pgmq CASCADE; $$ "
    "%s\t\r\n\x01\x1f\x7f";

/// A domain of one test, its bus, a connection for checks, and a worker
/// whose "Ok" handler returns the command's data as its result.
class HostileInput : public ::testing::Test {
protected:
  HostileInput()
    : env_(2), conn(env_.conn), d(unique_name("hostile")),
      q(db::command_queue(d)) {
    // nop
  }

  ~HostileInput() override {
    if (w_)
      stop_worker(*w_);
  }

  // -- sending ---------------------------------------------------------------

  send_request request(const std::string& domain, const std::string& type,
                       int max_attempts = 3) {
    auto req = make_req(domain, type);
    req.max_attempts = max_attempts;
    return req;
  }

  /// Sends a good "Ok" command of `domain` with the bus.
  void good(const std::string& domain) {
    goods_.emplace_back(domain,
                        env_.bus.send(request(domain, "Ok")).command_id);
  }

  void good() {
    good(d);
  }

  /// Creates the row of a `type` command with the bus and deletes its
  /// message: the one the test puts is then the only message naming it.
  uuid row(const std::string& type = "Ok", int max_attempts = 3) {
    auto sent = env_.bus.send(request(d, type, max_attempts));
    conn.query("SELECT pgmq.delete($1, $2::bigint)", q,
               static_cast<long long>(sent.msg_id));
    return sent.command_id;
  }

  /// `tmpl` with $ID replaced by `id`, $HEX by `id` without hyphens, $UID
  /// by `id` in upper case and $D by the domain.
  std::string fill(std::string tmpl, const uuid& id = {}) const {
    auto text = id.to_string();
    auto hex = text;
    hex.erase(std::remove(hex.begin(), hex.end(), '-'), hex.end());
    auto upper = text;
    std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
    for (auto [key, value] :
         {std::pair{"$ID", text}, {"$HEX", hex}, {"$UID", upper}, {"$D", d}})
      for (auto i = tmpl.find(key); i != std::string::npos;
           i = tmpl.find(key, i + value.size()))
        tmpl.replace(i, std::string{key}.size(), value);
    return tmpl;
  }

  /// Puts `message` (JSON text, or SQL NULL) on the queue with pgmq.send;
  /// returns its msg_id.
  int64_t put(const opt_str& message) {
    return conn.query("SELECT pgmq.send($1, $2::jsonb)", q, message)
      .int64(0, 0);
  }

  /// `x` as a JSON string literal (the server quotes it).
  std::string jstr(const std::string& x) {
    return *scalar("SELECT to_jsonb($1::text)::text", x);
  }

  // -- running ---------------------------------------------------------------

  /// Runs a worker for `domains` (default: the test's) until every good
  /// command completed and the queues are empty, then sends one more good
  /// command per domain and waits for it as well.
  void run(strings domains = {}) {
    if (domains.empty())
      domains = {d};
    handler_registry reg;
    for (auto& dom : domains)
      reg.add(dom, "Ok", [this](const command& cmd, handler_context&) {
        auto size = cmd.data.text().size();
        for (auto seen = biggest.load();
             size > seen && !biggest.compare_exchange_weak(seen, size);) {
          // retry
        }
        return cmd.data;
      });
    auto cfg = make_cfg(domains);
    cfg.visibility_timeout = 30s;
    cfg.statement_timeout = 10s;
    w_ = std::make_unique<worker>(cfg, std::move(reg));
    w_->start();
    auto settled = [&] {
      for (auto& [dom, id] : goods_)
        if (!has_status(conn, dom, id, "COMPLETED"))
          return false;
      for (auto& dom : domains)
        if (queue_rows(conn, db::command_queue(dom)) != 0)
          return false;
      return true;
    };
    ASSERT_TRUE(eventually(settled, 60s)) << "a good command or a message is "
                                             "left";
    for (auto& dom : domains)
      good(dom);
    ASSERT_TRUE(eventually(settled, 30s)) << "the worker stopped processing";
    w_->stop(10s).get();
    EXPECT_EQ(w_->stats().db_errors, 0);
    EXPECT_EQ(w_->in_flight_count(), 0u);
  }

  // -- checks ----------------------------------------------------------------

  template <class... Ts>
  opt_str scalar(const std::string& sql, const Ts&... xs) {
    return test::scalar(conn, sql, xs...);
  }

  /// A column of a command of `domain` (default: the test's).
  opt_str column(const uuid& id, const std::string& col,
                 const std::string& domain = {}) {
    return test::column(conn, domain.empty() ? d : domain, id, col);
  }

  /// The audit trail of a command of `domain` (default: the test's).
  strings events(const uuid& id, const std::string& domain = {}) {
    return test::events(conn, domain.empty() ? d : domain, id);
  }

  /// `details_json ->> key` of the last audit event `event` of `id`.
  opt_str detail(const uuid& id, const std::string& event,
                 const std::string& key) {
    return scalar("SELECT details_json ->> $4 FROM commandbus.audit WHERE "
                  "domain = $1 AND command_id = $2::uuid AND event_type = $3 "
                  "ORDER BY ts DESC, audit_id DESC LIMIT 1",
                  d, id.to_string(), event, key);
  }

  /// Whether message `msg_id` is in the archive holding exactly `message`.
  bool archived_as(int64_t msg_id, const opt_str& message) {
    return scalar("SELECT (message IS NOT DISTINCT FROM $2::jsonb)::text FROM "
                  "pgmq.a_"
                    + q + " WHERE msg_id = $1",
                  static_cast<long long>(msg_id), message)
           == opt_str{"true"};
  }

  int64_t skipped_audits() {
    return std::stoll(*scalar("SELECT count(*) FROM commandbus.audit WHERE "
                              "domain = $1 AND event_type = 'RECEIVE_SKIPPED'",
                              d));
  }

  /// The message was archived on receive as naming no command of the
  /// domain: audit RECEIVE_SKIPPED {msg_id, reason UNKNOWN_COMMAND, status
  /// null} under its command id.
  void expect_unknown(int64_t msg_id, const opt_str& message, const uuid& id) {
    EXPECT_TRUE(archived_as(msg_id, message)) << "msg_id " << msg_id;
    EXPECT_EQ(scalar("SELECT count(*) FROM commandbus.audit WHERE domain = $1 "
                     "AND command_id = $2::uuid AND event_type = "
                     "'RECEIVE_SKIPPED' AND details_json = jsonb_build_object("
                     "'msg_id', $3::bigint, 'reason', 'UNKNOWN_COMMAND', "
                     "'status', NULL)",
                     d, id.to_string(), static_cast<long long>(msg_id)),
              opt_str{"1"})
      << "msg_id " << msg_id;
  }

  /// The message claimed its command but is no usable command of this
  /// domain: archived, the command in the TSQ as a permanent INVALID_MESSAGE
  /// failure with `why`, no handler run.
  void expect_invalid_message(int64_t msg_id, const opt_str& message,
                              const uuid& id, const std::string& why) {
    EXPECT_TRUE(archived_as(msg_id, message)) << "msg_id " << msg_id;
    EXPECT_EQ(column(id, "status"), tsq);
    EXPECT_EQ(column(id, "last_error_type"), opt_str{"PERMANENT"});
    EXPECT_EQ(column(id, "last_error_code"), opt_str{"INVALID_MESSAGE"});
    EXPECT_EQ(column(id, "last_error_msg"), opt_str{why});
    EXPECT_EQ(events(id), (strings{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "msg_id"),
              opt_str{std::to_string(msg_id)});
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "error_code"),
              opt_str{"INVALID_MESSAGE"});
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "error_msg"), opt_str{why});
  }

  /// The message was handled: deleted, its command COMPLETED.
  void expect_completed(int64_t msg_id, const uuid& id) {
    EXPECT_FALSE(archived(conn, q, msg_id)) << "msg_id " << msg_id;
    EXPECT_EQ(column(id, "status"), opt_str{"COMPLETED"});
    EXPECT_EQ(events(id), (strings{"SENT", "RECEIVED", "COMPLETED"}));
  }

  bus_env env_;
  db::connection& conn;
  std::string d;
  std::string q;
  std::vector<std::pair<std::string, uuid>> goods_;
  std::unique_ptr<worker> w_;
  /// The largest `data` an "Ok" handler saw, in bytes of JSON text.
  std::atomic<size_t> biggest{0};
};

// -- messages ----------------------------------------------------------------

using members = std::vector<std::pair<std::string, std::string>>;

/// A command message for $ID of the test's domain ($D) and type "Ok" with
/// each member of `changes` (name, JSON value) added, or replacing one of
/// those three, or removing it when the value is empty.
inline std::string with(const members& changes) {
  members out = {{"domain", "\"$D\""},
                 {"command_type", "\"Ok\""},
                 {"command_id", "\"$ID\""}};
  for (auto& [name, value] : changes) {
    auto i = std::find_if(out.begin(), out.end(),
                          [&key = name](auto& m) { return m.first == key; });
    if (i == out.end())
      out.emplace_back(name, value);
    else if (value.empty())
      out.erase(i);
    else
      i->second = value;
  }
  std::string text;
  for (auto& [name, value] : out)
    text += (text.empty() ? "{\"" : ",\"") + name + "\":" + value;
  return text + "}";
}

inline std::string with(const std::string& name = {},
                        const std::string& value = {}) {
  return name.empty() ? with(members{}) : with(members{{name, value}});
}

/// The error of a message that names another domain than its queue's.
inline std::string not_ours(const std::string& domain) {
  return "field \"domain\" is not the queue's domain \"" + domain + "\"";
}

} // namespace cmdbus::test
