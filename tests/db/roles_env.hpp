#pragma once

// A migrated scratch database with three login roles for `cmdbus grant`
// (tests/db/roles_test.cpp, tests/db/api_roles_test.cpp): each test has a
// database of its own, migrated by the test server's superuser (the owner),
// so that the grants it makes on every table of the database race with no
// other test; and a unique prefix for its roles, which are dropped at the
// end (roles are the cluster's).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/db/roles.hpp"
#include "cmdbus/sql/bundle.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::test {

inline constexpr const char* role_password = "role_pw_7";

// Drops the roles on destruction (after the scratch database: declared
// before it).
struct role_cleanup {
  std::vector<std::string> roles;
  ~role_cleanup() {
    try {
      auto admin = db::connection::open(test::dsn());
      for (auto& r : roles)
        admin.exec("DROP ROLE IF EXISTS " + db::quote_identifier(r));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "dropping the test roles failed: " << e.what();
    }
  }
};

// A migrated scratch database, three login roles and the names of the
// groups `cmdbus grant --prefix` makes.
struct roles_env {
  roles_env() : owner(open_migrated(db.dsn())) {
    auto p = unique_name("rl");
    groups = db::role_groups_for(p);
    prefix = p;
    worker_login = p + "_w";
    operator_login = p + "_o";
    reader_login = p + "_r";
    cleanup.roles = {groups.worker, groups.operator_role, groups.reader,
                     worker_login,  operator_login,       reader_login};
    for (auto* login : {&worker_login, &operator_login, &reader_login})
      owner.exec("CREATE ROLE " + *login + " LOGIN PASSWORD '" + role_password
                 + "'");
  }

  static db::connection open_migrated(const std::string& dsn) {
    auto c = db::connection::open(dsn);
    db::migrate(c, sql::pgmq_files(), sql::commandbus_files());
    return c;
  }

  // The scratch database's DSN as `login` (libpq takes the last value of a
  // repeated keyword).
  std::string dsn_as(const std::string& login) const {
    return db.dsn() + " user=" + login + " password=" + role_password;
  }

  db::connection connect_as(const std::string& login) const {
    return db::connection::open(dsn_as(login));
  }

  // `cmdbus ARGS --dsn DSN`.
  static process_result cli(std::vector<std::string> args,
                            const std::string& dsn) {
    args.insert(args.end(), {"--dsn", dsn});
    return run_cmdbus(args);
  }

  // `cmdbus grant` as the owner: the three logins join their groups.
  process_result grant(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args{"grant",        "--prefix",   prefix,
                                  "--worker",     worker_login, "--operator",
                                  operator_login, "--reader",   reader_login};
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(args, db.dsn());
  }

  role_cleanup cleanup;
  scratch_database db;
  db::connection owner;
  std::string prefix;
  db::role_groups groups;
  std::string worker_login;
  std::string operator_login;
  std::string reader_login;
};

} // namespace cmdbus::test
