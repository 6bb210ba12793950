#pragma once

// Connection strings as they may be shown: with their secrets masked, or as
// the short "user@host:port/dbname" of their target. Both read the DSN with
// libpq's own parser (PQconninfoParse), so that they see it as a connection
// would: a key=value string or a postgresql:// URI.

#include <string>
#include <string_view>

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

} // namespace cmdbus::db
