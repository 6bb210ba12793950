#include "tests/support/pgbouncer.hpp"

#include <csignal>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/tcp_proxy.hpp"
#include "tests/support/test_db.hpp"

extern char** environ;

namespace cmdbus::test {

namespace {

constexpr const char* binary = "/usr/sbin/pgbouncer";

// The options of `dsn` as libpq reads them (unset ones left out).
std::map<std::string, std::string> parsed(const std::string& dsn) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(dsn.c_str(), &err);
  if (opts == nullptr) {
    PQfreemem(err);
    throw std::invalid_argument("pgbouncer: invalid DSN");
  }
  std::map<std::string, std::string> out;
  for (auto* o = opts; o->keyword != nullptr; ++o)
    if (o->val != nullptr)
      out[o->keyword] = o->val;
  PQconninfoFree(opts);
  return out;
}

std::string value_of(const std::map<std::string, std::string>& opts,
                     const std::string& key, const std::string& fallback) {
  auto i = opts.find(key);
  return i == opts.end() || i->second.empty() ? fallback : i->second;
}

} // namespace

pgbouncer::pgbouncer(pgbouncer_options opts) : port_(free_port()) {
  auto server = parsed(test::dsn());
  auto user = value_of(server, "user", "");
  auto password = value_of(server, "password", "");
  if (user.empty() || password.empty())
    throw std::runtime_error("pgbouncer: the test DSN needs a user and a "
                             "password (scripts/pg gives both)");
  // The userlist holds the password in clear: the bouncer logs in to the
  // server with it (SCRAM) and checks the clients' logins against it.
  dir_.write("userlist.txt", "\"" + user + "\" \"" + password + "\"\n");
  std::string connect;
  if (opts.server_statement_timeout)
    connect = " connect_query='SET statement_timeout = "
              + std::to_string(opts.server_statement_timeout->count()) + "'";
  std::ostringstream ini;
  ini << "[databases]\n"
      << "* = host=" << value_of(server, "host", "127.0.0.1")
      << " port=" << value_of(server, "port", "5432") << connect << "\n"
      << "[pgbouncer]\n"
      << "listen_addr = 127.0.0.1\n"
      << "listen_port = " << port_ << "\n"
      << "unix_socket_dir = " << dir_.path.string() << "\n"
      << "auth_type = scram-sha-256\n"
      << "auth_file = " << dir_.file("userlist.txt") << "\n"
      << "admin_users = " << user << "\n"
      << "pool_mode = "
      << (opts.mode == pool_mode::transaction ? "transaction" : "session")
      << "\n"
      << "default_pool_size = " << opts.pool_size << "\n"
      << "max_client_conn = 200\n"
      << "logfile = " << dir_.file("pgbouncer.log")
      << "\n"
      // A failed login to the server is retried after 1 s, not 15 s.
      << "server_login_retry = 1\n";
  if (geteuid() == 0) {
    // It refuses to run as root: it changes to the server's system user,
    // which must own its folder.
    auto* pw = getpwnam("postgres");
    if (pw == nullptr)
      throw std::runtime_error("pgbouncer: no system user postgres");
    ini << "user = postgres\n";
    dir_.write("pgbouncer.ini", ini.str());
    for (auto& name : {"", "userlist.txt", "pgbouncer.ini"}) {
      auto path = std::string{name}.empty() ? dir_.path.string()
                                            : dir_.file(name);
      if (chown(path.c_str(), pw->pw_uid, pw->pw_gid) != 0)
        throw std::runtime_error("pgbouncer: cannot chown " + path);
    }
  } else {
    dir_.write("pgbouncer.ini", ini.str());
  }
  start();
}

pgbouncer::~pgbouncer() {
  kill();
}

std::string pgbouncer::dsn(const std::string& server_dsn) const {
  std::string out;
  for (auto& [key, value] : parsed(server_dsn))
    if (key != "host" && key != "hostaddr" && key != "port")
      out += key + "=" + quote_value(value) + " ";
  return out + "host=127.0.0.1 port=" + std::to_string(port_);
}

std::string pgbouncer::dsn() const {
  return dsn(test::dsn());
}

void pgbouncer::start() {
  if (pid_ > 0)
    return;
  std::vector<std::string> args{binary, dir_.file("pgbouncer.ini")};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  // Its log goes to the logfile as well: the standard streams are dropped.
  posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  int rc = posix_spawn(&pid_, argv[0], &files, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) {
    pid_ = -1;
    throw std::runtime_error(std::string{"pgbouncer: cannot start "} + binary
                             + " (apt-get install pgbouncer)");
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  for (;;) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("pgbouncer exited at once: " + log());
    }
    try {
      admin("SHOW VERSION");
      return;
    } catch (const std::runtime_error&) {
      // Not listening yet.
    }
    if (std::chrono::steady_clock::now() >= until) {
      kill();
      throw std::runtime_error("pgbouncer does not serve: " + log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
}

void pgbouncer::kill() {
  if (pid_ <= 0)
    return;
  ::kill(-pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void pgbouncer::kill_clients(const std::string& dbname) {
  admin("KILL " + dbname);
}

void pgbouncer::resume(const std::string& dbname) {
  admin("RESUME " + dbname);
}

namespace {

// The admin console: simple protocol only, no SET; raw libpq.
struct admin_connection {
  PGconn* conn;
  explicit admin_connection(const std::string& dsn)
    : conn(PQconnectdb(dsn.c_str())) {
    if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
      std::string msg = conn != nullptr ? PQerrorMessage(conn) : "no memory";
      PQfinish(conn);
      throw std::runtime_error("pgbouncer admin console: " + msg);
    }
  }
  ~admin_connection() {
    PQfinish(conn);
  }
  PGresult* exec(const std::string& statement) {
    PGresult* res = PQexec(conn, statement.c_str());
    auto status = PQresultStatus(res);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      std::string msg = PQerrorMessage(conn);
      PQclear(res);
      throw std::runtime_error("pgbouncer admin console: " + statement + ": "
                               + msg);
    }
    return res;
  }
};

std::string admin_dsn(const pgbouncer& b) {
  return with_dbname(b.dsn(), "pgbouncer") + " connect_timeout=2";
}

} // namespace

void pgbouncer::admin(const std::string& statement) const {
  admin_connection c{admin_dsn(*this)};
  PQclear(c.exec(statement));
}

pool_figures pgbouncer::pool(const std::string& dbname) const {
  admin_connection c{admin_dsn(*this)};
  PGresult* res = c.exec("SHOW POOLS");
  auto number = [&](int row, const char* column) {
    int col = PQfnumber(res, column);
    return col < 0 ? 0 : std::atoi(PQgetvalue(res, row, col));
  };
  pool_figures out;
  int db = PQfnumber(res, "database");
  for (int i = 0; i < PQntuples(res); ++i) {
    if (db < 0 || dbname != PQgetvalue(res, i, db))
      continue;
    out.clients_active += number(i, "cl_active");
    out.clients_waiting += number(i, "cl_waiting");
    for (auto* sv :
         {"sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"})
      out.servers += number(i, sv);
  }
  PQclear(res);
  return out;
}

std::string pgbouncer::log() const {
  std::ifstream in{dir_.file("pgbouncer.log")};
  std::ostringstream out;
  out << in.rdbuf();
  auto text = out.str();
  // The end is what explains a failure.
  constexpr size_t keep = 2000;
  return text.size() > keep ? text.substr(text.size() - keep) : text;
}

} // namespace cmdbus::test
