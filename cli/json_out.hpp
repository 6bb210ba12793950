#pragma once

// JSON output of the `cmdbus` tool, built with RapidJSON's writer (never by
// string concatenation). The tool and worker_main include it; private: not
// installed.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::cli {

/// One JSON document under construction. Objects and arrays are opened and
/// closed explicitly; `field` writes a key and its value in one call.
/// Strings must be valid UTF-8 (database text is).
class json_out {
public:
  json_out();

  json_out& begin_object();
  json_out& end_object();
  json_out& begin_array();
  json_out& end_array();

  /// Writes an object key; the next call writes its value.
  json_out& key(std::string_view name);

  json_out& value(std::string_view x);
  json_out& value(const char* x);
  json_out& value(const std::string& x);
  json_out& value(int64_t x);
  json_out& value(int x);
  json_out& value(size_t x);
  json_out& value(double x);
  json_out& value(bool x);
  json_out& value(const uuid& x);
  json_out& value(timestamp x);
  /// Embeds a validated JSON value as it is.
  json_out& value(const json& x);
  json_out& null();

  /// Writes `null` for an unset optional.
  template <class T>
  json_out& value(const std::optional<T>& x) {
    return x ? value(*x) : null();
  }

  /// Writes `"name": x`.
  template <class T>
  json_out& field(std::string_view name, const T& x) {
    key(name);
    return value(x);
  }

  /// Returns the document's text.
  std::string text() const;

  /// Prints the document and a newline.
  void print(std::ostream& out) const;

private:
  rapidjson::StringBuffer buf_;
  rapidjson::Writer<rapidjson::StringBuffer> w_;
};

/// Writes a command's metadata as an object (every column of the command
/// row; timestamps in ISO 8601).
void write_command(json_out& out, const command_metadata& m);

/// Writes the fields of `write_command` into an object the caller opened
/// (and closes, after fields of its own).
void write_command_fields(json_out& out, const command_metadata& m);

/// Writes an audit event as an object.
void write_audit_event(json_out& out, const audit_event& ev);

/// Writes a batch's metadata as an object, with `progress` (finished
/// commands over total, 0..1).
void write_batch(json_out& out, const batch_metadata& b);

} // namespace cmdbus::cli
