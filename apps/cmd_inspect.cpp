#include <iostream>

#include "apps/cli.hpp"
#include "db/command_bus.hpp"
#include "db/pool.hpp"
#include "db/queue_name.hpp"

namespace cmdbus::cli {

namespace {

constexpr const char* show_help
  = R"(usage: cmdbus show DOMAIN COMMAND_ID [--dsn DSN] [--json]

Shows a command's metadata and its audit trail (ordered by time, then audit
id). Exit code 2 when the command does not exist.
)";

constexpr const char* list_help
  = R"(usage: cmdbus list DOMAIN [--status S] [--type T] [--limit N] [--offset N]
                   [--dsn DSN] [--json]

Lists the domain's commands, newest first. S is one of PENDING, IN_PROGRESS,
COMPLETED, FAILED, CANCELED, IN_TROUBLESHOOTING_QUEUE. Default limit 100.
)";

constexpr const char* queues_help = R"(usage: cmdbus queues [--dsn DSN] [--json]

Shows PGMQ metrics of every queue: length, visible length, age of the newest
and oldest message in seconds, and messages ever sent.
)";

db::pool_options pool_for(const args& a) {
  db::pool_options opts;
  opts.dsn = a.dsn();
  opts.max_size = 1;
  opts.connection.application_name = "cmdbus-cli";
  return opts;
}

std::string opt(const std::optional<std::string>& x) {
  return x ? *x : "";
}

std::string opt_uuid(const std::optional<uuid>& x) {
  return x ? x->to_string() : "";
}

std::string json_opt(const std::optional<std::string>& x) {
  return x ? json_string(*x) : "null";
}

std::string json_opt_uuid(const std::optional<uuid>& x) {
  return x ? json_string(x->to_string()) : "null";
}

std::string metadata_json(const command_metadata& m) {
  return "{\"domain\":" + json_string(m.domain)
         + ",\"command_id\":" + json_string(m.command_id.to_string())
         + ",\"command_type\":" + json_string(m.command_type)
         + ",\"status\":" + json_string(std::string{to_string(m.status)})
         + ",\"attempts\":" + std::to_string(m.attempts)
         + ",\"max_attempts\":" + std::to_string(m.max_attempts)
         + ",\"msg_id\":" + (m.msg_id ? std::to_string(*m.msg_id) : "null")
         + ",\"correlation_id\":" + json_opt_uuid(m.correlation_id)
         + ",\"reply_to\":" + json_opt(m.reply_to)
         + ",\"last_error_type\":" + json_opt(m.last_error_type)
         + ",\"last_error_code\":" + json_opt(m.last_error_code)
         + ",\"last_error_msg\":" + json_opt(m.last_error_msg)
         + ",\"created_at\":" + json_string(format_timestamp(m.created_at))
         + ",\"updated_at\":" + json_string(format_timestamp(m.updated_at))
         + ",\"batch_id\":" + json_opt_uuid(m.batch_id) + "}";
}

uuid parse_id(const std::string& text) {
  auto id = uuid::parse(text);
  if (!id)
    throw usage_error{"COMMAND_ID is not a valid UUID: '" + text + "'"};
  return *id;
}

} // namespace

int run_show(const std::vector<std::string>& argv) {
  args a{argv, {"--help", "--json"}, {"--dsn"}};
  if (a.flag("--help")) {
    std::cout << show_help;
    return exit_ok;
  }
  a.expect_positional(2, "DOMAIN and COMMAND_ID (see `cmdbus show --help`)");
  auto domain = a.positional()[0];
  db::validate_domain(domain);
  auto id = parse_id(a.positional()[1]);
  db::pool pool{pool_for(a)};
  command_bus bus{pool};
  auto m = bus.get_command(domain, id);
  if (!m)
    throw not_found{"command " + id.to_string() + " not found in domain "
                    + domain};
  auto trail = bus.get_audit_trail(id, domain);
  if (a.flag("--json")) {
    std::cout << "{\"command\":" << metadata_json(*m) << ",\"audit\":[";
    for (size_t i = 0; i < trail.size(); ++i) {
      auto& ev = trail[i];
      std::cout << (i > 0 ? "," : "") << "{\"audit_id\":" << ev.audit_id
                << ",\"event_type\":" << json_string(ev.event_type)
                << ",\"ts\":" << json_string(format_timestamp(ev.ts))
                << ",\"details\":"
                << (ev.details ? ev.details->text() : std::string{"null"})
                << "}";
    }
    std::cout << "]}\n";
    return exit_ok;
  }
  std::vector<std::vector<std::string>> fields{
    {"domain", m->domain},
    {"command_id", m->command_id.to_string()},
    {"command_type", m->command_type},
    {"status", std::string{to_string(m->status)}},
    {"attempts",
     std::to_string(m->attempts) + " of " + std::to_string(m->max_attempts)},
    {"msg_id", m->msg_id ? std::to_string(*m->msg_id) : ""},
    {"correlation_id", opt_uuid(m->correlation_id)},
    {"reply_to", opt(m->reply_to)},
    {"batch_id", opt_uuid(m->batch_id)},
    {"last_error", m->last_error_type
                     ? opt(m->last_error_type) + " " + opt(m->last_error_code)
                         + ": " + opt(m->last_error_msg)
                     : ""},
    {"created_at", format_timestamp(m->created_at)},
    {"updated_at", format_timestamp(m->updated_at)},
  };
  for (auto& f : fields)
    std::cout << f[0] << std::string(16 - f[0].size(), ' ') << f[1] << '\n';
  std::cout << "\naudit trail:\n";
  std::vector<std::vector<std::string>> rows;
  for (auto& ev : trail)
    rows.push_back({format_timestamp(ev.ts), ev.event_type,
                    ev.details ? ev.details->text() : ""});
  print_table(std::cout, {"ts", "event", "details"}, rows);
  return exit_ok;
}

int run_list(const std::vector<std::string>& argv) {
  args a{argv,
         {"--help", "--json"},
         {"--dsn", "--status", "--type", "--limit", "--offset"}};
  if (a.flag("--help")) {
    std::cout << list_help;
    return exit_ok;
  }
  a.expect_positional(1, "DOMAIN (see `cmdbus list --help`)");
  command_query q;
  q.domain = a.positional()[0];
  db::validate_domain(*q.domain);
  if (auto s = a.option("--status")) {
    q.status = parse_command_status(*s);
    if (!q.status)
      throw usage_error{"unknown status '" + *s + "'"};
  }
  q.command_type = a.option("--type");
  q.limit = a.int_option("--limit", 0).value_or(100);
  q.offset = a.int_option("--offset", 0).value_or(0);
  db::pool pool{pool_for(a)};
  command_bus bus{pool};
  auto cmds = bus.query_commands(q);
  if (a.flag("--json")) {
    std::cout << "[";
    for (size_t i = 0; i < cmds.size(); ++i)
      std::cout << (i > 0 ? "," : "") << metadata_json(cmds[i]);
    std::cout << "]\n";
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& m : cmds)
    rows.push_back(
      {m.command_id.to_string(), m.command_type,
       std::string{to_string(m.status)},
       std::to_string(m.attempts) + "/" + std::to_string(m.max_attempts),
       format_timestamp(m.created_at), opt(m.last_error_code)});
  print_table(std::cout,
              {"command_id", "type", "status", "attempts", "created_at",
               "last_error"},
              rows);
  return exit_ok;
}

int run_queues(const std::vector<std::string>& argv) {
  args a{argv, {"--help", "--json"}, {"--dsn"}};
  if (a.flag("--help")) {
    std::cout << queues_help;
    return exit_ok;
  }
  a.expect_positional(0, "no positional arguments");
  db::pool pool{pool_for(a)};
  auto conn = pool.acquire();
  auto r = conn->exec(
    "SELECT queue_name, queue_length, queue_visible_length, "
    "newest_msg_age_sec, oldest_msg_age_sec, total_messages FROM "
    "pgmq.metrics_all() ORDER BY queue_name");
  if (a.flag("--json")) {
    std::cout << "[";
    for (int i = 0; i < r.rows(); ++i) {
      auto num = [&](int c) {
        return r.is_null(i, c) ? std::string{"null"}
                               : std::string{r.text(i, c)};
      };
      std::cout << (i > 0 ? "," : "")
                << "{\"queue_name\":" << json_string(std::string{r.text(i, 0)})
                << ",\"queue_length\":" << num(1)
                << ",\"queue_visible_length\":" << num(2)
                << ",\"newest_msg_age_sec\":" << num(3)
                << ",\"oldest_msg_age_sec\":" << num(4)
                << ",\"total_messages\":" << num(5) << "}";
    }
    std::cout << "]\n";
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < r.rows(); ++i) {
    std::vector<std::string> row;
    for (int c = 0; c < 6; ++c)
      row.emplace_back(r.text(i, c));
    rows.push_back(std::move(row));
  }
  print_table(std::cout,
              {"queue", "length", "visible", "newest_age_s", "oldest_age_s",
               "total_sent"},
              rows);
  return exit_ok;
}

} // namespace cmdbus::cli
