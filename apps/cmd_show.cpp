#include <iostream>

#include "apps/cli.hpp"
#include "apps/json_out.hpp"
#include "db/command_bus.hpp"
#include "db/pool.hpp"
#include "db/queue_name.hpp"

namespace cmdbus::cli {

namespace {

constexpr const char* help
  = R"(usage: cmdbus show DOMAIN COMMAND_ID [--dsn DSN] [--json]

Shows a command's metadata and its audit trail (ordered by time, then audit
id). Exit code 2 when the command does not exist.
)";

std::string opt(const std::optional<std::string>& x) {
  return x ? *x : "";
}

std::string opt(const std::optional<uuid>& x) {
  return x ? x->to_string() : "";
}

} // namespace

int run_show(const std::vector<std::string>& argv) {
  args a{argv, {"--help", "--json"}, {"--dsn"}};
  if (a.flag("--help")) {
    std::cout << help;
    return exit_ok;
  }
  a.expect_positional(2, "DOMAIN and COMMAND_ID");
  auto domain = a.positional()[0];
  db::validate_domain(domain);
  auto id = parse_uuid_arg("COMMAND_ID", a.positional()[1]);
  db::pool pool{pool_options_for(a, 1)};
  command_bus bus{pool};
  auto m = bus.get_command(domain, id);
  if (!m)
    throw command_not_found_error{domain, id};
  auto trail = bus.get_audit_trail(id, domain);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object().key("command");
    write_command(out, *m);
    out.key("audit").begin_array();
    for (auto& ev : trail)
      write_audit_event(out, ev);
    out.end_array().end_object();
    out.print(std::cout);
    return exit_ok;
  }
  print_fields(
    std::cout,
    {
      {"domain", m->domain},
      {"command_id", m->command_id.to_string()},
      {"command_type", m->command_type},
      {"status", std::string{to_string(m->status)}},
      {"attempts",
       std::to_string(m->attempts) + " of " + std::to_string(m->max_attempts)},
      {"msg_id", m->msg_id ? std::to_string(*m->msg_id) : ""},
      {"correlation_id", opt(m->correlation_id)},
      {"reply_to", opt(m->reply_to)},
      {"batch_id", opt(m->batch_id)},
      {"last_error", m->last_error_type ? opt(m->last_error_type) + " "
                                            + opt(m->last_error_code) + ": "
                                            + opt(m->last_error_msg)
                                        : ""},
      {"created_at", format_timestamp(m->created_at)},
      {"updated_at", format_timestamp(m->updated_at)},
    });
  std::cout << "\naudit trail:\n";
  std::vector<std::vector<std::string>> rows;
  for (auto& ev : trail)
    rows.push_back({format_timestamp(ev.ts), ev.event_type,
                    ev.details ? ev.details->text() : ""});
  print_table(std::cout, {"ts", "event", "details"}, rows);
  return exit_ok;
}

} // namespace cmdbus::cli
