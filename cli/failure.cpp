#include "cmdbus/cli/failure.hpp"

#include <iostream>

#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::cli {

namespace {

// Whether a failure names an object of our schema (or PGMQ's functions):
// the database was never migrated.
bool schema_missing(const db::error& e) {
  if (e.code() != db::errc::undefined_table
      && e.code() != db::errc::undefined_function && e.sqlstate() != "3F000")
    return false;
  std::string what = e.what();
  // A missing queue table (pgmq.q_..., pgmq.a_...) is a missing queue,
  // not a missing schema.
  return what.find("commandbus.") != std::string::npos
         || (what.find("pgmq.") != std::string::npos
             && what.find("pgmq.q_") == std::string::npos
             && what.find("pgmq.a_") == std::string::npos)
         || what.find("schema \"commandbus\"") != std::string::npos
         || what.find("schema \"pgmq\"") != std::string::npos;
}

// What to do about a refused login, by its reason (see
// db::login_failure_sqlstate).
std::string login_advice(const db::error& e) {
  const auto& s = e.sqlstate();
  if (s == "28P01")
    return " (the server refused the password: check the password in --dsn, "
           "the DSN file, $CMDBUS_DSN, $PGPASSWORD or the password file; with "
           "password authentication the server gives this same answer for a "
           "user that does not exist)";
  if (s == "3D000")
    return " (the database does not exist on that server: check dbname in "
           "--dsn or $CMDBUS_DSN, or create it and run `cmdbus migrate`)";
  std::string what = e.what();
  // Refused without TLS, where TLS was not tried (sslmode=disable, or a
  // server without TLS): the server may take this login over TLS only.
  if (what.find("no pg_hba.conf entry") != std::string::npos
      && what.find("no encryption") != std::string::npos
      && what.find("SSL encryption") == std::string::npos)
    return " (the server's pg_hba.conf allows no connection without TLS "
           "from this host for this user and database: if the server takes "
           "TLS, add sslmode=verify-full and sslrootcert=CA-FILE to the DSN; "
           "else ask its administrator)";
  if (what.find("no pg_hba.conf entry") != std::string::npos)
    return " (the server's pg_hba.conf allows no connection from this host "
           "for this user and database: ask its administrator)";
  return " (the server knows no such user: check user in --dsn or "
         "$CMDBUS_DSN)";
}

// What to do about a TLS connection that libpq refused, by libpq's reason
// (its messages are English whatever the server's language); "" for any
// other failure.
std::string tls_advice(const std::string& what) {
  auto has = [&](const char* x) { return what.find(x) != std::string::npos; };
  if (has("certificate verify failed"))
    return " (the server's certificate is not signed by the CA that the "
           "client trusts: set sslrootcert in the DSN to the file of the CA "
           "that signed it)";
  if (has("does not match host name"))
    return " (the server's certificate is for another host name: connect "
           "with the name it is for, e.g. host=NAME hostaddr=IP, or give the "
           "server a certificate for this name)";
  if (has("server does not support SSL"))
    return " (the server does not speak TLS: turn on ssl in its "
           "postgresql.conf, or check host and port in the DSN)";
  if (has("root certificate file"))
    return " (set sslrootcert in the DSN to the file of the CA that signed "
           "the server's certificate)";
  return {};
}

} // namespace

failure describe_failure(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const usage_error& e) {
    return {exit_usage, e.message};
  } catch (const not_found& e) {
    return {exit_not_found, e.message};
  } catch (const exit_with& e) {
    return {e.code, e.message};
  } catch (const db::invalid_argument& e) {
    return {exit_usage, e.what()};
  } catch (const decode_error& e) {
    return {exit_usage, e.what()};
  } catch (const keyed_error& e) {
    // duplicate command, unknown command or batch
    return {exit_not_found, e.what()};
  } catch (const invalid_operation_error& e) {
    return {exit_not_found, e.what()};
  } catch (const db::error& e) {
    if (db::is_login_refused(e))
      return {exit_auth, std::string{e.what()} + login_advice(e)};
    if (e.code() == db::errc::connection) {
      std::string what = e.what();
      if (auto advice = tls_advice(what); !advice.empty())
        return {exit_db_unavailable, what + advice};
      return {exit_db_unavailable,
              what
                + (what.find("Is the server running") != std::string::npos
                     ? " (check host and port in --dsn or $CMDBUS_DSN)"
                     : " (is the server running, and are host and port in "
                       "--dsn or $CMDBUS_DSN right?)")};
    }
    if (schema_missing(e)) {
      log::debug("no cmdbus schema: {}", log::one_line(e.what()));
      return {exit_failed, never_migrated};
    }
    std::string what = e.what();
    if (e.sqlstate() == "42501"
        && what.find("cmdbus grant") == std::string::npos)
      return {exit_failed,
              what
                + " (the connected role lacks this right: connect as a role "
                  "of the group this job needs, see `cmdbus grant --help`)"};
    return {exit_failed, what};
  } catch (const std::exception& e) {
    return {exit_failed, e.what()};
  }
}

int report_failure(const failure& f, const std::string& program, bool json) {
  if (json) {
    json_out out;
    out.begin_object()
      .field("error", f.message)
      .field("exit_code", f.code)
      .end_object();
    out.print(std::cout);
  } else {
    std::cerr << program << ": " << f.message << '\n';
  }
  return f.code;
}

} // namespace cmdbus::cli
