#include "cmdbus/db/pipeline.hpp"

#include <optional>

#include <poll.h>

#include "cmdbus/db/libpq.hpp"

namespace cmdbus::db::detail {

namespace {

// Restores blocking mode and leaves pipeline mode when a pipeline ends,
// however it ends. A pipeline that cannot be left (its results are out of
// step with what was sent) closes the connection: its owner reconnects,
// rather than sending on a session in an unknown state.
struct pipeline_guard {
  PGconn*& conn;
  ~pipeline_guard() {
    if (conn == nullptr)
      return;
    if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF) {
      // Drain whatever is left so that the connection can leave the mode.
      // Two nulls in a row mean nothing more will come.
      int nulls = 0;
      while (PQstatus(conn) == CONNECTION_OK && nulls < 2) {
        PGresult* r = PQgetResult(conn);
        if (r == nullptr) {
          if (PQexitPipelineMode(conn) == 1)
            break;
          ++nulls;
          continue;
        }
        nulls = 0;
        PQclear(r);
      }
      if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF) {
        PQfinish(conn);
        conn = nullptr;
        return;
      }
    }
    PQsetnonblocking(conn, 0);
  }
};

// Queues every statement and the sync, then flushes them to the server.
void send_all(PGconn* conn, const std::string& target,
              const std::vector<connection::statement>& statements,
              const std::optional<reply_limit>& limit) {
  // Non-blocking sends, so that a large pipeline cannot deadlock with the
  // server blocked on writing results we are not reading yet.
  PQsetnonblocking(conn, 1);
  for (auto& st : statements) {
    auto values = param_values(st.params);
    auto n = static_cast<int>(values.size());
    int sent = st.name.empty()
                 ? PQsendQueryParams(conn, st.sql.c_str(), n, nullptr,
                                     values.data(), nullptr, nullptr, 0)
                 : PQsendQueryPrepared(conn, st.name.c_str(), n, values.data(),
                                       nullptr, nullptr, 0);
    if (sent != 1)
      throw make_error(conn, nullptr);
  }
  if (PQpipelineSync(conn) != 1)
    throw make_error(conn, nullptr);
  flush(conn, target, limit);
  PQsetnonblocking(conn, 0);
}

// Reads the results of `count` statements up to the sync; throws the first
// failure once all are read.
std::vector<result> receive_all(PGconn* conn, const std::string& target,
                                size_t count,
                                const std::optional<reply_limit>& limit) {
  std::vector<result> out;
  std::optional<error> first_error;
  size_t index = 0;
  for (;;) {
    await_result(conn, target, limit);
    PGresult* res = PQgetResult(conn);
    if (res == nullptr) {
      // End of one statement's results. A lost connection ends every
      // statement this way and never delivers the sync: report it instead
      // of waiting for it.
      if (PQstatus(conn) != CONNECTION_OK) {
        if (first_error && first_error->code() == errc::connection)
          throw *first_error;
        throw error{errc::connection, "",
                    "connection to " + target
                      + " lost: " + trim(PQerrorMessage(conn))};
      }
      if (++index > count) {
        // The session is in an unknown state (the guard closes it).
        if (first_error)
          throw *first_error;
        throw error{errc::connection, "",
                    "pipeline results out of step with its statements on "
                      + target};
      }
      continue;
    }
    auto status = PQresultStatus(res);
    if (status == PGRES_PIPELINE_SYNC) {
      PQclear(res);
      break;
    }
    if (index >= count) {
      PQclear(res);
      continue;
    }
    if (status == PGRES_PIPELINE_ABORTED) {
      PQclear(res);
      if (!first_error)
        first_error = error{errc::other, "", "pipeline aborted"};
      out.emplace_back(nullptr);
      continue;
    }
    if (status == PGRES_FATAL_ERROR) {
      if (!first_error) {
        first_error = make_error(conn, res);
        first_error->set_statement_index(static_cast<int>(index));
      }
      PQclear(res);
      out.emplace_back(nullptr);
      continue;
    }
    out.emplace_back(res);
  }
  if (PQexitPipelineMode(conn) != 1)
    throw make_error(conn, nullptr);
  if (first_error)
    throw *first_error;
  return out;
}

} // namespace

std::vector<result>
run_pipeline(PGconn*& conn, const std::string& target,
             const std::vector<connection::statement>& statements,
             const std::optional<reply_limit>& limit) {
  auto* c = conn;
  if (PQenterPipelineMode(c) != 1)
    throw make_error(c, nullptr);
  pipeline_guard guard{conn};
  send_all(c, target, statements, limit);
  return receive_all(c, target, statements.size(), limit);
}

} // namespace cmdbus::db::detail
