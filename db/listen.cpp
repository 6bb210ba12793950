// LISTEN / NOTIFY on a connection: subscribing to channels and waiting for
// notifications (the poller's wake-up when a command is sent).

#include <cctype>

#include <poll.h>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/libpq.hpp"
#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::db {

void connection::listen(const std::string& channel) {
  if (pooler() == pooler_mode::transaction)
    throw invalid_argument("LISTEN does not work behind a transaction pooler "
                           "(the pooler hands the listening session to other "
                           "clients): poll instead (use-notify = false)");
  // LISTEN takes no parameters: the identifier is validated first. A
  // channel is pgmq_notify_{queue}, so it may be longer than a queue name:
  // up to PostgreSQL's identifier length (63 bytes).
  constexpr size_t max_identifier_length = 63;
  bool plain = !channel.empty() && channel.size() <= max_identifier_length;
  for (char c : channel)
    plain = plain
            && (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_');
  if (!plain)
    throw invalid_argument("invalid NOTIFY channel " + printable(channel)
                           + ": 1 to 63 ASCII letters, digits or underscores "
                             "expected");
  std::string folded;
  for (char c : channel)
    folded += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  exec("LISTEN " + folded);
}

std::vector<std::string>
connection::wait_for_notifications(std::chrono::milliseconds timeout) {
  auto* conn = native();
  std::vector<std::string> out;
  auto collect = [&] {
    if (PQconsumeInput(conn) != 1)
      throw error{errc::connection, "",
                  "connection to " + target()
                    + " lost: " + detail::trim(PQerrorMessage(conn))};
    while (PGnotify* n = PQnotifies(conn)) {
      out.emplace_back(n->relname);
      PQfreemem(n);
    }
  };
  collect();
  if (!out.empty())
    return out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return out;
    auto ready = detail::wait_socket(conn, POLLIN,
                                     static_cast<int>(left.count()));
    if (ready == 0)
      return out;
    collect();
    if (!out.empty())
      return out;
  }
}

} // namespace cmdbus::db
