#include "cmdbus/actors/exec/exec_outcome.hpp"

#include <csignal>
#include <cstring>
#include <optional>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::exec {

namespace {

/// The most of standard error an error message keeps (its end, where
/// programs say what went wrong).
constexpr size_t message_tail = 2000;

std::string_view trimmed(std::string_view x) {
  auto blank = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
  };
  while (!x.empty() && blank(x.front()))
    x.remove_prefix(1);
  while (!x.empty() && blank(x.back()))
    x.remove_suffix(1);
  return x;
}

std::string ms(std::chrono::milliseconds x) {
  return std::to_string(x.count()) + " ms";
}

/// A failure's code, message and details as the program wrote them.
struct error_document {
  std::string code;
  std::string message;
  json details = json::object();
};

/// Reads `text` as an error document: a JSON object with a string "code",
/// and optionally a string "message" and an object "details".
std::optional<error_document> as_error_document(std::string_view text) {
  text = trimmed(text);
  if (text.empty() || text.front() != '{')
    return std::nullopt;
  rapidjson::Document doc;
  doc.Parse(text.data(), text.size());
  if (doc.HasParseError() || !doc.IsObject())
    return std::nullopt;
  auto code = doc.FindMember("code");
  if (code == doc.MemberEnd() || !code->value.IsString()
      || code->value.GetStringLength() == 0)
    return std::nullopt;
  error_document out;
  out.code = to_valid_text(
    {code->value.GetString(), code->value.GetStringLength()});
  if (auto m = doc.FindMember("message");
      m != doc.MemberEnd() && m->value.IsString())
    out.message = to_valid_text(
      {m->value.GetString(), m->value.GetStringLength()});
  if (auto d = doc.FindMember("details");
      d != doc.MemberEnd() && d->value.IsObject()) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w{buf};
    d->value.Accept(w);
    try {
      out.details = json::parse({buf.GetString(), buf.GetSize()});
    } catch (const std::exception&) {
      // Details jsonb cannot store (\u0000): left out.
    }
  }
  return out;
}

/// The error document of a failed run: standard output, else standard
/// error, else the last line of standard error.
std::optional<error_document> find_error_document(const program_result& r) {
  if (auto d = as_error_document(r.out))
    return d;
  if (auto d = as_error_document(r.err))
    return d;
  auto err = trimmed(r.err);
  auto nl = err.rfind('\n');
  if (nl != std::string_view::npos)
    return as_error_document(err.substr(nl + 1));
  return std::nullopt;
}

/// The end of standard error for a message ("" when it wrote nothing).
std::string stderr_tail(const program_result& r) {
  auto err = trimmed(r.err);
  std::string out;
  if (err.size() > message_tail)
    out = "..." + std::string{err.substr(err.size() - message_tail)};
  else
    out = std::string{err};
  if (r.err_cut)
    out += " (standard error cut)";
  return to_valid_text(out);
}

json details_of(const program_result& r) {
  std::string text = "{";
  auto add = [&](const std::string& member) {
    text += (text.size() > 1 ? "," : "") + member;
  };
  if (r.end == program_end::exited && r.exit_status >= 0)
    add("\"exit_status\":" + std::to_string(r.exit_status));
  if (r.signal != 0)
    add("\"signal\":" + std::to_string(r.signal));
  if (r.out_cut)
    add("\"stdout_cut\":true");
  if (r.err_cut)
    add("\"stderr_cut\":true");
  return json{text + "}", json::trusted};
}

template <class Error>
[[noreturn]] void fail(const program_result& r, const char* fallback_code,
                       const std::string& fallback_message) {
  if (auto doc = find_error_document(r)) {
    auto message = doc->message.empty() ? fallback_message : doc->message;
    throw Error(doc->code, message, doc->details);
  }
  auto tail = stderr_tail(r);
  throw Error(fallback_code,
              tail.empty() ? fallback_message : fallback_message + ": " + tail,
              details_of(r));
}

std::string signal_text(int sig) {
  const char* name = sigabbrev_np(sig);
  return std::to_string(sig) + (name ? std::string{" (SIG"} + name + ")" : "");
}

} // namespace

json to_result(const program_result& r, const run_description& what) {
  auto program = "'" + what.command + "'";
  if (r.out_cut || r.err_cut)
    log::warn("exec {}: the output of {} went beyond {} bytes and was cut "
              "({})",
              what.type, program, what.limits.max_output,
              r.out_cut && r.err_cut ? "standard output and error"
              : r.out_cut            ? "standard output"
                                     : "standard error");
  switch (r.end) {
    case program_end::not_started: {
      const char* name = strerrorname_np(r.spawn_error);
      throw permanent_command_error(
        "EXEC_NOT_STARTED",
        "cannot start " + program + ": " + std::strerror(r.spawn_error)
          + (name ? std::string{" ("} + name + ")" : ""),
        json::object());
    }
    case program_end::timed_out:
      throw transient_command_error(
        "EXEC_TIMEOUT",
        program + " ran longer than its timeout of " + ms(what.limits.timeout)
          + " and was stopped ("
          + (r.signal == SIGKILL
               ? "SIGTERM, then SIGKILL after " + ms(what.limits.kill_grace)
               : std::string{"SIGTERM"})
          + ")",
        details_of(r));
    case program_end::cancelled:
      throw transient_command_error("EXEC_CANCELLED",
                                    "the worker is stopping: " + program
                                      + " was stopped before its end",
                                    details_of(r));
    case program_end::signaled:
      throw transient_command_error("EXEC_KILLED",
                                    program + " was ended by signal "
                                      + signal_text(r.signal),
                                    details_of(r));
    case program_end::exited: break;
  }
  if (r.exit_status < 0)
    throw transient_command_error(
      "EXEC_STATUS_LOST",
      "the exit status of " + program
        + " is unknown: something else in the worker reaped it",
      json::object());
  auto status = std::to_string(r.exit_status);
  if (r.exit_status == exit_transient)
    fail<transient_command_error>(r, "EXEC_TEMPFAIL",
                                  program + " exited with status " + status
                                    + " (temporary failure)");
  if (r.exit_status == exit_business_rule)
    fail<business_rule_error>(r, "EXEC_BUSINESS_RULE",
                              program + " exited with status " + status
                                + " (business rule)");
  if (r.exit_status != 0)
    fail<permanent_command_error>(r, "EXEC_FAILED",
                                  program + " exited with status " + status);
  if (r.out_cut)
    throw permanent_command_error(
      "EXEC_OUTPUT_TOO_LARGE",
      "the standard output of " + program + " went beyond "
        + std::to_string(what.limits.max_output)
        + " bytes (exec max-output) and was cut: it cannot be the result",
      details_of(r));
  auto out = trimmed(r.out);
  if (out.empty())
    return json::null();
  try {
    return json::parse(out);
  } catch (const std::exception& e) {
    throw permanent_command_error("EXEC_BAD_OUTPUT",
                                  "the standard output of " + program
                                    + " is not a JSON document: "
                                    + to_valid_text(e.what()),
                                  details_of(r));
  }
}

} // namespace cmdbus::exec
