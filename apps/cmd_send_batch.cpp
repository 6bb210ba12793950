// `cmdbus send-batch`: the commands of a JSON-lines file, in chunks or as
// one batch.

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/cli/queues.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/json.hpp"

namespace cmdbus::cli {

namespace {

const command_spec send_batch_command{
  R"(usage: cmdbus send-batch DOMAIN --file F.jsonl [--create] [--chunk-size N]
                         [--delay D | --at T] [--dsn DSN] [--json]
       cmdbus send-batch DOMAIN --file F.jsonl --batch [--name NAME]
                         [--batch-id ID] [--custom-data JSON] [--create]
                         [--dsn DSN] [--json]

Sends the commands of a JSON-lines file (one JSON object per line; empty
lines are skipped; `--file -` reads standard input) to DOMAIN__commands.
Each line:
  {"command_type": "Debit",            required
   "data": {...},                      optional, an object (default {})
   "command_id": "<uuid>",             optional (default: a new UUID)
   "correlation_id": "<uuid>",         optional (default: a new UUID)
   "reply_to": "queue_name",           optional
   "max_attempts": 5,                  optional
   "delay": "10min",                   optional: run not before then (a
                                       duration as --delay takes, or a
                                       number of seconds)
   "not_before": "2026-12-01T03:00:00Z", optional: run not before this
                                       time (ISO 8601 with a zone; "at" is
                                       the same field); not with "delay"
   "priority": 10}                     optional, an integer
Any other key is an error. --delay or --at applies to the lines that have
neither "delay" nor "not_before". The whole file is validated before anything is
sent; an invalid line is reported as FILE:LINE: problem.

Without --batch the commands are sent in chunks of N (default 1000), one
transaction per chunk: a failure leaves the chunks before it sent.

With --batch (implied by --name, --batch-id and --custom-data) the file
becomes ONE batch of DOMAIN: the batch row and all its commands are written
in a single transaction (all or nothing), and the batch id is printed.
Follow it with `cmdbus batch show DOMAIN ID` or `cmdbus list DOMAIN --batch
ID`. Batches are created whole: an existing batch id is refused, and nothing
is ever added to an existing batch.
)",
  {{"--file", "F", "the JSON-lines file (`-` for standard input)"},
   {"--create", "",
    "create DOMAIN__commands if it does not exist (without it, a missing "
    "queue is exit code 2)"},
   {"--chunk-size", "N", "commands per transaction (not with --batch)"},
   {"--batch", "", "create one batch of all the file's commands"},
   {"--name", "NAME", "the batch's name"},
   {"--batch-id", "ID", "the batch's id (default: a new UUID)"},
   delay_option,
   at_option,
   {"--custom-data", "JSON",
    "the batch's custom data, an object (JSON text, @FILE, or - for standard "
    "input)"},
   dsn_option,
   dsn_file_option,
   {"--json", "",
    "print the result as JSON: without --batch {queue, total_commands, "
    "chunks, results}, with it {batch_id, total, queue, results}; results "
    "are [{command_id, msg_id}] in file order"},
   help_option},
  R"(
Exit codes: 0 sent, 1 invalid input, 2 duplicate command id, existing batch
id or missing queue, 3 database unavailable, 4 other failure.
)"};

// The keys a line may have.
const std::vector<std::string> line_keys{
  "command_type",   "data",       "command_id",
  "correlation_id", "reply_to",   "max_attempts",
  "delay",          "not_before", "at",
  "priority"};

// Decodes one line of a send-batch file; throws usage_error naming the line.
send_request parse_line(const std::string& where, const std::string& domain,
                        const std::string& line) {
  auto fail = [&](const std::string& why) {
    throw usage_error{where + ": " + why};
  };
  json validated;
  try {
    validated = json::parse(line);
  } catch (const decode_error& e) {
    fail(std::string{"invalid JSON: "} + e.what());
  }
  rapidjson::Document doc;
  doc.Parse(validated.text().c_str());
  if (!doc.IsObject())
    fail("each line must be a JSON object");
  for (auto& m : doc.GetObject()) {
    std::string key{m.name.GetString(), m.name.GetStringLength()};
    if (std::find(line_keys.begin(), line_keys.end(), key) == line_keys.end()) {
      std::string expected;
      for (auto& k : line_keys)
        expected += (expected.empty() ? "" : ", ") + k;
      fail("unknown field \"" + key + "\" (expected " + expected + ")");
    }
  }
  send_request req;
  req.domain = domain;
  auto str = [&](const char* key) -> std::optional<std::string> {
    auto it = doc.FindMember(key);
    if (it == doc.MemberEnd() || it->value.IsNull())
      return std::nullopt;
    if (!it->value.IsString())
      fail(std::string{"field \""} + key + "\" must be a string");
    return std::string{it->value.GetString(), it->value.GetStringLength()};
  };
  auto type = str("command_type");
  if (!type || type->empty())
    fail("missing field \"command_type\"");
  req.command_type = *type;
  if (auto id = str("command_id")) {
    auto x = uuid::parse(*id);
    if (!x)
      fail("field \"command_id\" is not a valid UUID: \"" + *id + "\"");
    req.command_id = *x;
  } else {
    req.command_id = uuid::random();
  }
  if (auto id = str("correlation_id")) {
    auto x = uuid::parse(*id);
    if (!x)
      fail("field \"correlation_id\" is not a valid UUID: \"" + *id + "\"");
    req.correlation_id = *x;
  } else {
    req.correlation_id = uuid::random();
  }
  if (auto q = str("reply_to")) {
    auto problem = db::queue_name_problem(*q);
    if (!problem.empty())
      fail("field \"reply_to\" " + problem);
    req.reply_to = *q;
  }
  if (auto it = doc.FindMember("max_attempts"); it != doc.MemberEnd()) {
    if (!it->value.IsInt() || it->value.GetInt() < 1)
      fail("field \"max_attempts\" must be an integer >= 1");
    req.max_attempts = it->value.GetInt();
  }
  // A delay, or a not-before time ("at" is the same field).
  auto delay = doc.FindMember("delay");
  auto at = str("not_before");
  if (auto alias = str("at")) {
    if (at)
      fail("fields \"not_before\" and \"at\" are the same: give one");
    at = alias;
  }
  if (delay != doc.MemberEnd() && !delay->value.IsNull()) {
    if (at)
      fail("fields \"delay\" and \"not_before\" exclude each other");
    if (delay->value.IsNumber()) {
      auto secs = delay->value.GetDouble();
      if (!std::isfinite(secs) || secs < 0)
        fail("field \"delay\" must be a number of seconds >= 0 or a "
             "duration such as \"10min\"");
      req.not_before = not_before_in(std::chrono::microseconds{
        static_cast<int64_t>(std::llround(secs * 1e6))});
    } else if (delay->value.IsString()) {
      req.not_before = not_before_in(parse_duration(
        where + ": field \"delay\"",
        std::string{delay->value.GetString(), delay->value.GetStringLength()}));
    } else {
      fail("field \"delay\" must be a duration such as \"10min\" or a "
           "number of seconds");
    }
  } else if (at) {
    req.not_before = parse_time_arg(where + ": field \"not_before\"", *at);
  }
  if (auto it = doc.FindMember("priority"); it != doc.MemberEnd()) {
    if (!it->value.IsInt())
      fail("field \"priority\" must be an integer");
    req.priority = it->value.GetInt();
  }
  if (auto it = doc.FindMember("data"); it != doc.MemberEnd()) {
    if (!it->value.IsObject())
      fail("field \"data\" must be an object");
    // The line was validated as a whole: the member's compact
    // re-serialisation is valid JSON too.
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w{buf};
    it->value.Accept(w);
    req.data = json{std::string{buf.GetString(), buf.GetSize()}, json::trusted};
  }
  return req;
}

// The batch form of a parsed line (the batch supplies the domain).
batch_command to_batch_command(send_request req) {
  batch_command c;
  c.command_type = std::move(req.command_type);
  c.command_id = req.command_id;
  c.data = std::move(req.data);
  c.correlation_id = req.correlation_id;
  c.reply_to = std::move(req.reply_to);
  c.max_attempts = req.max_attempts;
  c.not_before = req.not_before;
  c.priority = req.priority;
  return c;
}

void print_results(json_out& out, const std::vector<send_result>& results) {
  out.key("results").begin_array();
  for (auto& r : results)
    out.begin_object()
      .field("command_id", r.command_id)
      .field("msg_id", r.msg_id)
      .end_object();
  out.end_array();
}

// Creates one batch of `reqs`; prints its id.
int create_one_batch(const args& a, const std::string& domain,
                     std::vector<send_request> reqs,
                     const create_batch_options& opts, db::pool& pool) {
  std::vector<batch_command> cmds;
  cmds.reserve(reqs.size());
  for (auto& r : reqs)
    cmds.push_back(to_batch_command(std::move(r)));
  auto queue = db::command_queue(domain);
  require_queue(pool, queue, a.flag("--create"));
  command_bus bus{pool};
  create_batch_result res;
  try {
    res = bus.create_batch(domain, cmds, opts);
  } catch (const invalid_operation_error& e) {
    throw not_found{std::string{e.what()}
                    + ": batches are created whole, nothing is added to an "
                      "existing batch"};
  }
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("batch_id", res.batch_id)
      .field("total", res.total_commands)
      .field("queue", queue);
    print_results(out, res.command_results);
    out.end_object();
    out.print(std::cout);
  } else {
    std::cout << "created batch " << res.batch_id.to_string() << " of "
              << res.total_commands << " command(s) in " << queue << "\n";
  }
  return exit_ok;
}

} // namespace

int run_send_batch(const std::vector<std::string>& argv) {
  args a{argv, send_batch_command};
  if (a.help())
    return print_help(send_batch_command);
  a.expect_positional(1, "DOMAIN");
  auto domain = domain_arg(a);
  auto file = a.option("--file");
  if (!file)
    throw usage_error{"--file is required"};
  bool batch = a.flag("--batch") || a.option("--name") || a.option("--batch-id")
               || a.option("--custom-data");
  auto chunk_size = a.int_option("--chunk-size", 1);
  if (batch && chunk_size)
    throw usage_error{"--chunk-size does not apply to a batch: a batch is "
                      "written in one transaction"};
  if (a.option("--custom-data") == std::string{"-"} && *file == "-")
    throw usage_error{"--file - and --custom-data - cannot both read "
                      "standard input"};
  create_batch_options batch_opts;
  batch_opts.name = a.option("--name");
  if (auto id = a.option("--batch-id"))
    batch_opts.batch_id = parse_uuid_arg("--batch-id", *id);
  if (auto data = a.option("--custom-data"))
    batch_opts.custom_data = parse_object_arg("--custom-data", *data);
  std::ifstream in;
  std::istream* src = &std::cin;
  if (*file != "-") {
    in.open(*file);
    if (!in)
      throw usage_error{"cannot read " + *file};
    src = &in;
  }
  auto default_not_before = not_before_arg(a);
  std::vector<send_request> reqs;
  std::string line;
  for (int n = 1; std::getline(*src, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    reqs.push_back(parse_line(*file + ":" + std::to_string(n), domain, line));
    if (!reqs.back().not_before)
      reqs.back().not_before = default_not_before;
  }
  if (reqs.empty())
    throw usage_error{*file + " holds no commands"};
  db::pool pool{pool_options_for(a)};
  if (batch)
    return create_one_batch(a, domain, std::move(reqs), batch_opts, pool);
  command_bus_options opts;
  if (chunk_size)
    opts.chunk_size = static_cast<size_t>(*chunk_size);
  auto queue = db::command_queue(domain);
  require_queue(pool, queue, a.flag("--create"));
  command_bus bus{pool, opts};
  auto res = bus.send_batch(reqs);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("queue", queue)
      .field("total_commands", res.total_commands)
      .field("chunks", res.chunks_processed);
    print_results(out, res.results);
    out.end_object();
    out.print(std::cout);
  } else {
    std::cout << "sent " << res.total_commands << " command(s) to " << queue
              << " in " << res.chunks_processed << " chunk(s)\n";
  }
  return exit_ok;
}

} // namespace cmdbus::cli
