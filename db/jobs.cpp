#include "cmdbus/db/jobs.hpp"

#include <exception>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/transaction.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::db {

namespace {

// 64-bit FNV-1a: simple, fixed by its definition, the same everywhere.
uint64_t fnv1a(std::string_view prefix, std::string_view text) noexcept {
  uint64_t h = 14695981039346656037ULL;
  for (auto part : {prefix, text})
    for (unsigned char c : part) {
      h ^= c;
      h *= 1099511628211ULL;
    }
  return h;
}

} // namespace

int64_t job_lock_key(std::string_view name) noexcept {
  return static_cast<int64_t>(fnv1a("cmdbus:job:", name));
}

bool job_in_shard(std::string_view name, int index, int count) noexcept {
  if (count <= 1)
    return true;
  return static_cast<int>(fnv1a("", name) % static_cast<uint64_t>(count))
         == index;
}

const char* to_string(job_outcome x) noexcept {
  switch (x) {
    case job_outcome::ran: return "ok";
    case job_outcome::skipped: return "skipped";
    case job_outcome::failed: return "failed";
  }
  return "failed";
}

job_result run_job_once(connection& conn, const job_definition& job) {
  job_result res;
  try {
    transaction tx{conn};
    auto got = conn
                 .query("SELECT pg_try_advisory_xact_lock($1::bigint)",
                        job_lock_key(job.name))
                 .boolean(0, 0);
    if (!got) {
      // The transaction's destructor rolls back: nothing was written.
      res.outcome = job_outcome::skipped;
      return res;
    }
    job_context ctx{conn, job.name};
    job.fn(ctx);
    tx.commit();
    res.outcome = job_outcome::ran;
    res.more = ctx.more;
    for (auto& f : ctx.on_commit)
      f();
  } catch (const error& e) {
    res.outcome = job_outcome::failed;
    res.error = log::one_line(e.what());
    res.unavailable = e.is_transient() || !conn.is_open();
  } catch (const std::exception& e) {
    res.outcome = job_outcome::failed;
    res.error = log::one_line(e.what());
    res.unavailable = !conn.is_open();
  } catch (...) {
    res.outcome = job_outcome::failed;
    res.error = "the job threw a non-standard exception";
    res.unavailable = !conn.is_open();
  }
  return res;
}

void run_under_job_lock(connection& conn, std::string_view name,
                        const std::function<void(connection&)>& fn) {
  transaction tx{conn};
  conn.query("SELECT pg_advisory_xact_lock($1::bigint)", job_lock_key(name));
  fn(conn);
  tx.commit();
}

} // namespace cmdbus::db
