#include "cmdbus/actors/errors.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/message.hpp>

#include "cmdbus/model/errors.hpp"

namespace cmdbus::actors {

std::string to_string(ec x) {
  switch (x) {
    case ec::none: return "none";
    case ec::db_unavailable: return "db_unavailable";
    case ec::db_failed: return "db_failed";
    case ec::handler_failed: return "handler_failed";
    case ec::writer_stuck: return "writer_stuck";
    case ec::protocol_mismatch: return "protocol_mismatch";
    case ec::unknown_domain: return "unknown_domain";
    case ec::remote_unavailable: return "remote_unavailable";
    case ec::unsupported: return "unsupported";
  }
  return "ec(" + std::to_string(static_cast<int>(x)) + ")";
}

void add_error_category(caf::actor_system_config& cfg) {
  // The templated add_error_category<T> of CAF 0.17.6 does not compile (its
  // renderer lacks the category argument): the renderer is given here.
  cfg.add_error_category(ec_category, [](uint8_t code, caf::atom_value,
                                         const caf::message& ctx) {
    auto result = std::string{"cmdbus: "} + to_string(static_cast<ec>(code));
    if (ctx.size() == 1 && ctx.match_element<std::string>(0))
      result += " (" + ctx.get_as<std::string>(0) + ")";
    return result;
  });
}

std::string describe(const caf::error& err) {
  auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return to_string(err);
}

void throw_error(const caf::error& err, const std::string& what) {
  auto text = what + ": " + describe(err);
  if (err.category() == ec_category
      && static_cast<ec>(err.code()) == ec::handler_failed)
    throw transient_command_error("HANDLER_ACTOR_UNAVAILABLE", text);
  throw command_bus_error(text);
}

} // namespace cmdbus::actors
