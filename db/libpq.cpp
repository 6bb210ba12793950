#include "cmdbus/db/libpq.hpp"

#include <cerrno>

#include <poll.h>

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

} // namespace cmdbus::db::detail
