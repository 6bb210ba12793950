#include "cmdbus/actors/exec/exec_handler.hpp"

#include <cstdlib>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/actors/exec/exec_outcome.hpp"

namespace cmdbus::exec {

namespace {

using writer = rapidjson::Writer<rapidjson::StringBuffer>;

void string_member(writer& w, const char* key, const std::string& value) {
  w.Key(key);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}

} // namespace

std::string input_document(const command& cmd, int attempt, int max_attempts,
                           int64_t msg_id) {
  rapidjson::StringBuffer buf;
  writer w{buf};
  w.StartObject();
  string_member(w, "domain", cmd.domain);
  string_member(w, "command_type", cmd.command_type);
  string_member(w, "command_id", cmd.command_id.to_string());
  // The payload was validated when it was decoded: its text goes as is.
  const auto& data = cmd.data.text();
  w.Key("data");
  w.RawValue(data.data(), data.size(), rapidjson::kObjectType);
  w.Key("attempt");
  w.Int(attempt);
  w.Key("max_attempts");
  w.Int(max_attempts);
  w.Key("msg_id");
  w.Int64(msg_id);
  w.Key("correlation_id");
  if (cmd.correlation_id)
    w.String(cmd.correlation_id->to_string().c_str());
  else
    w.Null();
  w.Key("reply_to");
  if (cmd.reply_to)
    w.String(cmd.reply_to->data(),
             static_cast<rapidjson::SizeType>(cmd.reply_to->size()));
  else
    w.Null();
  w.EndObject();
  std::string out{buf.GetString(), buf.GetSize()};
  out += '\n';
  return out;
}

std::vector<std::string> pass_environment(
  const std::vector<std::string>& names,
  const std::function<std::optional<std::string>(const char*)>& getenv) {
  std::vector<std::string> out;
  for (const auto& name : names)
    if (auto value = getenv(name.c_str()))
      out.push_back(name + "=" + *value);
  return out;
}

handler_fn make_exec_handler(std::shared_ptr<const exec_spec> spec) {
  return [spec](const command& cmd, handler_context& ctx) -> json {
    auto input = input_document(cmd, ctx.attempt(), ctx.max_attempts(),
                                ctx.msg_id());
    // The worker's stop (and every tick run) sets the context's cancel
    // flag and then waits for running handlers up to its shutdown
    // timeout: a program is let run to its end, bounded by its own
    // timeout.
    auto run = run_program(spec->argv, spec->env, input, spec->limits);
    return to_result(run, {spec->type, spec->command, spec->limits});
  };
}

void add_exec_handlers(handler_registry& registry,
                       const config::exec_config& cfg,
                       const std::string& domain) {
  auto env = pass_environment(
    cfg.env, [](const char* name) -> std::optional<std::string> {
      if (const char* v = std::getenv(name))
        return std::string{v};
      return std::nullopt;
    });
  for (const auto& [type, command] : config::exec_programs_of(cfg, domain)) {
    auto spec = std::make_shared<exec_spec>();
    spec->type = type;
    spec->command = command;
    spec->argv = config::split_command(command);
    spec->env = env;
    spec->limits.timeout = config::exec_timeout_of(cfg, domain, type);
    spec->limits.kill_grace = cfg.kill_grace;
    spec->limits.max_output = static_cast<size_t>(cfg.max_output);
    registry.add(domain, type, make_exec_handler(std::move(spec)),
                 handler_mode::blocking);
  }
}

} // namespace cmdbus::exec
