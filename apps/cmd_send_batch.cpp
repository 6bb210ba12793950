#include <fstream>
#include <iostream>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "apps/cli.hpp"
#include "apps/json_out.hpp"
#include "db/command_bus.hpp"
#include "db/pool.hpp"
#include "db/queue_name.hpp"
#include "model/json.hpp"

namespace cmdbus::cli {

namespace {

constexpr const char* send_batch_help
  = R"(usage: cmdbus send-batch DOMAIN --file F.jsonl [--chunk-size N] [--dsn DSN] [--json]

Sends the commands of a JSON-lines file (one JSON object per line; empty
lines are skipped; `--file -` reads standard input) to DOMAIN__commands, in
chunks of N commands (default 1000), one transaction per chunk. Each line:
  {"command_type": "Debit",            required
   "data": {...},                      optional, an object (default {})
   "command_id": "<uuid>",             optional (default: a new UUID)
   "correlation_id": "<uuid>",         optional (default: a new UUID)
   "reply_to": "queue_name",           optional
   "max_attempts": 5}                  optional
The whole file is validated before anything is sent; an invalid line is
reported as FILE:LINE: problem.

Exit codes: 0 sent, 1 invalid input, 2 duplicate command id, 3 database
unavailable, 4 other failure.
)";

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

} // namespace

int run_send_batch(const std::vector<std::string>& argv) {
  args a{argv, {"--help", "--json"}, {"--dsn", "--file", "--chunk-size"}};
  if (a.flag("--help")) {
    std::cout << send_batch_help;
    return exit_ok;
  }
  a.expect_positional(1, "DOMAIN");
  auto domain = a.positional()[0];
  db::validate_domain(domain);
  auto file = a.option("--file");
  if (!file)
    throw usage_error{"--file is required"};
  std::ifstream in;
  std::istream* src = &std::cin;
  if (*file != "-") {
    in.open(*file);
    if (!in)
      throw usage_error{"cannot read " + *file};
    src = &in;
  }
  std::vector<send_request> reqs;
  std::string line;
  for (int n = 1; std::getline(*src, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    reqs.push_back(parse_line(*file + ":" + std::to_string(n), domain, line));
  }
  if (reqs.empty())
    throw usage_error{*file + " holds no commands"};
  command_bus_options opts;
  if (auto n = a.int_option("--chunk-size", 1))
    opts.chunk_size = static_cast<size_t>(*n);
  db::pool pool{pool_options_for(a)};
  command_bus bus{pool, opts};
  auto res = bus.send_batch(reqs);
  auto queue = db::command_queue(domain);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("queue", queue)
      .field("total_commands", res.total_commands)
      .field("chunks", res.chunks_processed)
      .key("results")
      .begin_array();
    for (auto& r : res.results)
      out.begin_object()
        .field("command_id", r.command_id)
        .field("msg_id", r.msg_id)
        .end_object();
    out.end_array().end_object();
    out.print(std::cout);
  } else {
    std::cout << "sent " << res.total_commands << " command(s) to " << queue
              << " in " << res.chunks_processed << " chunk(s)\n";
  }
  return exit_ok;
}

} // namespace cmdbus::cli
