#include "tests/support/test_db.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <random>
#include <stdexcept>

#include <libpq-fe.h>
#include <unistd.h>

#include "cmdbus/db/migrate.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/sql/bundle.hpp"

namespace cmdbus::test {

namespace {

std::string random_token(size_t n) {
  static constexpr char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  static thread_local std::mt19937_64 rng{std::random_device{}()
                                          ^ static_cast<uint64_t>(getpid())};
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += alphabet[rng() % (sizeof(alphabet) - 1)];
  return out;
}

std::string dbname_of(const std::string& dsn) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(dsn.c_str(), &err);
  if (opts == nullptr) {
    PQfreemem(err);
    throw std::invalid_argument("invalid test DSN");
  }
  std::string out;
  for (auto* o = opts; o->keyword != nullptr; ++o)
    if (std::string{o->keyword} == "dbname" && o->val != nullptr)
      out = o->val;
  PQconninfoFree(opts);
  return out;
}

// Scratch databases are named after the test database (when its name is a
// short, plain lower-case identifier), so that test runs sharing one server
// (scripts/test, scripts/sanitize) can tell their databases apart.
std::string scratch_prefix() {
  auto db = dbname_of(dsn());
  bool plain = !db.empty() && db.size() <= 27 && db[0] >= 'a' && db[0] <= 'z';
  for (char c : db)
    plain = plain
            && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  return (plain ? db : std::string{"cmdbus"}) + "_scratch";
}

} // namespace

std::string quote_value(const std::string& v) {
  std::string out = "'";
  for (char c : v) {
    if (c == '\'' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "'";
}

const std::string& dsn() {
  static std::once_flag once;
  static std::string value;
  std::call_once(once, [] {
    const char* env = std::getenv("CMDBUS_TEST_DSN");
    if (env == nullptr || *env == '\0')
      throw std::runtime_error(
        "CMDBUS_TEST_DSN is not set: run the tests with scripts/test "
        "(it starts PostgreSQL and sets it)");
    value = env;
    auto conn = db::connection::open(value);
    db::migrate(conn, sql::pgmq_files(), sql::commandbus_files());
  });
  return value;
}

db::connection connect() {
  return db::connection::open(dsn());
}

std::string unique_name(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + "_" + random_token(6) + "_" + std::to_string(++counter);
}

std::string new_uuid() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 32; ++i) {
    auto nibble = static_cast<unsigned>(rng() & 0xf);
    if (i == 12)
      nibble = 4;
    else if (i == 16)
      nibble = 8 | (nibble & 3);
    if (i == 8 || i == 12 || i == 16 || i == 20)
      out += '-';
    out += hex[nibble];
  }
  return out;
}

std::string with_setting(const std::string& dsn, const std::string& key,
                         const std::string& value) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(dsn.c_str(), &err);
  if (opts == nullptr) {
    PQfreemem(err);
    throw std::invalid_argument("invalid test DSN");
  }
  std::string out;
  for (auto* o = opts; o->keyword != nullptr; ++o) {
    if (o->keyword == key || o->val == nullptr)
      continue;
    out += std::string{o->keyword} + "=" + quote_value(o->val) + " ";
  }
  PQconninfoFree(opts);
  return out + key + "=" + quote_value(value);
}

std::string with_dbname(const std::string& dsn, const std::string& dbname) {
  return with_setting(dsn, "dbname", dbname);
}

scratch_database::scratch_database()
  : name_(unique_name(scratch_prefix())),
    dsn_(with_dbname(test::dsn(), name_)) {
  db::validate_queue_name(name_); // the same strict identifier pattern
  auto admin = db::connection::open(with_dbname(test::dsn(), "postgres"));
  admin.exec("CREATE DATABASE " + name_);
}

scratch_database::~scratch_database() {
  try {
    auto admin = db::connection::open(with_dbname(test::dsn(), "postgres"));
    admin.exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  } catch (const std::exception&) {
    // A leftover scratch database is harmless; never throw from a destructor.
  }
}

} // namespace cmdbus::test
