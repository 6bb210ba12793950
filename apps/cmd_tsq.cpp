// `cmdbus tsq`: the troubleshooting queue for operators (list, show, retry,
// cancel, complete), over db/troubleshooting.hpp. See docs/tsq.md.

#include <cstdlib>
#include <iostream>
#include <limits>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/output.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/troubleshooting.hpp"

namespace cmdbus::cli {

namespace {

// The help of every tsq subcommand: what they do, how the commands are
// selected; each subcommand's --help adds its options.
constexpr const char* tsq_synopsis
  = R"(usage: cmdbus tsq list DOMAIN [--type T] [--error-code C] [--batch B]
                       [--older-than DUR] [--oldest-first] [--limit N]
                       [--offset N]
       cmdbus tsq show DOMAIN COMMAND_ID
       cmdbus tsq retry DOMAIN (COMMAND_ID... | --all | --batch B |
                                --error-code C) [--older-than DUR]
                                [--limit N] [--dry-run] [--operator NAME]
       cmdbus tsq cancel DOMAIN (...) [--reason TEXT] [...]
       cmdbus tsq complete DOMAIN (...) [--result JSON] [...]
       (every form also takes --dsn DSN and --json)

The troubleshooting queue (TSQ) holds the commands that failed permanently
or used up their attempts (status IN_TROUBLESHOOTING_QUEUE); their original
message is in the PGMQ archive of {DOMAIN}__commands.

  list      the domain's TSQ commands, newest first (by the time they moved
            there), with the last error; default limit 50
  show      one command: metadata, archived message and every error of its
            audit trail
  retry     re-send the archived message; the command is PENDING again with
            0 attempts and a worker processes it anew (audit
            OPERATOR_RETRY)
  cancel    mark the command CANCELED and send a CANCELED reply with the
            reason to its reply_to, if any (audit OPERATOR_CANCEL)
  complete  mark the command COMPLETED and send a SUCCESS reply with the
            result (JSON object: text, @FILE or - for stdin) to its
            reply_to, if any (audit OPERATOR_COMPLETE)

A batch member's operation updates the batch's counters; a cancel or
complete of the last open member completes the batch (and records its
completion callback for a worker that has one).

Selecting the commands (retry, cancel, complete): one or more COMMAND_IDs,
or one or more of --all, --batch B, --error-code C (with --older-than DUR,
e.g. 90s, 15m, 2h, 1d, and --limit N to take at most N, oldest first).
Each command is changed in its own transaction; commands that left the TSQ
meanwhile (another operator, a re-run) are skipped and counted, so an
interrupted bulk run can simply be run again. --dry-run lists what would be
touched and changes nothing. --operator NAME is recorded in the audit
(default: $USER, else $LOGNAME, else the account's name).
)";

constexpr const char* tsq_exit_codes = R"(
Exit codes: 0 ok (bulk: also when some were skipped); 1 usage error (bad
UUID, no selector, ids together with a bulk selector, invalid --result);
2 a named COMMAND_ID is unknown or not in the TSQ (the others are still
processed), or `show` of an unknown command; 3 database unavailable; 4 a
command failed otherwise (e.g. no archived message to retry).
)";

// -- the options
// ---------------------------------------------------------------

constexpr option json_option{"--json", "", "print the result as JSON"};
constexpr option batch_option{"--batch", "B", "only the commands of batch B"};
constexpr option error_code_option{"--error-code", "C",
                                   "only commands whose last error code is C"};
constexpr option older_than_option{
  "--older-than", "DUR",
  "only commands in the TSQ for longer than DUR (e.g. 90s, 15m, 2h, 1d)"};

const command_spec tsq_command{tsq_synopsis, {}, tsq_exit_codes};

const command_spec list_command{
  tsq_synopsis,
  {{"--type", "T", "only commands of type T"},
   error_code_option,
   batch_option,
   older_than_option,
   {"--oldest-first", "", "oldest first (default: newest first)"},
   {"--limit", "N", "at most N commands (default 50)"},
   {"--offset", "N", "skip the first N"},
   dsn_option,
   dsn_file_option,
   json_option,
   help_option},
  tsq_exit_codes};

const command_spec show_command{tsq_synopsis,
                                {dsn_option, dsn_file_option, json_option,
                                 help_option},
                                tsq_exit_codes};

// The options of retry, cancel and complete; `extra` is the operation's own.
std::vector<option> operation_options(std::vector<option> extra) {
  std::vector<option> out{
    {"--all", "", "every command in the domain's TSQ"},
    batch_option,
    error_code_option,
    older_than_option,
    {"--limit", "N", "take at most N of the selected commands, oldest first"},
    {"--dry-run", "", "list what would be touched; change nothing"},
    {"--operator", "NAME",
     "recorded in the audit (default: $USER, else $LOGNAME, else the "
     "account's name)"}};
  out.insert(out.end(), extra.begin(), extra.end());
  out.insert(out.end(),
             {dsn_option, dsn_file_option, json_option, help_option});
  return out;
}

const command_spec retry_command{tsq_synopsis, operation_options({}),
                                 tsq_exit_codes};

const command_spec cancel_command{
  tsq_synopsis,
  operation_options(
    {{"--reason", "TEXT", "why: in the audit and the CANCELED reply"}}),
  tsq_exit_codes};

const command_spec complete_command{
  tsq_synopsis,
  operation_options({{"--result", "JSON",
                      "the result of the SUCCESS reply: a JSON object (text, "
                      "@FILE or - for standard input)"}}),
  tsq_exit_codes};

std::string opt(const std::optional<std::string>& x) {
  return x ? *x : "";
}

std::string opt(const std::optional<uuid>& x) {
  return x ? x->to_string() : "";
}

std::string error_of(const troubleshooting_item& x) {
  if (!x.last_error_type && !x.last_error_code && !x.last_error_msg)
    return "";
  return opt(x.last_error_type) + " " + opt(x.last_error_code) + ": "
         + opt(x.last_error_msg);
}

void write_item(json_out& out, const troubleshooting_item& x) {
  out.begin_object()
    .field("domain", x.domain)
    .field("command_id", x.command_id)
    .field("command_type", x.command_type)
    .field("status", to_string(x.status))
    .field("attempts", x.attempts)
    .field("max_attempts", x.max_attempts)
    .field("last_error_type", x.last_error_type)
    .field("last_error_code", x.last_error_code)
    .field("last_error_msg", x.last_error_msg)
    .field("correlation_id", x.correlation_id)
    .field("reply_to", x.reply_to)
    .field("batch_id", x.batch_id)
    .field("payload", x.payload)
    .field("created_at", x.created_at)
    .field("updated_at", x.updated_at)
    .end_object();
}

// -- list --------------------------------------------------------------------

int tsq_list(const args& a) {
  a.expect_positional(1, "DOMAIN");
  tsq_filter f;
  f.domain = domain_arg(a);
  f.command_type = a.option("--type");
  f.error_code = a.option("--error-code");
  if (auto b = a.option("--batch"))
    f.batch_id = parse_uuid_arg("--batch", *b);
  f.older_than = a.duration_option("--older-than");
  f.oldest_first = a.flag("--oldest-first");
  f.limit = a.int_option("--limit", 0).value_or(50);
  f.offset = a.int_option("--offset", 0).value_or(0);
  db::pool pool{pool_options_for(a, 1)};
  troubleshooting_queue tsq{pool};
  auto items = tsq.list(f);
  auto total = tsq.count(f);
  if (total == 0)
    note_if_unknown_domain(pool, f.domain);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object().field("total", total).key("items").begin_array();
    for (auto& x : items)
      write_item(out, x);
    out.end_array().end_object();
    out.print(std::cout);
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& x : items)
    rows.push_back(
      {x.command_id.to_string(), x.command_type,
       std::to_string(x.attempts) + "/" + std::to_string(x.max_attempts),
       format_timestamp(x.updated_at), opt(x.batch_id), error_of(x)});
  print_table(std::cout,
              {"command_id", "type", "attempts", "in_tsq_since", "batch_id",
               "last_error"},
              rows);
  if (static_cast<int64_t>(items.size()) < total)
    std::cout << "(" << items.size() << " of " << total << " shown, from "
              << f.offset << ")\n";
  return exit_ok;
}

// -- show --------------------------------------------------------------------

int tsq_show(const args& a) {
  a.expect_positional(2, "DOMAIN and COMMAND_ID");
  auto domain = domain_arg(a);
  auto id = parse_uuid_arg("COMMAND_ID", a.positional()[1]);
  db::pool pool{pool_options_for(a, 1)};
  troubleshooting_queue tsq{pool};
  auto d = tsq.get(domain, id);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object().key("item");
    write_item(out, d.item);
    out.key("errors").begin_array();
    for (auto& e : d.errors)
      out.begin_object()
        .field("event_type", e.event_type)
        .field("ts", e.ts)
        .field("attempt", e.attempt)
        .field("reason", e.reason)
        .field("error_type", e.error_type)
        .field("error_code", e.error_code)
        .field("error_msg", e.error_msg)
        .end_object();
    out.end_array().end_object();
    out.print(std::cout);
    return exit_ok;
  }
  auto& x = d.item;
  print_fields(std::cout,
               {
                 {"domain", x.domain},
                 {"command_id", x.command_id.to_string()},
                 {"command_type", x.command_type},
                 {"status", std::string{to_string(x.status)}},
                 {"attempts", std::to_string(x.attempts) + " of "
                                + std::to_string(x.max_attempts)},
                 {"correlation_id", opt(x.correlation_id)},
                 {"reply_to", opt(x.reply_to)},
                 {"batch_id", opt(x.batch_id)},
                 {"last_error", error_of(x)},
                 {"created_at", format_timestamp(x.created_at)},
                 {"updated_at", format_timestamp(x.updated_at)},
                 {"payload", x.payload ? x.payload->text() : "(not archived)"},
               });
  std::cout << "\nerrors:\n";
  std::vector<std::vector<std::string>> rows;
  for (auto& e : d.errors)
    rows.push_back({format_timestamp(e.ts), e.event_type,
                    e.attempt ? std::to_string(*e.attempt) : "", opt(e.reason),
                    opt(e.error_type), opt(e.error_code), opt(e.error_msg)});
  print_table(std::cout,
              {"ts", "event", "attempt", "reason", "type", "code", "message"},
              rows);
  return exit_ok;
}

// -- retry, cancel, complete -------------------------------------------------

const char* past_tense(tsq_operation::kind k) {
  switch (k) {
    case tsq_operation::kind::retry: return "retried";
    case tsq_operation::kind::cancel: return "canceled";
    default: return "completed";
  }
}

const char* outcome_name(tsq_item_outcome::kind k) {
  switch (k) {
    case tsq_item_outcome::kind::done: return "done";
    case tsq_item_outcome::kind::not_found: return "not_found";
    case tsq_item_outcome::kind::not_in_tsq: return "not_in_tsq";
    default: return "failed";
  }
}

int run_operation(tsq_operation::kind kind, const args& a) {
  auto domain = domain_arg(a);
  std::vector<uuid> named;
  for (size_t i = 1; i < a.positional().size(); ++i)
    named.push_back(parse_uuid_arg("COMMAND_ID", a.positional()[i]));
  bool bulk = a.flag("--all") || a.option("--batch")
              || a.option("--error-code");
  if (named.empty() && !bulk)
    throw usage_error{std::string{"name the commands to "} + to_string(kind)
                      + ": COMMAND_ID..., --all, --batch B or --error-code C"};
  if (!named.empty() && bulk)
    throw usage_error{"COMMAND_IDs and --all, --batch or --error-code "
                      "exclude each other"};
  if (!named.empty() && (a.option("--older-than") || a.option("--limit")))
    throw usage_error{"--older-than and --limit select from the TSQ: use "
                      "them with --all, --batch or --error-code"};
  tsq_operation op;
  op.action = kind;
  op.reason = a.option("--reason");
  if (auto r = a.option("--result"))
    op.result = parse_object_arg("--result", *r);
  op.operator_name = a.option("--operator");
  if (!op.operator_name)
    op.operator_name = default_operator();
  tsq_filter f;
  f.domain = domain;
  f.error_code = a.option("--error-code");
  if (auto b = a.option("--batch"))
    f.batch_id = parse_uuid_arg("--batch", *b);
  f.older_than = a.duration_option("--older-than");
  f.oldest_first = true;
  f.limit = a.int_option("--limit", 0).value_or(-1);
  bool json = a.flag("--json");
  bool dry_run = a.flag("--dry-run");

  db::pool pool{pool_options_for(a, 1)};
  troubleshooting_queue tsq{pool};
  json_out out;
  out.begin_object()
    .field("operation", to_string(kind))
    .field("domain", domain)
    .field("dry_run", dry_run);

  if (dry_run) {
    // What a real run would take now; nothing changes.
    std::vector<troubleshooting_item> items;
    int missing = 0;
    if (bulk) {
      items = tsq.list(f);
    } else {
      for (auto& id : named) {
        try {
          auto d = tsq.get(domain, id);
          if (d.item.status == command_status::in_troubleshooting_queue) {
            items.push_back(d.item);
            continue;
          }
          ++missing;
          std::cerr << "cmdbus: " << not_in_tsq_error{id, d.item.status}.what()
                    << '\n';
        } catch (const command_not_found_error& e) {
          ++missing;
          std::cerr << "cmdbus: " << e.what() << '\n';
        }
      }
    }
    if (json) {
      out.field("matched", items.size()).key("items").begin_array();
      for (auto& x : items)
        write_item(out, x);
      out.end_array().end_object();
      out.print(std::cout);
    } else {
      std::vector<std::vector<std::string>> rows;
      for (auto& x : items)
        rows.push_back({x.command_id.to_string(), x.command_type,
                        opt(x.batch_id), error_of(x)});
      print_table(std::cout, {"command_id", "type", "batch_id", "last_error"},
                  rows);
      std::cout << "dry run: would " << to_string(kind) << ' ' << items.size()
                << " command(s); nothing changed\n";
    }
    return missing > 0 ? exit_not_found : exit_ok;
  }

  auto ids = bulk ? tsq.ids(f) : named;
  if (json)
    out.key("results").begin_array();
  auto result = tsq.apply(domain, ids, op, [&](const tsq_item_outcome& x) {
    if (json) {
      out.begin_object()
        .field("command_id", x.command_id)
        .field("outcome", outcome_name(x.outcome));
      if (x.outcome != tsq_item_outcome::kind::done)
        out.field("error", x.message);
      if (kind == tsq_operation::kind::retry)
        out.field("new_msg_id", x.new_msg_id);
      else
        out.field("batch_id", x.batch.batch_id)
          .field("batch_completed", x.batch.batch_completed);
      out.end_object();
      return;
    }
    if (x.outcome != tsq_item_outcome::kind::done) {
      std::cerr << "cmdbus: "
                << (x.outcome == tsq_item_outcome::kind::failed ? "failed: "
                    : x.outcome == tsq_item_outcome::kind::not_found
                      ? ""
                      : "skipped: ")
                << x.message << '\n';
      return;
    }
    std::cout << past_tense(kind) << ' ' << x.command_id.to_string();
    if (x.new_msg_id)
      std::cout << " (new msg_id " << *x.new_msg_id << ')';
    if (x.batch.batch_completed)
      std::cout << "; batch " << x.batch.batch_id->to_string() << " completed";
    std::cout << '\n';
  });
  if (json) {
    out.end_array()
      .field("matched", result.matched)
      .field("done", result.done)
      .field("skipped", result.skipped)
      .field("not_found", result.not_found)
      .field("failed", result.failed)
      .end_object();
    out.print(std::cout);
  } else {
    std::cout << to_string(kind) << ": " << result.matched << " matched, "
              << result.done << " done, " << result.skipped << " skipped, ";
    if (result.not_found > 0)
      std::cout << result.not_found << " not found, ";
    std::cout << result.failed << " failed\n";
  }
  if (result.failed > 0)
    return exit_failed;
  if (!bulk && (result.skipped > 0 || result.not_found > 0))
    return exit_not_found;
  return exit_ok;
}

int tsq_retry(const args& a) {
  return run_operation(tsq_operation::kind::retry, a);
}

int tsq_cancel(const args& a) {
  return run_operation(tsq_operation::kind::cancel, a);
}

int tsq_complete(const args& a) {
  return run_operation(tsq_operation::kind::complete, a);
}

} // namespace

int run_tsq(const std::vector<std::string>& argv) {
  return run_subcommand("tsq", argv, tsq_command,
                        {{"list", &list_command, tsq_list},
                         {"show", &show_command, tsq_show},
                         {"retry", &retry_command, tsq_retry},
                         {"cancel", &cancel_command, tsq_cancel},
                         {"complete", &complete_command, tsq_complete}});
}

} // namespace cmdbus::cli
