#pragma once

// What the tests' private PostgreSQL servers (tests/support/primary_standby,
// tests/support/tls_server) share: PostgreSQL 15's programs run as the
// server user, files handed to that user, and the tail of a server's log.
// As root, the servers run as the `postgres` system user (as scripts/pg
// does); otherwise as the user that runs the tests.

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace cmdbus::test {

/// Where PostgreSQL 15's programs live.
inline constexpr const char* postgres_bindir = "/usr/lib/postgresql/15/bin";

/// Makes a new folder "/tmp/PREFIX-XXXXXX" that the server user may use and
/// returns its path; throws std::runtime_error when it cannot.
std::string make_server_folder(const std::string& prefix);

/// Hands `path` to the server user (when root; else does nothing). Throws
/// std::runtime_error (`who` names the caller in the message).
void give_to_server(const std::filesystem::path& path, const std::string& who);

/// Appends `text` to `file`; throws std::runtime_error when it cannot.
void append_to(const std::filesystem::path& file, const std::string& text,
               const std::string& who);

/// The last `n` lines of `file` ("" when it cannot be read).
std::string tail_of(const std::filesystem::path& file, size_t n);

/// Runs the PostgreSQL program `program` (initdb, pg_ctl, ...) with `args`
/// from the folder `dir`, as the server user when root (the programs change
/// to their working folder, which that user must reach). Throws
/// std::runtime_error with its exit code and output when it fails.
void run_server_program(const std::string& dir, const std::string& program,
                        const std::vector<std::string>& args,
                        const std::string& who);

} // namespace cmdbus::test
