#pragma once

// The config file: the subset of CAF's INI format that a worker and a
// handler node read (the worker's file here; a node's has [node], [tls] and
// [admin]).
//
//   ; a comment                      top-level keys, or [global]
//   dsn = "host=db dbname=app"
//   [worker]                         [worker], [retry], [remote], [tls]
//   domains = ["payments",           lists may span lines
//              "reports"]
//   visibility-timeout = 30s
//   [domains.reports]                a domain's own database
//   dsn = "host=db2 dbname=app"
//
// Strings are quoted ("..." or '...', with the escapes \\ \" \' \n \t
// \r); lists are [a, b]; other values are bare. Dotted keys
// (`worker.concurrency`), `key { ... }` blocks, unknown sections or keys,
// duplicate keys and values of the wrong type are errors naming `file:line`,
// with a hint for a misspelt or misplaced key. Internal to cmdbus_config;
// the public entries are the apply_ini() of each configuration.

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "cmdbus/config/settings.hpp"

namespace cmdbus::config::detail {

/// Parses a config file and applies each entry onto a configuration through
/// its settings table as it goes; the first problem throws config_error
/// with `file:line`. Instantiated for worker_config and node_config.
template <class Config>
class ini_parser {
public:
  /// Reads `text` into `cfg`; `file_name` is used in messages. Keeps
  /// references to all four.
  ini_parser(Config& cfg, const settings_table<Config>& table,
             std::string_view text, const std::string& file_name)
    : cfg_(cfg), table_(table), text_(text), file_name_(file_name) {
    // nop
  }

  /// Parses the whole text. Throws config_error.
  void run();

private:
  // -- reading -------------------------------------------------------------

  /// Throws config_error for `line`.
  [[noreturn]] void fail(int line, const std::string& message) const;

  bool at_end() const noexcept {
    return pos_ >= text_.size();
  }

  char peek() const noexcept {
    return at_end() ? '\0' : text_[pos_];
  }

  void next_line() {
    ++pos_;
    ++line_;
  }

  /// Skips spaces, tabs and carriage returns.
  void skip_blanks();

  /// Skips a `;` comment up to the end of the line.
  void skip_comment();

  /// Skips blanks, newlines and comments (inside lists).
  void skip_space();

  /// Expects the end of the line, allowing a trailing comment.
  void end_of_line(const std::string& after);

  /// Returns whether `c` may appear in a key or section name.
  static bool is_key_char(char c);

  // -- grammar -------------------------------------------------------------

  /// Reads `[name]`: `global` is the top level.
  void parse_section();

  /// Returns whether `name` is one of the table's named sections
  /// ([domains.NAME] or a nested [domains.NAME.types.ITEM]).
  bool is_named_section(std::string_view name) const;

  /// Whether `name` is a section of free keys [PREFIX.NAME.FREE].
  bool is_free_section(std::string_view name) const;

  /// NAME and ITEM of a named section's name (ITEM empty unless nested);
  /// `name` must be a named section.
  std::pair<std::string, std::string> split_named(std::string_view name) const;

  /// Reads `key = value` and applies it.
  void parse_entry();

  /// Reads the value of `key` in a named section ([domains.NAME] or a
  /// nested one).
  void parse_named_entry(int line, const std::string& key,
                         const std::string& where);

  /// Reads the value of the free key `key` of a [PREFIX.NAME.FREE] section.
  void parse_free_entry(int line, const std::string& key,
                        const std::string& where);

  /// Reads a quoted string, a list (only at the `top`) or a bare value.
  raw_value parse_value(const std::string& key, bool top);

  /// Reads a quoted string with its escapes.
  std::string parse_string();

  /// Reads `[a, b, ...]`, which may span lines.
  raw_value parse_list(const std::string& key);

  // -- state ---------------------------------------------------------------

  Config& cfg_;
  const settings_table<Config>& table_;
  std::string_view text_;
  const std::string& file_name_;
  size_t pos_ = 0;
  int line_ = 1;
  /// The current section; "" is the top level.
  std::string section_;
  /// Keys set so far ("section key" -> line).
  std::map<std::string, int> seen_;
};

} // namespace cmdbus::config::detail
