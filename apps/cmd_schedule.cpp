// `cmdbus schedule`: recurring schedules for operators (add, list, show,
// pause, resume, remove, trigger), over db/schedules.hpp. See
// docs/scheduling.md, "Recurring schedules".

#include <iostream>
#include <limits>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/output.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/schedules.hpp"
#include "cmdbus/model/cron.hpp"

namespace cmdbus::cli {

namespace {

constexpr const char* schedule_synopsis
  = R"(usage: cmdbus schedule add DOMAIN NAME TYPE (--cron EXPR [--tz ZONE] |
                                  --every DURATION) [--data JSON]
                                  [--misfire run_once|skip]
                                  [--reply-to QUEUE] [--max-attempts N]
                                  [--priority N]
       cmdbus schedule list [DOMAIN]
       cmdbus schedule show|pause|resume|remove|trigger DOMAIN NAME
       (every form also takes --dsn DSN and --json)

A schedule sends a command of type TYPE to DOMAIN at every slot of a 5-field
cron expression (minute hour day-of-month month day-of-week) in a time zone,
or every DURATION. The workers of the domain fire it, each slot exactly
once, whatever number of workers runs (docs/scheduling.md).

  add      define the schedule, or change the one of that name (the same
           definition again changes nothing; its next slot is computed
           anew only when the timing changes)
  list     the schedules of DOMAIN (of every domain without one)
  show     one schedule: its definition, next and last slot, fired count
  pause    fire no slot until resumed
  resume   fire again; slots missed meanwhile follow the misfire policy
  remove   delete the schedule (its commands stay)
  trigger  send its command now, with a new command id (not a slot)

Misfire policy, for slots missed while no worker ran (the next slot is
older than one period and than the 10 s grace): run_once (default) sends
one command, for the newest missed slot; skip sends none. Either way the
schedule continues with its next future slot. Slots late by less than the
grace are all sent, in order.
)";

constexpr const char* schedule_exit_codes = R"(
Exit codes: 0 ok; 1 usage error (an invalid cron expression, zone,
duration or JSON); 2 no such schedule.
)";

constexpr option json_option{"--json", "", "print the result as JSON"};

const command_spec schedule_command{schedule_synopsis, {}, schedule_exit_codes};

const command_spec add_command{
  schedule_synopsis,
  {{"--cron", "EXPR",
    "a 5-field cron expression, e.g. \"30 2 * * *\" or \"*/15 9-17 * * "
    "MON-FRI\""},
   {"--tz", "ZONE",
    "the IANA time zone of --cron, e.g. Europe/Berlin (default UTC)"},
   {"--every", "DURATION",
    "a fixed interval instead of --cron (e.g. 30s, 15min, 1h, 1d)"},
   {"--data", "JSON",
    "the command's payload, a JSON object (default {}); @FILE reads it from "
    "FILE, - from standard input"},
   {"--misfire", "POLICY", "run_once (default) or skip"},
   {"--reply-to", "QUEUE", "queue for the replies of its commands"},
   {"--max-attempts", "N", "of its commands (default 3)"},
   {"--priority", "N", "of its commands (default: none)"},
   dsn_option,
   dsn_file_option,
   json_option,
   help_option},
  schedule_exit_codes};

const command_spec list_command{schedule_synopsis,
                                {dsn_option, dsn_file_option, json_option,
                                 help_option},
                                schedule_exit_codes};

const command_spec named_command{schedule_synopsis,
                                 {dsn_option, dsn_file_option, json_option,
                                  help_option},
                                 schedule_exit_codes};

std::string timing_text(const schedules::schedule& s) {
  if (s.def.cron)
    return "cron \"" + *s.def.cron + "\" " + s.def.time_zone;
  return "every " + format_schedule_interval(*s.def.every);
}

void write_schedule(json_out& out, const schedules::schedule& s) {
  out.begin_object()
    .field("id", s.id)
    .field("domain", s.def.domain)
    .field("name", s.def.name)
    .field("command_type", s.def.command_type)
    .field("data", s.def.data)
    .field("cron", s.def.cron)
    .field("time_zone", s.def.cron ? std::optional<std::string>{s.def.time_zone}
                                   : std::nullopt)
    .field("every_ms", s.def.every
                         ? std::optional<int64_t>{s.def.every->count()}
                         : std::nullopt)
    .field("misfire", std::string{schedules::to_string(s.def.misfire)})
    .field("reply_to", s.def.reply_to)
    .field("max_attempts", s.def.max_attempts)
    .field("priority", s.def.priority)
    .field("paused", s.paused)
    .field("next_slot", s.next_slot)
    .field("last_slot", s.last_slot)
    .field("last_command_id", s.last_command_id)
    .field("fired_count", s.fired_count)
    .field("created_at", s.created_at)
    .field("updated_at", s.updated_at)
    .end_object();
}

void print_schedule(const schedules::schedule& s) {
  auto opt = [](const auto& x) -> std::string {
    if (!x)
      return "-";
    if constexpr (std::is_same_v<std::decay_t<decltype(*x)>, timestamp>)
      return format_timestamp(*x);
    else if constexpr (std::is_same_v<std::decay_t<decltype(*x)>, uuid>)
      return x->to_string();
    else if constexpr (std::is_same_v<std::decay_t<decltype(*x)>, int>)
      return std::to_string(*x);
    else
      return *x;
  };
  print_fields(std::cout,
               {{"domain", s.def.domain},
                {"name", s.def.name},
                {"id", s.id.to_string()},
                {"command_type", s.def.command_type},
                {"data", s.def.data.text()},
                {"timing", timing_text(s)},
                {"misfire", std::string{schedules::to_string(s.def.misfire)}},
                {"reply_to", opt(s.def.reply_to)},
                {"max_attempts", opt(s.def.max_attempts)},
                {"priority", opt(s.def.priority)},
                {"paused", s.paused ? "yes" : "no"},
                {"next_slot", format_timestamp(s.next_slot)},
                {"last_slot", opt(s.last_slot)},
                {"last_command_id", opt(s.last_command_id)},
                {"fired_count", std::to_string(s.fired_count)},
                {"created_at", format_timestamp(s.created_at)},
                {"updated_at", format_timestamp(s.updated_at)}});
}

// The schedule NAME of DOMAIN (the two positional arguments).
std::pair<std::string, std::string> domain_and_name(const args& a) {
  a.expect_positional(2, "DOMAIN and NAME");
  return {domain_arg(a), a.positional()[1]};
}

[[noreturn]] void no_schedule(const std::string& domain,
                              const std::string& name) {
  throw not_found{"no schedule " + name + " in domain " + domain};
}

db::connection connect(const args& a) {
  auto opts = pool_options_for(a, 1);
  return db::connection::open(opts.dsn, opts.connection);
}

int schedule_add(const args& a) {
  a.expect_positional(3, "DOMAIN, NAME and TYPE");
  schedules::definition d;
  d.domain = domain_arg(a);
  d.name = a.positional()[1];
  d.command_type = a.positional()[2];
  if (d.name.empty())
    throw usage_error{"NAME must not be empty"};
  if (d.command_type.empty())
    throw usage_error{"TYPE must not be empty"};
  d.cron = a.option("--cron");
  d.every = a.duration_option("--every");
  if (d.cron.has_value() == d.every.has_value())
    throw usage_error{"give either --cron EXPR or --every DURATION"};
  if (auto tz = a.option("--tz")) {
    if (!d.cron)
      throw usage_error{"--tz goes with --cron"};
    d.time_zone = *tz;
  }
  d.data = parse_object_arg("--data", a.option("--data").value_or("{}"));
  if (auto m = a.option("--misfire")) {
    auto p = schedules::parse_misfire_policy(*m);
    if (!p)
      throw usage_error{"--misfire must be run_once or skip, not '" + *m + "'"};
    d.misfire = *p;
  }
  d.reply_to = a.option("--reply-to");
  d.max_attempts = a.int_option("--max-attempts", 1);
  d.priority = a.int_option("--priority", std::numeric_limits<int>::min());
  try {
    schedules::validate(d);
  } catch (const cron_error& e) {
    throw usage_error{e.what()};
  }
  auto conn = connect(a);
  auto res = schedules::add(conn, d);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("created", res.created)
      .field("changed", res.changed)
      .field("timing_changed", res.timing_changed)
      .key("schedule");
    write_schedule(out, res.stored);
    out.end_object();
    out.print(std::cout);
  } else {
    std::cout << (res.created   ? "created"
                  : res.changed ? "updated"
                                : "unchanged")
              << " schedule " << d.name << " in " << d.domain << " ("
              << timing_text(res.stored) << "); next slot "
              << format_timestamp(res.stored.next_slot) << "\n";
  }
  return exit_ok;
}

int schedule_list(const args& a) {
  if (a.positional().size() > 1)
    throw usage_error{"list takes at most one DOMAIN"};
  std::optional<std::string> domain;
  if (!a.positional().empty())
    domain = domain_arg(a);
  auto conn = connect(a);
  auto all = schedules::list(conn, domain);
  if (a.flag("--json")) {
    json_out out;
    out.begin_array();
    for (auto& s : all)
      write_schedule(out, s);
    out.end_array();
    out.print(std::cout);
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& s : all)
    rows.push_back({s.def.domain, s.def.name, s.def.command_type,
                    timing_text(s), format_timestamp(s.next_slot),
                    s.paused ? "yes" : "no",
                    std::string{schedules::to_string(s.def.misfire)},
                    std::to_string(s.fired_count)});
  print_table(std::cout,
              {"DOMAIN", "NAME", "TYPE", "TIMING", "NEXT SLOT", "PAUSED",
               "MISFIRE", "FIRED"},
              rows);
  return exit_ok;
}

int schedule_show(const args& a) {
  auto [domain, name] = domain_and_name(a);
  auto conn = connect(a);
  auto s = schedules::get(conn, domain, name);
  if (!s)
    no_schedule(domain, name);
  if (a.flag("--json")) {
    json_out out;
    write_schedule(out, *s);
    out.print(std::cout);
  } else {
    print_schedule(*s);
  }
  return exit_ok;
}

// pause, resume, remove: `change` returns whether the schedule existed.
template <class F>
int schedule_change(const args& a, const char* done, F change) {
  auto [domain, name] = domain_and_name(a);
  auto conn = connect(a);
  if (!change(conn, domain, name))
    no_schedule(domain, name);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("domain", domain)
      .field("name", name)
      .field(done, true)
      .end_object();
    out.print(std::cout);
  } else {
    std::cout << done << " schedule " << name << " in " << domain << "\n";
  }
  return exit_ok;
}

int schedule_pause(const args& a) {
  return schedule_change(a, "paused", schedules::pause);
}

int schedule_resume(const args& a) {
  return schedule_change(a, "resumed", schedules::resume);
}

int schedule_remove(const args& a) {
  return schedule_change(a, "removed", schedules::remove);
}

int schedule_trigger(const args& a) {
  auto [domain, name] = domain_and_name(a);
  auto conn = connect(a);
  if (!schedules::get(conn, domain, name))
    no_schedule(domain, name);
  auto res = schedules::trigger(conn, domain, name);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("command_id", res.command_id)
      .field("msg_id", res.msg_id)
      .end_object();
    out.print(std::cout);
  } else {
    std::cout << "sent command " << res.command_id.to_string()
              << " of schedule " << name << " in " << domain << " (msg_id "
              << res.msg_id << ")\n";
  }
  return exit_ok;
}

} // namespace

int run_schedule(const std::vector<std::string>& argv) {
  return run_subcommand("schedule", argv, schedule_command,
                        {{"add", &add_command, schedule_add},
                         {"list", &list_command, schedule_list},
                         {"show", &named_command, schedule_show},
                         {"pause", &named_command, schedule_pause},
                         {"resume", &named_command, schedule_resume},
                         {"remove", &named_command, schedule_remove},
                         {"trigger", &named_command, schedule_trigger}});
}

} // namespace cmdbus::cli
