#pragma once

// The shared fixture of the command bus tests (tests/db/bus_*_test.cpp):
// a pool with a bus and a separate connection for checks, request makers,
// SQL readers of the rows a send writes, and the two bulk write paths.
//
// Every test works in its own domain(s), so tests never see each other's
// rows. State is checked with SQL on a separate connection, not only through
// the API under test.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::test::bus {

using namespace std::chrono_literals;

using opt_str = std::optional<std::string>;

// -- setup -------------------------------------------------------------------

inline db::pool_options
pool_options(size_t max_size, std::chrono::milliseconds acquire_timeout = 10s) {
  db::pool_options opts;
  opts.dsn = test::dsn();
  opts.max_size = max_size;
  opts.acquire_timeout = acquire_timeout;
  return opts;
}

/// Set by the suites that run with both bulk write paths (see bulk_path).
inline std::optional<size_t> copy_threshold_under_test;

/// A pool, a bus on it and a separate connection for checks.
struct bus_env {
  explicit bus_env(size_t max_size = 4, command_bus_options bus_opts = {},
                   std::chrono::milliseconds acquire_timeout = 10s)
      : pool(pool_options(max_size, acquire_timeout)),
        bus(pool, with_path(bus_opts)), conn(test::connect()) {
    // nop
  }
  db::pool pool;
  command_bus bus;
  db::connection conn;

  static command_bus_options with_path(command_bus_options opts) {
    if (copy_threshold_under_test)
      opts.copy_threshold = *copy_threshold_under_test;
    return opts;
  }
};

inline command_bus_options chunked(size_t chunk_size) {
  command_bus_options opts;
  opts.chunk_size = chunk_size;
  return opts;
}

inline send_request make_req(const std::string& domain,
                             const std::string& type = "DebitAccount",
                             const std::string& data = R"({"amount":100})") {
  send_request req;
  req.domain = domain;
  req.command_type = type;
  req.command_id = uuid::random();
  req.data = json::parse(data);
  return req;
}

inline batch_command make_cmd(const std::string& type = "DebitAccount",
                              const std::string& data = R"({"amount":1})") {
  batch_command c;
  c.command_type = type;
  c.command_id = uuid::random();
  c.data = json::parse(data);
  return c;
}

inline std::string queue_of(const std::string& domain) {
  return domain + "__commands";
}

// -- state checks (SQL) ------------------------------------------------------

inline int64_t command_rows(db::connection& c, const std::string& domain) {
  return c.query("SELECT count(*) FROM commandbus.command WHERE domain = $1",
                 domain)
    .int64(0, 0);
}

inline bool command_row_exists(db::connection& c, const std::string& domain,
                               const uuid& id) {
  return c
           .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 "
                  "AND command_id = $2::uuid",
                  domain, id.to_string())
           .int64(0, 0)
         == 1;
}

inline int64_t audit_rows(db::connection& c, const std::string& domain,
                          const std::string& event_type = "SENT") {
  return c
    .query("SELECT count(*) FROM commandbus.audit WHERE domain = $1 AND "
           "event_type = $2",
           domain, event_type)
    .int64(0, 0);
}

inline bool queue_exists(db::connection& c, const std::string& queue) {
  return c.query("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1", queue)
           .int64(0, 0)
         > 0;
}

/// Messages in the queue (0 when the queue does not exist).
inline int64_t queue_length(db::connection& c, const std::string& queue) {
  if (!queue_exists(c, queue))
    return 0;
  db::validate_queue_name(queue);
  return c.exec("SELECT count(*) FROM pgmq.q_" + queue).int64(0, 0);
}

/// Messages in the domain's queue that carry `id`.
inline int64_t messages_for(db::connection& c, const std::string& domain,
                            const uuid& id) {
  auto queue = queue_of(domain);
  if (!queue_exists(c, queue))
    return 0;
  return c
    .query("SELECT count(*) FROM pgmq.q_" + queue
             + " WHERE message->>'command_id' = $1",
           id.to_string())
    .int64(0, 0);
}

/// The PostgreSQL-normalised text of a jsonb value.
inline std::string jsonb_text(db::connection& c, const std::string& json_text) {
  return c.query("SELECT $1::jsonb::text", json_text).opt_text(0, 0).value();
}

/// A PGMQ command message as stored.
struct queued_message {
  std::string keys; // sorted, comma-separated
  opt_str domain;
  opt_str command_type;
  opt_str command_id;
  opt_str correlation_id;
  std::string data; // jsonb text
  bool has_reply_to = false;
  opt_str reply_to;
};

inline std::optional<queued_message> read_message(db::connection& c,
                                                  const std::string& queue,
                                                  int64_t msg_id) {
  db::validate_queue_name(queue);
  auto r = c.query(
    "SELECT (SELECT string_agg(k, ',' ORDER BY k) FROM "
    "jsonb_object_keys(message) AS k), message->>'domain', "
    "message->>'command_type', message->>'command_id', "
    "message->>'correlation_id', (message->'data')::text, "
    "message ? 'reply_to', message->>'reply_to' FROM pgmq.q_"
      + queue + " WHERE msg_id = $1::bigint",
    msg_id);
  if (r.rows() == 0)
    return std::nullopt;
  queued_message m;
  m.keys = std::string{r.text(0, 0)};
  m.domain = r.opt_text(0, 1);
  m.command_type = r.opt_text(0, 2);
  m.command_id = r.opt_text(0, 3);
  m.correlation_id = r.opt_text(0, 4);
  m.data = std::string{r.text(0, 5)};
  m.has_reply_to = r.boolean(0, 6);
  m.reply_to = r.opt_text(0, 7);
  return m;
}

/// A command row as stored.
struct command_row {
  std::string queue_name;
  std::string command_type;
  std::string status;
  int64_t attempts = -1;
  int64_t max_attempts = -1;
  std::optional<int64_t> msg_id;
  std::string reply_queue;
  opt_str correlation_id;
  opt_str batch_id;
};

inline std::optional<command_row> read_row(db::connection& c,
                                           const std::string& domain,
                                           const uuid& id) {
  auto r = c.query("SELECT queue_name, command_type, status, attempts, "
                   "max_attempts, msg_id, reply_queue, correlation_id, "
                   "batch_id FROM commandbus.command WHERE domain = $1 AND "
                   "command_id = $2::uuid",
                   domain, id.to_string());
  if (r.rows() == 0)
    return std::nullopt;
  command_row row;
  row.queue_name = std::string{r.text(0, 0)};
  row.command_type = std::string{r.text(0, 1)};
  row.status = std::string{r.text(0, 2)};
  row.attempts = r.int64(0, 3);
  row.max_attempts = r.int64(0, 4);
  if (!r.is_null(0, 5))
    row.msg_id = r.int64(0, 5);
  row.reply_queue = std::string{r.text(0, 6)};
  row.correlation_id = r.opt_text(0, 7);
  row.batch_id = r.opt_text(0, 8);
  return row;
}

/// The SENT audit rows of a command.
struct sent_audit {
  int64_t count = 0;
  std::string keys; // sorted, comma-separated
  opt_str command_type;
  opt_str correlation_id;
  opt_str reply_to;
  opt_str msg_id;
  opt_str batch_id;
  opt_str batch_id_type; // jsonb_typeof, nullopt when the key is absent
};

inline sent_audit read_sent(db::connection& c, const std::string& domain,
                            const uuid& id) {
  auto r = c.query(
    "SELECT count(*) OVER (), (SELECT string_agg(k, ',' ORDER BY k) FROM "
    "jsonb_object_keys(a.details_json) AS k), "
    "a.details_json->>'command_type', a.details_json->>'correlation_id', "
    "a.details_json->>'reply_to', a.details_json->>'msg_id', "
    "a.details_json->>'batch_id', jsonb_typeof(a.details_json->'batch_id') "
    "FROM commandbus.audit a WHERE a.domain = $1 AND a.command_id = $2::uuid "
    "AND a.event_type = 'SENT' ORDER BY a.audit_id",
    domain, id.to_string());
  sent_audit out;
  if (r.rows() == 0)
    return out;
  out.count = r.int64(0, 0);
  out.keys = std::string{r.text(0, 1)};
  out.command_type = r.opt_text(0, 2);
  out.correlation_id = r.opt_text(0, 3);
  out.reply_to = r.opt_text(0, 4);
  out.msg_id = r.opt_text(0, 5);
  out.batch_id = r.opt_text(0, 6);
  out.batch_id_type = r.opt_text(0, 7);
  return out;
}

inline void set_status(db::connection& c, const std::string& domain,
                       const uuid& id, const std::string& status) {
  c.query("UPDATE commandbus.command SET status = $3 WHERE domain = $1 AND "
          "command_id = $2::uuid",
          domain, id.to_string(), status);
}

inline void set_created_at(db::connection& c, const std::string& domain,
                           const uuid& id, const std::string& ts) {
  c.query("UPDATE commandbus.command SET created_at = $3::timestamptz WHERE "
          "domain = $1 AND command_id = $2::uuid",
          domain, id.to_string(), ts);
}

inline void insert_batch_row(db::connection& c, const std::string& domain,
                             const uuid& id) {
  c.query("INSERT INTO commandbus.batch (domain, batch_id, status, "
          "total_count) VALUES ($1, $2::uuid, 'PENDING', 1)",
          domain, id.to_string());
}

inline std::vector<std::string>
ids_of(const std::vector<command_metadata>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.command_id.to_string());
  return out;
}

// -- concurrency helpers -----------------------------------------------------

/// Releases all `n` threads at once when the last one arrives.
class start_gate {
public:
  explicit start_gate(int n) : n_(n) {
    // nop
  }
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock{mtx_};
    if (++arrived_ >= n_) {
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [this] { return arrived_ >= n_; });
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  int n_;
  int arrived_ = 0;
};

// -- notifications -----------------------------------------------------------

/// Collects notifications until `want` arrived or `budget` passed.
inline std::vector<std::string>
collect_notifications(db::connection& listener, size_t want,
                      std::chrono::milliseconds budget = 5s) {
  std::vector<std::string> out;
  auto deadline = std::chrono::steady_clock::now() + budget;
  while (out.size() < want) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    auto got = listener.wait_for_notifications(left);
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

inline size_t count_of(const std::vector<std::string>& xs,
                       const std::string& x) {
  return static_cast<size_t>(std::count(xs.begin(), xs.end(), x));
}

// -- bulk write paths --------------------------------------------------------

// Bulk writes (send_batch, create_batch) go through one of two paths,
// INSERT ... SELECT statements for small chunks and COPY for large ones
// (command_bus_options::copy_threshold). The suites that write in bulk run
// with each path forced.
class bulk_path : public ::testing::TestWithParam<size_t> {
protected:
  void SetUp() override {
    copy_threshold_under_test = GetParam();
  }
  void TearDown() override {
    copy_threshold_under_test.reset();
  }
};

inline std::string
bulk_path_name(const ::testing::TestParamInfo<size_t>& info) {
  return info.param == 1 ? "Copy" : "Statements";
}

} // namespace cmdbus::test::bus

/// Declares the parameterised suite `name` on both bulk write paths.
#define CMDBUS_BULK_SUITE(name)                                                \
  class name : public ::cmdbus::test::bus::bulk_path {};                       \
  INSTANTIATE_TEST_SUITE_P(                                                    \
    Paths, name,                                                               \
    ::testing::Values(std::numeric_limits<size_t>::max(), size_t{1}),          \
    ::cmdbus::test::bus::bulk_path_name)
