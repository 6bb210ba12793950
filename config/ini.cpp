#include "cmdbus/config/ini.hpp"

#include <algorithm>
#include <cctype>

namespace cmdbus::config {

namespace detail {

void ini_parser::run() {
  while (true) {
    skip_blanks();
    if (at_end())
      return;
    auto c = peek();
    if (c == '\n') {
      next_line();
    } else if (c == ';') {
      skip_comment();
    } else if (c == '[') {
      parse_section();
    } else {
      parse_entry();
    }
  }
}

void ini_parser::fail(int line, const std::string& message) const {
  throw config_error(file_name_ + ":" + std::to_string(line) + ": " + message);
}

void ini_parser::skip_blanks() {
  while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r'))
    ++pos_;
}

void ini_parser::skip_comment() {
  while (!at_end() && peek() != '\n')
    ++pos_;
}

void ini_parser::skip_space() {
  while (true) {
    skip_blanks();
    if (peek() == ';')
      skip_comment();
    else if (peek() == '\n')
      next_line();
    else
      return;
  }
}

void ini_parser::end_of_line(const std::string& after) {
  skip_blanks();
  if (peek() == ';')
    skip_comment();
  if (at_end())
    return;
  if (peek() != '\n')
    fail(line_, "unexpected text after " + after);
  next_line();
}

bool ini_parser::is_key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
         || c == '.';
}

void ini_parser::parse_section() {
  auto line = line_;
  ++pos_;
  auto start = pos_;
  while (!at_end() && peek() != ']' && peek() != '\n')
    ++pos_;
  if (peek() != ']')
    fail(line, "missing ']' in section header");
  auto name = trim(text_.substr(start, pos_ - start));
  ++pos_;
  if (name.empty() || !std::all_of(name.begin(), name.end(), is_key_char))
    fail(line, "invalid section header");
  if (name == "global")
    section_.clear();
  else if (name.size() > domain_section_prefix.size()
           && name.compare(0, domain_section_prefix.size(),
                           domain_section_prefix)
                == 0
           && name.find('.', domain_section_prefix.size())
                == std::string_view::npos)
    // A domain's own settings; whether NAME is served is validate()'s.
    section_ = std::string{name};
  else if (std::find(std::begin(sections), std::end(sections), name)
           != std::end(sections))
    section_ = std::string{name};
  else
    fail(line, "unknown section [" + std::string{name}
                 + "] (expected [worker], [retry], [remote], [tls] or "
                   "[domains.NAME])");
  end_of_line("the section header [" + std::string{name} + "]");
}

void ini_parser::parse_entry() {
  auto line = line_;
  auto start = pos_;
  while (!at_end() && is_key_char(peek()))
    ++pos_;
  auto key = std::string{text_.substr(start, pos_ - start)};
  if (key.empty())
    fail(line, "expected a key, a [section] header or a ';' comment");
  if (key.find('.') != std::string::npos) {
    auto dot = key.rfind('.');
    fail(line, "dotted key '" + key
                 + "' is not allowed in a config file;"
                   " write '"
                 + key.substr(dot + 1) + "' in a ["
                 + key.substr(0, key.find('.')) + "] section");
  }
  skip_blanks();
  if (peek() == '{')
    fail(line, "'" + key + " { ... }' blocks are not supported; use a [" + key
                 + "] section");
  if (peek() != '=')
    fail(line, "expected '=' after key '" + key + "'");
  ++pos_;
  auto where = "key '" + key + "' " + section_label(section_);
  if (section_.compare(0, domain_section_prefix.size(), domain_section_prefix)
      == 0) {
    parse_domain_entry(line, key, where);
    return;
  }
  const auto* s = find_setting(section_, key);
  if (s == nullptr)
    fail(line, "unknown " + where + key_hint(section_, key));
  auto [it, added] = seen_.emplace(
    std::string{s->section} + " " + std::string{s->key}, line);
  if (!added)
    fail(line, "duplicate " + where + " (first set on line "
                 + std::to_string(it->second) + ")");
  auto value = parse_value(key, true);
  // Converting first reports an unquoted string (e.g. a DSN with spaces)
  // as such rather than as trailing text.
  try {
    assign(cfg_, *s, value, false);
  } catch (const value_error& e) {
    fail(line, where + " " + e.what());
  }
  end_of_line("the value of '" + key + "'");
}

void ini_parser::parse_domain_entry(int line, const std::string& key,
                                    const std::string& where) {
  if (key != "dsn")
    fail(line, "unknown " + where + " (a [domains.NAME] section holds 'dsn' "
                 "only)");
  auto [it, added] = seen_.emplace(section_ + " " + key, line);
  if (!added)
    fail(line, "duplicate " + where + " (first set on line "
                 + std::to_string(it->second) + ")");
  auto value = parse_value(key, true);
  try {
    assign_domain_dsn(cfg_, section_.substr(domain_section_prefix.size()),
                      value);
  } catch (const value_error& e) {
    fail(line, where + " " + e.what());
  }
  end_of_line("the value of '" + key + "'");
}

raw_value ini_parser::parse_value(const std::string& key, bool top) {
  skip_blanks();
  auto c = peek();
  if (at_end() || c == '\n' || c == ';')
    fail(line_, "missing value for key '" + key + "'");
  if (c == '"' || c == '\'')
    return quoted(parse_string());
  if (c == '[') {
    if (!top)
      fail(line_, "nested lists are not supported (key '" + key + "')");
    return parse_list(key);
  }
  if (c == '{')
    fail(line_, "brace syntax is not supported (key '" + key + "')");
  auto start = pos_;
  while (!at_end()) {
    c = peek();
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',' || c == ']'
        || c == '[' || c == ';' || c == '"' || c == '\'')
      break;
    ++pos_;
  }
  return bare(std::string{text_.substr(start, pos_ - start)});
}

std::string ini_parser::parse_string() {
  auto line = line_;
  auto quote = peek();
  ++pos_;
  std::string out;
  while (true) {
    if (at_end() || peek() == '\n')
      fail(line, "unterminated string (missing closing quote)");
    auto c = peek();
    ++pos_;
    if (c == quote)
      return out;
    if (c != '\\') {
      out += c;
      continue;
    }
    switch (peek()) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\':
      case '"':
      case '\'': out += peek(); break;
      default:
        fail(line, "invalid escape sequence in a string (use \\\\, \\\", "
                   "\\', \\n, \\t or \\r)");
    }
    ++pos_;
  }
}

raw_value ini_parser::parse_list(const std::string& key) {
  auto open_line = line_;
  ++pos_;
  raw_value list{raw_value::form::list, {}, {}};
  bool expect_item = true;
  while (true) {
    skip_space();
    if (at_end())
      fail(open_line, "unterminated list of key '" + key + "' (missing ']')");
    auto c = peek();
    if (c == ']') {
      ++pos_;
      return list;
    }
    if (c == ',') {
      if (expect_item)
        fail(line_, "unexpected ',' in the list of key '" + key + "'");
      ++pos_;
      expect_item = true;
      continue;
    }
    if (!expect_item)
      fail(line_, "expected ',' or ']' in the list of key '" + key + "'");
    list.items.push_back(parse_value(key, false));
    expect_item = false;
  }
}

} // namespace detail

void apply_ini(worker_config& cfg, std::string_view text,
               const std::string& file_name) {
  detail::ini_parser{cfg, text, file_name}.run();
}

} // namespace cmdbus::config
