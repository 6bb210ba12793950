#include "cmdbus/db/queue_name.hpp"

#include "cmdbus/db/error.hpp"

namespace cmdbus::db {

namespace {

bool is_name_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
         || (c >= '0' && c <= '9') || c == '_';
}

// `name` with ASCII upper-case letters lowered, as PostgreSQL folds an
// unquoted identifier.
std::string lower_case(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name)
    out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return out;
}

} // namespace

std::string printable(std::string_view name) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : name) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

std::string queue_name_problem(std::string_view name) {
  if (name.empty())
    return "is empty";
  for (unsigned char c : name)
    if (!is_name_char(c))
      return "may contain only ASCII letters, digits and underscores";
  if (name.size() > max_queue_name_length)
    return "is longer than " + std::to_string(max_queue_name_length)
           + " characters";
  return {};
}

void validate_queue_name(std::string_view name) {
  auto problem = queue_name_problem(name);
  if (!problem.empty())
    throw invalid_argument("invalid queue name " + printable(name) + ": "
                           + problem);
}

void validate_domain(std::string_view domain) {
  auto problem = queue_name_problem(domain);
  if (problem.empty()
      && domain.size() + command_queue_suffix.size() > max_queue_name_length)
    problem = "is longer than "
              + std::to_string(max_queue_name_length
                               - command_queue_suffix.size())
              + " characters (its queue name " + std::string{domain}
              + std::string{command_queue_suffix} + " would exceed "
              + std::to_string(max_queue_name_length) + ")";
  if (!problem.empty())
    throw invalid_argument("invalid domain " + printable(domain) + ": "
                           + problem);
}

std::string command_queue(std::string_view domain) {
  validate_domain(domain);
  return std::string{domain} + std::string{command_queue_suffix};
}

std::string notify_channel(std::string_view queue) {
  validate_queue_name(queue);
  return "pgmq_notify_" + lower_case(queue);
}

std::string queue_table(std::string_view queue) {
  validate_queue_name(queue);
  return "q_" + lower_case(queue);
}

} // namespace cmdbus::db
