#include "apps/values.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include <pwd.h>
#include <unistd.h>

#include "apps/args.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/errors.hpp"

namespace cmdbus::cli {

namespace {

std::string upper(std::string x) {
  for (auto& c : x)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return x;
}

} // namespace

std::string domain_arg(const args& a) {
  if (a.positional().empty())
    throw usage_error{"missing DOMAIN"};
  auto domain = a.positional()[0];
  db::validate_domain(domain);
  return domain;
}

uuid parse_uuid_arg(const std::string& what, const std::string& text) {
  auto id = uuid::parse(text);
  if (!id)
    throw usage_error{what + " is not a valid UUID: '" + text + "'"};
  return *id;
}

json parse_json_arg(const std::string& what, const std::string& text) {
  std::string source = text;
  if (text == "-" || (!text.empty() && text[0] == '@')) {
    std::ostringstream content;
    if (text == "-") {
      content << std::cin.rdbuf();
    } else {
      std::ifstream in{text.substr(1), std::ios::binary};
      if (!in)
        throw usage_error{what + ": cannot read " + text.substr(1) + ": "
                          + std::strerror(errno)};
      content << in.rdbuf();
    }
    source = content.str();
  }
  try {
    return json::parse(source);
  } catch (const decode_error& e) {
    throw usage_error{what + " is not valid JSON: " + e.what()};
  }
}

json parse_object_arg(const std::string& what, const std::string& text) {
  auto value = parse_json_arg(what, text);
  if (!value.is_object())
    throw usage_error{what + " must be a JSON object"};
  return value;
}

command_status parse_status_arg(const std::string& what,
                                const std::string& text) {
  auto name = upper(text);
  if (name == "TSQ")
    name = "IN_TROUBLESHOOTING_QUEUE";
  if (auto s = parse_command_status(name))
    return *s;
  throw usage_error{what + ": unknown status '" + text
                    + "' (choose PENDING, IN_PROGRESS, COMPLETED, FAILED, "
                      "CANCELED or IN_TROUBLESHOOTING_QUEUE, in any case)"};
}

batch_status parse_batch_status_arg(const std::string& what,
                                    const std::string& text) {
  if (auto s = parse_batch_status(upper(text)))
    return *s;
  throw usage_error{what + ": unknown batch status '" + text
                    + "' (choose PENDING, IN_PROGRESS, COMPLETED or "
                      "COMPLETED_WITH_FAILURES, in any case)"};
}

std::chrono::milliseconds parse_duration(const std::string& what,
                                         const std::string& text) {
  size_t pos = 0;
  double n = -1;
  try {
    n = std::stod(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  auto unit = text.substr(pos);
  double scale = 0;
  if (unit.empty() || unit == "s")
    scale = 1000;
  else if (unit == "ms")
    scale = 1;
  else if (unit == "m" || unit == "min")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else if (unit == "d")
    scale = 86'400'000;
  if (pos == 0 || scale == 0 || !std::isfinite(n) || n < 0)
    throw usage_error{what + ": '" + text
                      + "' is not a duration (a number with unit ms, s, m, h "
                        "or d, e.g. 90s or 15m)"};
  return std::chrono::milliseconds{
    static_cast<int64_t>(std::llround(n * scale))};
}

std::optional<std::string> default_operator() {
  for (const char* name : {"USER", "LOGNAME"})
    if (const char* user = std::getenv(name); user != nullptr && *user != '\0')
      return std::string{user};
  if (const passwd* pw = getpwuid(geteuid()); pw != nullptr)
    return std::string{pw->pw_name};
  return std::nullopt;
}

timestamp parse_time_arg(const std::string& what, const std::string& text) {
  auto t = parse_timestamp(text);
  if (!t)
    throw usage_error{what + ": '" + text
                      + "' is not a time (ISO 8601 with a zone, e.g. "
                        "2026-12-01T03:00:00Z)"};
  return *t;
}

std::optional<timestamp> not_before_arg(const args& a) {
  auto delay = a.option(std::string{delay_option.name});
  auto at = a.option(std::string{at_option.name});
  if (delay && at)
    throw usage_error{"--delay and --at exclude each other"};
  if (delay)
    return not_before_in(parse_duration("--delay", *delay));
  if (at)
    return parse_time_arg("--at", *at);
  return std::nullopt;
}

} // namespace cmdbus::cli
