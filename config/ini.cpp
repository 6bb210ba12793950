#include "cmdbus/config/ini.hpp"

#include <algorithm>
#include <cctype>

#include "cmdbus/config/api_config.hpp"
#include "cmdbus/config/node_config.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::config {

namespace detail {

template <class Config>
void ini_parser<Config>::run() {
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

template <class Config>
void ini_parser<Config>::fail(int line, const std::string& message) const {
  throw config_error(file_name_ + ":" + std::to_string(line) + ": " + message);
}

template <class Config>
void ini_parser<Config>::skip_blanks() {
  while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r'))
    ++pos_;
}

template <class Config>
void ini_parser<Config>::skip_comment() {
  while (!at_end() && peek() != '\n')
    ++pos_;
}

template <class Config>
void ini_parser<Config>::skip_space() {
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

template <class Config>
void ini_parser<Config>::end_of_line(const std::string& after) {
  skip_blanks();
  if (peek() == ';')
    skip_comment();
  if (at_end())
    return;
  if (peek() != '\n')
    fail(line_, "unexpected text after " + after);
  next_line();
}

template <class Config>
bool ini_parser<Config>::is_key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
         || c == '.';
}

template <class Config>
void ini_parser<Config>::parse_section() {
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
  if (name == "global") {
    section_.clear();
  } else if (is_named_section(name)
             || std::find(table_.sections.begin(), table_.sections.end(), name)
                  != table_.sections.end()) {
    // (A named section's NAME, e.g. a domain, is validate()'s to check.)
    section_ = std::string{name};
  } else {
    std::vector<std::string> expected_names;
    for (const auto& known : table_.sections)
      expected_names.push_back("[" + std::string{known} + "]");
    const auto& named = table_.named;
    if (!named.prefix.empty())
      expected_names.push_back("[" + std::string{named.prefix} + "NAME]");
    if (!named.nested.empty())
      expected_names.push_back("[" + std::string{named.prefix} + "NAME."
                               + std::string{named.nested} + "."
                               + std::string{named.item_label} + "]");
    if (!named.free.empty())
      expected_names.push_back("[" + std::string{named.prefix} + "NAME."
                               + std::string{named.free} + "]");
    std::string expected;
    for (size_t i = 0; i < expected_names.size(); ++i)
      expected += (i == 0                           ? ""
                   : i + 1 == expected_names.size() ? " or "
                                                    : ", ")
                  + expected_names[i];
    fail(line, "unknown section [" + std::string{name} + "] (expected "
                 + expected + ")");
  }
  end_of_line("the section header [" + std::string{name} + "]");
}

template <class Config>
bool ini_parser<Config>::is_named_section(std::string_view name) const {
  const auto& named = table_.named;
  const auto& prefix = named.prefix;
  if (prefix.empty() || name.size() <= prefix.size()
      || name.compare(0, prefix.size(), prefix) != 0)
    return false;
  auto rest = name.substr(prefix.size());
  auto dot = rest.find('.');
  if (dot == std::string_view::npos)
    return true;
  if (is_free_section(name))
    return true;
  // [PREFIX.NAME.NESTED.ITEM]: NAME and ITEM non-empty, without dots.
  if (named.nested.empty() || dot == 0)
    return false;
  auto tail = rest.substr(dot + 1);
  return tail.size() > named.nested.size() + 1
         && tail.compare(0, named.nested.size(), named.nested) == 0
         && tail[named.nested.size()] == '.'
         && tail.find('.', named.nested.size() + 1) == std::string_view::npos;
}

template <class Config>
bool ini_parser<Config>::is_free_section(std::string_view name) const {
  const auto& named = table_.named;
  if (named.free.empty() || named.prefix.empty()
      || name.size() <= named.prefix.size()
      || name.compare(0, named.prefix.size(), named.prefix) != 0)
    return false;
  auto rest = name.substr(named.prefix.size());
  auto dot = rest.find('.');
  return dot != std::string_view::npos && dot > 0
         && rest.substr(dot + 1) == named.free;
}

template <class Config>
std::pair<std::string, std::string>
ini_parser<Config>::split_named(std::string_view name) const {
  const auto& named = table_.named;
  auto rest = name.substr(named.prefix.size());
  auto dot = rest.find('.');
  if (dot == std::string_view::npos)
    return {std::string{rest}, std::string{}};
  return {std::string{rest.substr(0, dot)},
          std::string{rest.substr(dot + 1 + named.nested.size() + 1)}};
}

template <class Config>
void ini_parser<Config>::parse_entry() {
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
  if (is_free_section(section_)) {
    parse_free_entry(line, key, where);
    return;
  }
  if (is_named_section(section_)) {
    parse_named_entry(line, key, where);
    return;
  }
  const auto* s = find_setting(table_, section_, key);
  if (s == nullptr)
    fail(line, "unknown " + where + key_hint(table_, section_, key));
  auto [it, added] = seen_.emplace(
    std::string{s->section} + " " + std::string{s->key}, line);
  if (!added)
    fail(line, "duplicate " + where + " (first set on line "
                 + std::to_string(it->second) + ")");
  auto value = parse_value(key, true);
  // Converting first reports an unquoted string (e.g. a DSN with spaces)
  // as such rather than as trailing text.
  try {
    s->store(cfg_, value, false);
  } catch (const value_error& e) {
    fail(line, where + " " + e.what());
  }
  end_of_line("the value of '" + key + "'");
}

template <class Config>
void ini_parser<Config>::parse_named_entry(int line, const std::string& key,
                                           const std::string& where) {
  const auto& named = table_.named;
  auto [name, item] = split_named(section_);
  const auto& keys = item.empty() ? named.keys : named.nested_keys;
  auto it = std::find_if(keys.begin(), keys.end(),
                         [&](const auto& k) { return k.key == key; });
  if (it == keys.end()) {
    std::string known;
    for (size_t i = 0; i < keys.size(); ++i)
      known += (i == 0                 ? "'"
                : i + 1 == keys.size() ? " or '"
                                       : ", '")
               + std::string{keys[i].key} + "'";
    fail(line, "unknown " + where + " (a ["
                 + (item.empty() ? std::string{named.prefix} + "NAME"
                                 : std::string{named.prefix} + "NAME."
                                     + std::string{named.nested} + "."
                                     + std::string{named.item_label})
                 + "] section holds " + known + ")");
  }
  auto [seen, added] = seen_.emplace(section_ + " " + key, line);
  if (!added)
    fail(line, "duplicate " + where + " (first set on line "
                 + std::to_string(seen->second) + ")");
  auto value = parse_value(key, true);
  try {
    it->store(cfg_, name, item, value);
  } catch (const value_error& e) {
    fail(line, where + " " + e.what());
  }
  end_of_line("the value of '" + key + "'");
}

template <class Config>
void ini_parser<Config>::parse_free_entry(int line, const std::string& key,
                                          const std::string& where) {
  const auto& named = table_.named;
  auto name = section_.substr(named.prefix.size());
  name = name.substr(0, name.find('.'));
  auto [seen, added] = seen_.emplace(section_ + " " + key, line);
  if (!added)
    fail(line, "duplicate " + where + " (first set on line "
                 + std::to_string(seen->second) + ")");
  auto value = parse_value(key, true);
  try {
    named.free_store(cfg_, name, key, value);
  } catch (const value_error& e) {
    fail(line, where + " " + e.what());
  }
  end_of_line("the value of '" + key + "'");
}

template <class Config>
raw_value ini_parser<Config>::parse_value(const std::string& key, bool top) {
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

template <class Config>
std::string ini_parser<Config>::parse_string() {
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

template <class Config>
raw_value ini_parser<Config>::parse_list(const std::string& key) {
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

template <class Config>
void apply_ini(Config& cfg, const settings_table<Config>& table,
               std::string_view text, const std::string& file_name) {
  ini_parser<Config>{cfg, table, text, file_name}.run();
}

template void apply_ini(worker_config&, const settings_table<worker_config>&,
                        std::string_view, const std::string&);
template void apply_ini(node_config&, const settings_table<node_config>&,
                        std::string_view, const std::string&);
template void apply_ini(api_program_config&,
                        const settings_table<api_program_config>&,
                        std::string_view, const std::string&);

} // namespace detail

void apply_ini(worker_config& cfg, std::string_view text,
               const std::string& file_name) {
  detail::apply_ini(cfg, detail::worker_table(), text, file_name);
}

void apply_ini(node_config& cfg, std::string_view text,
               const std::string& file_name) {
  detail::apply_ini(cfg, detail::node_table(), text, file_name);
}

} // namespace cmdbus::config
