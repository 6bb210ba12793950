#pragma once

// Which server a connection reached: with a DSN that names several hosts
// (a primary and its standbys, target_session_attrs=read-write), the one
// libpq settled on, for log lines that show where a session went after a
// failover.

#include <string>

namespace cmdbus::db {

class connection;

/// Returns the server `conn` reached, "host:port" (the host as the DSN
/// names it: an address, a name, or a socket folder). Safe to log: no
/// user, no password, no other option of the DSN.
std::string server_of(connection& conn);

} // namespace cmdbus::db
