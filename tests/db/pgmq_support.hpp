#pragma once

// Shared fixtures of the PGMQ tests (tests/db/pgmq_*_test.cpp): PGMQ's error
// texts, result helpers, and the test fixture PgmqTest with one suite class per
// area.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/sql/bundle.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::pgmq_test {

using db::errc;

inline constexpr const char* invalid_chars_msg
  = "queue name contains invalid characters: $, ;, --, or \\'";
inline constexpr const char* too_long_msg
  = "queue name is too long, maximum length is 47 characters";
inline constexpr const char* partman_msg
  = "pg_partman is required for partitioned queues";

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

inline std::vector<int64_t> ints(const db::result& r, int col = 0) {
  std::vector<int64_t> out;
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(r.int64(i, col));
  return out;
}

inline std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (auto i = from; i <= to; ++i)
    out.push_back(i);
  return out;
}

inline std::string pad_to(std::string name, size_t len, char fill = 'x') {
  if (name.size() < len)
    name.append(len - name.size(), fill);
  return name;
}

/// Runs `f`, expecting a database error with `code` and exactly `message`.
inline void expect_error(const std::function<void()>& f, errc code,
                         const std::string& message) {
  try {
    f();
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), code)
      << "sqlstate " << e.sqlstate() << ": " << e.what();
    EXPECT_EQ(std::string{e.what()}, message);
    return;
  }
  ADD_FAILURE() << "expected error: " << message;
}

#define EXPECT_PG_ERROR(expr, code, message)                                   \
  do {                                                                         \
    SCOPED_TRACE(#expr);                                                       \
    expect_error([&] { (void) (expr); }, code, message);                       \
  } while (false)

/// Base fixture: one connection, helpers, and cleanup of created queues.
class PgmqTest : public ::testing::Test {
protected:
  db::connection conn = test::connect();

  ~PgmqTest() override {
    try {
      auto c = test::connect();
      for (auto& name : created_) {
        c.query("SELECT pgmq.drop_queue($1::text)", name);
        // Case variants share tables: the second drop finds none and,
        // like PGMQ, leaves its meta row.
        c.query("DELETE FROM pgmq.meta WHERE queue_name = $1::text", name);
      }
    } catch (...) {
      // Leftover queues are harmless (unique names).
    }
  }

  /// Remembers `name` for dropping at the end of the test.
  std::string track(std::string name) {
    created_.push_back(name);
    return name;
  }

  /// Creates a queue with a unique name via pgmq.create.
  std::string new_queue(const std::string& prefix = "pq") {
    auto name = track(test::unique_name(prefix));
    conn.query("SELECT pgmq.create($1::text)", name);
    return name;
  }

  int64_t send(const std::string& q, const std::string& msg = "{}") {
    auto r = conn.query("SELECT * FROM pgmq.send($1::text, $2::jsonb)", q, msg);
    EXPECT_EQ(r.rows(), 1);
    return r.int64(0, 0);
  }

  std::vector<int64_t> read_ids(const std::string& q, int vt, int qty) {
    return ints(conn.query(
      "SELECT msg_id FROM pgmq.read($1::text, $2::integer, $3::integer)", q, vt,
      qty));
  }

  template <class... Ts>
  int64_t scalar(const std::string& sql, const Ts&... xs) {
    auto r = conn.query(sql, xs...);
    EXPECT_EQ(r.rows(), 1) << sql;
    return r.int64(0, 0);
  }

  int64_t count_rows(const std::string& table) {
    return conn.exec("SELECT count(*) FROM pgmq." + table).int64(0, 0);
  }

  /// Number of pgmq tables and meta rows whose name contains `token`.
  int64_t objects_named_like(const std::string& token) {
    return scalar(
      "SELECT (SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq' "
      "        AND strpos(tablename, $1::text) > 0) "
      "     + (SELECT count(*) FROM pgmq.meta WHERE strpos(queue_name, "
      "$1::text) > 0)",
      token);
  }

private:
  std::vector<std::string> created_;
};

class PgmqCatalog : public PgmqTest {};
class PgmqCreate : public PgmqTest {};
class PgmqQueueName : public PgmqTest {};
class PgmqPartitioned : public PgmqTest {};
class PgmqSend : public PgmqTest {};
class PgmqSendBatch : public PgmqTest {};
class PgmqRead : public PgmqTest {};
class PgmqReadWithPoll : public PgmqTest {};
class PgmqPop : public PgmqTest {};
class PgmqSetVt : public PgmqTest {};
class PgmqDelete : public PgmqTest {};
class PgmqArchive : public PgmqTest {};
class PgmqPurge : public PgmqTest {};
class PgmqDrop : public PgmqTest {};
class PgmqMetrics : public PgmqTest {};
class PgmqIsolation : public PgmqTest {};
class PgmqConcurrency : public PgmqTest {};

} // namespace cmdbus::pgmq_test
