#pragma once

// Command-line options as each is declared once: its name, the name of its
// value in the help, and its help text. The parsers (config/args.cpp for a
// worker's or a node's settings, the tool's apps/args.hpp) read their list
// of options from such a table, and render_options() writes the "Options:"
// block of a help text from the same table. No CAF or libpq includes;
// internal to the libraries (not installed).

#include <string>
#include <string_view>
#include <vector>

namespace cmdbus::config {

/// One command-line option.
struct option {
  /// "--limit".
  std::string_view name;

  /// What its value is called in the help ("N", "HOST:PORT"); empty for a
  /// flag, which takes no value.
  std::string_view metavar;

  /// One or more sentences; render_options() wraps them.
  std::string_view help;

  /// A one-letter alias ("-h"), or empty.
  std::string_view short_name = {};

  /// Whether the option takes no value.
  bool is_flag() const noexcept {
    return metavar.empty();
  }

  /// What the help shows on the left: "-h, --help", "--limit N".
  std::string label() const;
};

/// `-h, --help`, which every command takes.
inline constexpr option help_option{"--help", "", "show this help", "-h"};

/// One entry of an "Options:" block whose text is built at run time (e.g.
/// with the environment variable of a setting appended).
struct option_help {
  std::string label;
  std::string text;
};

/// Renders the entries as the lines of an "Options:" block (without the
/// heading): each label indented by two spaces, its text beside it in one
/// column, wrapped at 79 characters; a label too long for the column has
/// its text on the next line.
std::string render_options(const std::vector<option_help>& entries);

/// The same for a table of options.
std::string render_options(const std::vector<option>& options);

/// Returns the candidate `given` abbreviates, when it abbreviates exactly
/// one; else the candidate nearest to it (edit distance at most a third of
/// its length, at least 2); else "". For "did you mean" hints.
std::string nearest(std::string_view given,
                    const std::vector<std::string>& candidates);

/// Returns the option name `name` most likely meant among `options`, as
/// "; did you mean --x?", or "".
std::string did_you_mean(std::string_view name,
                         const std::vector<std::string>& options);

} // namespace cmdbus::config
