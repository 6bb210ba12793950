#include "cmdbus/actors/handler_registry.hpp"

#include <cxxabi.h>
#include <typeinfo>

namespace cmdbus {

namespace {

// Returns the unqualified, demangled type name of the current exception
// (the reference uses the exception's class name as error code).
std::string exception_type_name(const std::exception& e) {
  int status = 0;
  const char* mangled = typeid(e).name();
  std::unique_ptr<char, void (*)(void*)> demangled{
    abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free};
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  auto pos = name.rfind("::");
  return pos == std::string::npos ? name : name.substr(pos + 2);
}

// Error texts come from application code and exceptions: they are made
// storable (valid UTF-8 without NUL), or their write would fail for ever.
outcome failure(outcome_kind kind, const handler_error& e) {
  outcome out;
  out.kind = kind;
  out.error_code = to_valid_text(e.code());
  out.error_message = to_valid_text(e.error_message());
  out.error_details = e.details().is_object() ? e.details() : json::object();
  return out;
}

} // namespace

void handler_registry::add(const std::string& domain,
                           const std::string& command_type, handler_fn fn,
                           handler_mode mode) {
  if (!handlers_
         .emplace(std::make_pair(domain, command_type),
                  entry{std::move(fn), mode})
         .second)
    throw handler_already_registered_error(domain, command_type);
}

const handler_fn* handler_registry::find(const std::string& domain,
                                         const std::string& type) const {
  auto i = handlers_.find({domain, type});
  return i == handlers_.end() ? nullptr : &i->second.fn;
}

handler_mode handler_registry::mode(const std::string& domain,
                                    const std::string& type) const {
  if (auto i = handlers_.find({domain, type}); i != handlers_.end())
    return i->second.mode;
  return uses(domain, handler_mode::blocking) ? handler_mode::blocking
                                              : handler_mode::non_blocking;
}

bool handler_registry::uses(const std::string& domain,
                            handler_mode mode) const {
  bool any = false;
  for (auto i = handlers_.lower_bound({domain, std::string{}});
       i != handlers_.end() && i->first.first == domain; ++i) {
    if (i->second.mode == mode)
      return true;
    any = true;
  }
  return !any && mode == handler_mode::blocking;
}

std::vector<std::pair<std::string, std::string>>
handler_registry::keys() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& kv : handlers_)
    out.push_back(kv.first);
  return out;
}

outcome handler_registry::run(const received_command& rc,
                              handler_context& ctx) const {
  auto* fn = find(rc.cmd.domain, rc.cmd.command_type);
  if (fn == nullptr) {
    outcome out;
    out.kind = outcome_kind::transient;
    out.error_code = "HandlerNotFoundError";
    out.error_message = "no handler registered for " + rc.cmd.domain + "/"
                        + rc.cmd.command_type;
    return out;
  }
  try {
    outcome out;
    out.result = (*fn)(rc.cmd, ctx);
    return out;
  } catch (const business_rule_error& e) {
    return failure(outcome_kind::business_rule, e);
  } catch (const permanent_command_error& e) {
    return failure(outcome_kind::permanent, e);
  } catch (const transient_command_error& e) {
    return failure(outcome_kind::transient, e);
  } catch (const std::exception& e) {
    outcome out;
    out.kind = outcome_kind::transient;
    out.error_code = to_valid_text(exception_type_name(e));
    out.error_message = to_valid_text(e.what());
    return out;
  } catch (...) {
    outcome out;
    out.kind = outcome_kind::transient;
    out.error_code = "UnknownException";
    out.error_message = "the handler threw a non-standard exception";
    return out;
  }
}

} // namespace cmdbus
