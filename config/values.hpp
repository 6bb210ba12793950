#pragma once

// Values of settings: as written (a raw_value from the file, the environment
// or the command line), converted to the setting's type, and written back as
// text for messages and describe(). Shared by every configuration (the
// worker's, a handler node's). Internal to cmdbus_config.

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cmdbus::config::detail {

// -- raw values --------------------------------------------------------------

/// A value as written, before conversion to the setting's type.
struct raw_value {
  enum class form { bare, quoted, list };
  form shape = form::bare;
  /// The text of a bare or quoted value.
  std::string text;
  /// The items of a list.
  std::vector<raw_value> items;
};

/// A bare (unquoted) value.
inline raw_value bare(std::string text) {
  return {raw_value::form::bare, std::move(text), {}};
}

/// A quoted string.
inline raw_value quoted(std::string text) {
  return {raw_value::form::quoted, std::move(text), {}};
}

/// A value that does not fit its setting; the message is completed with the
/// place (file:line, variable or option) by the caller.
class value_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// How a setting's value is written.
enum class kind {
  string,
  string_list,
  integer,
  integer_list,
  real,
  boolean,
  /// An integer with a unit (ms, s, min, h, d).
  duration,
  /// Like `duration`, but a bare integer means seconds; whole seconds only.
  seconds_duration,
  /// Like `duration`, but a bare integer means seconds.
  duration_or_seconds,
};

/// Turns an environment or command-line text into a raw value of a setting
/// of type `type`: lists are comma-separated (an empty text is an empty
/// list), strings are taken as is. Throws value_error for an empty list
/// entry.
raw_value from_text(kind type, std::string_view text);

// -- conversion (each throws value_error) --------------------------------

/// A quoted string. Its text is never echoed (it may be a DSN).
std::string as_string(const raw_value& v);

/// A list of quoted strings, or one quoted string.
std::vector<std::string> as_string_list(const raw_value& v);

int as_int(const raw_value& v);

std::vector<int> as_int_list(const raw_value& v);

double as_real(const raw_value& v);

/// true/false; `lenient` (environment and command line) also accepts 1/0
/// and any case.
bool as_bool(const raw_value& v, bool lenient);

/// `<integer><unit>`; without a unit, seconds if `bare_seconds`.
std::chrono::milliseconds as_duration(const raw_value& v, bool bare_seconds);

/// Seconds or a duration of whole seconds.
std::chrono::seconds as_seconds(const raw_value& v);

/// Returns `text` without leading and trailing blanks and line breaks.
std::string_view trim(std::string_view text);

// -- text --------------------------------------------------------------------

/// Returns `x` in milliseconds: "250ms".
std::string ms_text(std::chrono::milliseconds x);

/// Returns `x` in seconds: "30s".
std::string s_text(std::chrono::seconds x);

/// Returns `x` in the shortest exact unit: 1h, 2min, 30s or 250ms.
std::string duration_text(std::chrono::milliseconds x);

/// Returns `x` like duration_text, in days when it is a whole number of
/// days: 30d.
std::string age_text(std::chrono::milliseconds x);

/// Returns the shortest text that reads back as `x`.
std::string real_text(double x);

/// Quotes `text` as a CAF-INI string.
std::string ini_string(std::string_view text);

/// Returns `items` as a CAF-INI list of strings: ["a", "b"].
std::string ini_list(const std::vector<std::string>& items);

} // namespace cmdbus::config::detail
