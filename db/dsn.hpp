#pragma once

// Connection strings as they may be shown: with their secrets masked, or as
// the short "user@host:port/dbname" of their target. Both read the DSN with
// libpq's own parser (PQconninfoParse), so that they see it as a connection
// would: a key=value string or a postgresql:// URI. And connection strings
// read from a file of their own (--dsn-file), which may hold a password.

#include <string>
#include <string_view>

#include "cmdbus/db/error.hpp"

namespace cmdbus::db {

/// What mask_dsn() writes in place of a secret, and what it returns for a DSN
/// that libpq cannot parse.
inline constexpr std::string_view masked = "***";

/// Returns `dsn` with the value of every secret option (the ones libpq
/// displays as a password field: `password`, `sslpassword`) replaced by
/// `***`, in the DSN's own form (key=value or URI), for messages and
/// `--dump-config`. A DSN without secrets comes back unchanged; one that
/// libpq cannot parse comes back as `***` whole, since one cannot tell where
/// its secret is.
std::string mask_dsn(std::string_view dsn);

/// Returns a description of the DSN's target, "user@host:port/dbname",
/// without the password or other secrets; safe to log. Missing parts come
/// from the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE), else
/// read "(default ...)". A DSN that libpq cannot parse reads
/// "(invalid connection string)".
std::string describe_target(const std::string& dsn);

/// Returns the DSN that the file `path` holds, without its trailing line
/// ends ("\n" or "\r\n"). Since the DSN may hold a password, the file must
/// be a regular file that neither its group nor others may read, write or
/// run (mode 0600 or 0400, as libpq requires of a password file). Throws
/// `invalid_argument` naming the path and what to fix (never the file's
/// content) when the file is missing, unreadable, open to others, or empty.
std::string read_dsn_file(const std::string& path);

} // namespace cmdbus::db
