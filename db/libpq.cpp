#include "cmdbus/db/libpq.hpp"

#include <algorithm>
#include <cerrno>

#include <poll.h>
#include <sys/socket.h>

namespace cmdbus::db::detail {

std::string trim(std::string s) {
  while (!s.empty()
         && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  return s;
}

error make_error(PGconn* conn, const PGresult* res) {
  std::string state;
  std::string msg;
  std::string detail;
  std::string constraint;
  if (res != nullptr) {
    if (const char* s = PQresultErrorField(res, PG_DIAG_SQLSTATE))
      state = s;
    if (const char* d = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL))
      detail = d;
    if (const char* c = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME))
      constraint = c;
    if (const char* m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY))
      msg = m;
    else
      msg = trim(PQresultErrorMessage(res));
  }
  if (msg.empty())
    msg = trim(PQerrorMessage(conn));
  if (msg.empty())
    msg = "unknown database error";
  auto code = classify_sqlstate(state);
  if (code == errc::other && PQstatus(conn) != CONNECTION_OK)
    code = errc::connection;
  return error{code, std::move(state), msg, std::move(detail),
               std::move(constraint)};
}

result checked(PGconn* conn, PGresult* res) {
  if (res == nullptr)
    throw make_error(conn, nullptr);
  switch (PQresultStatus(res)) {
    case PGRES_COMMAND_OK:
    case PGRES_TUPLES_OK:
    case PGRES_EMPTY_QUERY:
    case PGRES_SINGLE_TUPLE: return result{res};
    default: {
      auto err = make_error(conn, res);
      PQclear(res);
      throw err;
    }
  }
}

std::vector<const char*> param_values(const std::vector<param>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (auto& p : params)
    values.push_back(p ? p->c_str() : nullptr);
  return values;
}

short wait_socket(PGconn* conn, short events, int timeout_ms) {
  int fd = PQsocket(conn);
  if (fd < 0)
    throw error{errc::connection, "", "connection has no socket"};
  pollfd pfd{fd, events, 0};
  for (;;) {
    int rc = ::poll(&pfd, 1, timeout_ms);
    if (rc > 0)
      return pfd.revents;
    if (rc == 0)
      return 0;
    if (errno != EINTR)
      throw error{errc::connection, "", "poll on the connection failed"};
  }
}

std::optional<reply_limit>
limit_from_now(const std::optional<std::chrono::milliseconds>& timeout) {
  if (!timeout)
    return std::nullopt;
  return reply_limit{std::chrono::steady_clock::now() + *timeout, *timeout};
}

int time_left(PGconn* conn, const std::string& target,
              const std::optional<reply_limit>& limit) {
  if (!limit)
    return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                limit->deadline - std::chrono::steady_clock::now())
                .count();
  if (left <= 0)
    abandon(conn, target, *limit);
  return static_cast<int>(std::min<int64_t>(left, 24 * 3600 * 1000));
}

void abandon(PGconn* conn, const std::string& target,
             const reply_limit& limit) {
  // A stopped backend (SIGSTOP, a frozen VM) or a network that holds the
  // packets never answers, and the server's statement_timeout cannot fire
  // in a backend that does not run. Shutting the socket down ends the
  // wait: libpq reads the end and marks the connection broken, and the
  // server ends the session when it runs again (rolling back whatever it
  // had not committed).
  int fd = PQsocket(conn);
  if (fd >= 0)
    ::shutdown(fd, SHUT_RDWR);
  PQconsumeInput(conn);
  throw error{errc::connection, "",
              "no answer from " + target + " within "
                + std::to_string(limit.timeout.count())
                + " ms (a stalled server or network): the connection was "
                  "closed; whether its last statement took effect is unknown"};
}

void await_result(PGconn* conn, const std::string& target,
                  const std::optional<reply_limit>& limit) {
  if (!limit)
    return;
  while (PQisBusy(conn) == 1) {
    auto ready = wait_socket(conn, POLLIN, time_left(conn, target, limit));
    // A broken connection: PQgetResult reports it.
    if (ready != 0 && PQconsumeInput(conn) != 1)
      return;
  }
}

void flush(PGconn* conn, const std::string& target,
           const std::optional<reply_limit>& limit) {
  for (;;) {
    int rc = PQflush(conn);
    if (rc == 0)
      return;
    if (rc < 0)
      throw make_error(conn, nullptr);
    // The server may be writing to us (notices, an early error) while we
    // write to it: reading keeps both sides moving.
    auto ready = wait_socket(conn, POLLIN | POLLOUT,
                             time_left(conn, target, limit));
    if ((ready & POLLIN) != 0 && PQconsumeInput(conn) != 1)
      throw make_error(conn, nullptr);
  }
}

} // namespace cmdbus::db::detail
