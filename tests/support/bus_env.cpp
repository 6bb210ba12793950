#include "tests/support/bus_env.hpp"

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/uuid.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::test {

db::pool_options pool_options(size_t max_size) {
  db::pool_options opts;
  opts.dsn = dsn();
  opts.max_size = max_size;
  return opts;
}

bus_env::bus_env(size_t max_size)
  : pool(pool_options(max_size)), bus(pool), conn(connect()) {
  // nop
}

send_request make_req(const std::string& domain, const std::string& type,
                      const std::string& data) {
  send_request req;
  req.domain = domain;
  req.command_type = type;
  req.command_id = uuid::random();
  req.data = json::parse(data);
  return req;
}

} // namespace cmdbus::test
